//! The report's four charts, one per section: cost of every attempt with
//! the champion's staircase, ratio intervals against the keep line, the
//! champion against the control, and where the CPU time goes.

use std::collections::BTreeMap;

use crate::bench::meters::profile::Profile;
use crate::record::lineage::Lineage;
use crate::record::recorded::RecordedRun;
use crate::referee::verdict::AttemptVerdict;
use crate::review::svg::{range, Chart, Marker, PointStyle};

pub const KEPT: &str = "#1b9e77";
pub const DISCARDED: &str = "#7f7f7f";
pub const PROMISING: &str = "#a6761d";
pub const FAILED: &str = "#d95f02";
/// Each chart's own ink, so a rendering check can tell that each was drawn.
pub const STAIRCASE: &str = "#2166ac";
pub const INTERVAL: &str = "#5e3c99";
pub const CONTROL: &str = "#e7298a";
pub const PROFILE_BASE: &str = "#e6ab02";
pub const PROFILE_CHAMPION: &str = "#66a61e";

/// The sections, in order; each holds exactly one chart.
pub const SECTIONS: [&str; 4] = ["cost", "ratios", "control", "profile"];

pub fn style(verdict: AttemptVerdict) -> (&'static str, Marker) {
    match verdict {
        AttemptVerdict::Keep => (KEPT, Marker::Dot),
        AttemptVerdict::Discard => (DISCARDED, Marker::Ring),
        AttemptVerdict::Promising => (PROMISING, Marker::Ring),
        AttemptVerdict::Screened => (DISCARDED, Marker::Ring),
        AttemptVerdict::Invalid => (FAILED, Marker::Cross),
        _ => (FAILED, Marker::Square),
    }
}

fn x_ticks(n: usize) -> Vec<(f64, String)> {
    let step = (n / 15).max(1);
    (0..=n)
        .filter(|i| i % step == 0)
        .map(|i| {
            let label = if i == 0 {
                "start".into()
            } else {
                i.to_string()
            };
            (i as f64, label)
        })
        .collect()
}

pub fn cost_chart(run: &RecordedRun, lineage: &Lineage) -> String {
    let unit = run.unit();
    let n = run.attempts.len();
    let costs: Vec<(usize, Option<f64>, Option<f64>)> = run
        .attempts
        .iter()
        .map(|a| {
            let of = |arm: usize| {
                a.samples
                    .as_ref()
                    .map(|s| s.arm_summary(arm, "").cost_per_connection.median)
                    .filter(|c| *c > 0.0)
            };
            (a.number, of(1), of(0))
        })
        .collect();
    // Every attempt re-measures the champion; divided by the champion's
    // cumulative ratio, each gives the start's cost on that attempt's
    // machine. Their median anchors the staircase against drift.
    let cumulative_at = |n: usize| {
        lineage
            .steps
            .iter()
            .take_while(|s| s.attempt < n)
            .last()
            .map_or(1.0, |s| s.cumulative)
    };
    let implied: Vec<f64> = costs
        .iter()
        .filter_map(|(n, _, champion)| Some((*champion)? / cumulative_at(*n)))
        .collect();
    let start = if implied.is_empty() {
        run.run.baseline_cost.unwrap_or(0.0)
    } else {
        crate::referee::stats::median(&implied)
    };
    let mut stairs = vec![(0.0, start)];
    for s in &lineage.steps[1..] {
        stairs.push((s.attempt as f64, start * s.cumulative));
    }
    stairs.push((
        n as f64,
        start * lineage.steps.last().map_or(1.0, |s| s.cumulative),
    ));
    let all = costs
        .iter()
        .flat_map(|c| [c.1, c.2])
        .flatten()
        .chain(stairs.iter().map(|s| s.1));
    let (lo, hi) = range(all, (0.0, 1.0));
    let mut c = Chart::new(
        "cost",
        &format!("Cost per connection of every attempt ({unit})"),
        (-0.5, n as f64 + 0.5),
        (lo * 0.9, hi),
    )
    .labels(
        "attempt",
        &format!("{unit} per connection (median of blocks)"),
    )
    .x_ticks(x_ticks(n));
    c.line(&stairs, STAIRCASE, 2.5, true);
    for (number, candidate, champion) in &costs {
        let a = run.attempt(*number).expect("listed attempt");
        if let Some(ch) = champion {
            c.marker(
                *number as f64,
                *ch,
                STAIRCASE,
                Marker::Ring,
                &format!("#{number}: champion measured at {ch:.0} {unit}"),
            );
        }
        let (color, marker) = style(a.verdict);
        let y = candidate.unwrap_or(lo * 0.9);
        let tip = match candidate {
            Some(v) => format!("#{number} {}: {v:.0} {unit} — {}", a.verdict, a.hypothesis),
            None => format!("#{number} {} (not measured) — {}", a.verdict, a.hypothesis),
        };
        c.marker(*number as f64, y, color, marker, &tip);
    }
    c.legend(
        STAIRCASE,
        "champion: kept ratios applied to the start cost (rings: champion as measured)",
    );
    c.legend(KEPT, "kept");
    c.legend(DISCARDED, "discarded");
    c.legend(FAILED, "invalid / not measured (at the floor)");
    c.render()
}

/// The coverage of the intervals drawn, as recorded with each: a title
/// that said 95% once sat above intervals at 97.5% a look.
fn levels(levels: impl Iterator<Item = f64>) -> String {
    let mut v: Vec<f64> = levels.filter(|l| *l > 0.0).collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    let pct = |l: f64| format!("{}%", (l * 1000.0).round() / 10.0);
    match (v.first(), v.last()) {
        (Some(&a), Some(&b)) if a == b => pct(a),
        (Some(&a), Some(&b)) => format!("{}-{}", pct(a).trim_end_matches('%'), pct(b)),
        _ => "unrecorded".into(),
    }
}

pub fn ratio_chart(run: &RecordedRun) -> String {
    let n = run.attempts.len();
    let threshold = run.threshold();
    let points: Vec<(usize, f64, [f64; 2], AttemptVerdict)> = run
        .attempts
        .iter()
        .filter_map(|a| {
            let c = a.vs_champion.as_ref()?;
            Some((a.number, c.ratio_median?, c.ratio_interval?, a.verdict))
        })
        .collect();
    let values = points
        .iter()
        .flat_map(|p| [p.1, p.2[0], p.2[1]])
        .chain([1.0, 1.0 - threshold]);
    let (lo, hi) = range(values, (0.8, 1.2));
    let level = levels(
        run.attempts
            .iter()
            .filter_map(|a| a.vs_champion.as_ref().map(|c| c.ci_level)),
    );
    let mut c = Chart::new(
        "ratios",
        "Cost ratio to the champion, with its interval",
        (-0.5, n as f64 + 0.5),
        (lo, hi),
    )
    .labels("attempt", "candidate / champion (< 1 is cheaper)")
    .x_ticks(x_ticks(n));
    c.reference(1.0, "#444", "1 = no change", false);
    c.reference(
        1.0 - threshold,
        "#b2182b",
        &format!("keep line {:.3}", 1.0 - threshold),
        true,
    );
    for (number, median, [l, h], verdict) in points {
        let (color, marker) = style(verdict);
        c.estimate(
            number as f64,
            median,
            Some([l, h]),
            PointStyle {
                color,
                marker,
                interval: INTERVAL,
            },
            &format!("#{number} {verdict}: {median:.3} [{l:.3}, {h:.3}]"),
        );
    }
    c.legend(
        INTERVAL,
        &format!("interval of the median sample ratio, {level} (the keep rule's level a look; exact order statistics)"),
    );
    c.legend(KEPT, "kept");
    c.legend(PROMISING, "promising (interval below 1, short of the line)");
    c.legend(DISCARDED, "discarded");
    c.render()
}

pub fn control_chart(run: &RecordedRun) -> String {
    let n = run.attempts.len();
    let points: Vec<(usize, f64, Option<[f64; 2]>)> = run
        .attempts
        .iter()
        .filter_map(|a| {
            let c = a.champion_vs_control.as_ref()?;
            Some((a.number, c.ratio_median?, c.ratio_interval))
        })
        .collect();
    let values = points
        .iter()
        .flat_map(|p| [Some(p.1), p.2.map(|c| c[0]), p.2.map(|c| c[1])])
        .flatten()
        .chain([1.0]);
    let (lo, hi) = range(values, (0.0, 1.2));
    let level = levels(
        run.attempts
            .iter()
            .filter_map(|a| a.champion_vs_control.as_ref().map(|c| c.ci_level)),
    );
    let mut c = Chart::new(
        "control",
        "The champion against the frozen control, in every attempt",
        (-0.5, n as f64 + 0.5),
        (lo.min(0.0), hi),
    )
    .labels("attempt", "champion cost / control cost")
    .x_ticks(x_ticks(n));
    c.reference(1.0, "#444", "the Go control", false);
    for (number, median, ci) in &points {
        c.estimate(
            *number as f64,
            *median,
            *ci,
            PointStyle {
                color: CONTROL,
                marker: Marker::Dot,
                interval: CONTROL,
            },
            &format!("champion in attempt #{number}: {median:.3} of the control"),
        );
    }
    let line: Vec<(f64, f64)> = points.iter().map(|p| (p.0 as f64, p.1)).collect();
    c.line(&line, CONTROL, 2.0, false);
    if let Some(first) = points.first() {
        c.text(first.0 as f64, first.1, "baseline");
    }
    if let Some(last) = points.last().filter(|_| points.len() > 1) {
        c.text(last.0 as f64, last.1, "champion");
    }
    c.legend(
        CONTROL,
        &format!("champion / control, median and {level} interval"),
    );
    c.render()
}

pub fn profile_chart(
    base: Option<&Profile>,
    champion: Option<&Profile>,
    champion_at: usize,
) -> String {
    let groups = ["kernel", "server", "liburing", "libc", "other"];
    let shares = |p: &Profile| -> BTreeMap<&str, f64> {
        let mut m: BTreeMap<&str, f64> = groups
            .iter()
            .map(|g| (*g, p.dso_shares.get(*g).copied().unwrap_or(0.0)))
            .collect();
        let listed: f64 = p.dso_shares.values().sum();
        *m.entry("other").or_default() += (1.0 - listed).max(0.0);
        m
    };
    let unit = champion.or(base).map_or("cpu-clock samples", Profile::unit);
    let title = format!("Where the server's work goes ({unit}, share by DSO)");
    let mut c = Chart::new(
        "profile",
        &title,
        (-0.5, groups.len() as f64 - 0.5),
        (0.0, 1.0),
    )
    .labels(
        "DSO group (other: unattributed, or below perf's 0.3% cut)",
        "share",
    )
    .x_ticks(
        groups
            .iter()
            .enumerate()
            .map(|(i, g)| (i as f64, g.to_string()))
            .collect(),
    );
    for (p, color, offset, who) in [
        (base, PROFILE_BASE, -0.18, "baseline".to_string()),
        (
            champion,
            PROFILE_CHAMPION,
            0.18,
            format!("champion (attempt {champion_at})"),
        ),
    ] {
        match p {
            Some(p) => {
                let shares = shares(p);
                for (i, g) in groups.iter().enumerate() {
                    let v = shares[g];
                    c.bar(
                        i as f64 + offset,
                        0.34,
                        v,
                        color,
                        &format!("{who}: {g} {:.1}%", v * 100.0),
                    );
                }
                c.legend(color, &who);
            }
            None => c.legend(color, &format!("{who}: no profile recorded")),
        }
    }
    c.render()
}

#[cfg(test)]
mod tests {
    use super::levels;

    #[test]
    fn the_level_drawn_is_the_level_recorded() {
        assert_eq!(levels([0.975, 0.975].into_iter()), "97.5%");
        assert_eq!(levels([0.95, 0.975, 0.95].into_iter()), "95-97.5%");
        assert_eq!(levels(std::iter::empty()), "unrecorded");
    }
}
