//! `ratchet sweep`: cost per connection, throughput and p99 latency against
//! the number of connections in flight, for each arm. It shows how cost grows
//! with load, and where the load generator rather than the server becomes the
//! limit, which is where a comparison stops being about the server. At every
//! level the arms run in the same interleaved blocks, so the ratios at one
//! level are side by side; levels are not.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::bench::environment::Fingerprint;
use crate::bench::samples::Samples;
use crate::bench::servers::arm::Arm;
use crate::referee::compare::{ArmSummary, Comparison};
use crate::referee::figures::{fmt_ci, fmt_ratio, opt, percent};
use crate::review::progress;
use crate::review::svg::{self, Chart, Marker};
use crate::session::Session;

/// Busy fractions above this mean a core was saturated.
const SATURATED: f64 = 0.9;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Level {
    pub connections: usize,
    pub arms: Vec<ArmSummary>,
    /// Every arm but the first against the first, at this level.
    pub comparisons: Vec<Comparison>,
    /// Per arm: generator | server | neither.
    pub limits: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SweepRecord {
    pub swept_at: String,
    pub unit: String,
    #[serde(alias = "blocks")]
    pub sample_count: usize,
    pub threshold: f64,
    pub arms: Vec<String>,
    pub fingerprint: Fingerprint,
    pub levels: Vec<Level>,
}

/// Which side limited a trial: the generator when its cores were saturated
/// and the server's was not, the server when its core was saturated or it
/// had work through every sample of its allotment (the saturated regime).
pub fn limit(a: &ArmSummary) -> &'static str {
    let rationed_busy = a.allotment_used.is_some() && a.unsaturated_samples == 0;
    if a.sut_busy >= SATURATED || rationed_busy {
        "server"
    } else if a.generator_busy.is_some_and(|b| b >= SATURATED) {
        "generator"
    } else {
        "neither"
    }
}

pub fn sweep(
    session: &Session,
    arms: &[Arm],
    levels: &[usize],
    seed: u64,
    fingerprint: Fingerprint,
) -> Result<SweepRecord> {
    let sample_count = session.config().compare.samples;
    let threshold = session.config().compare.threshold;
    let mut out = Vec::new();
    for &connections in levels {
        let mut settings = session.trial_settings();
        settings.connections = connections;
        let mut samples = Samples::new(arms.len());
        progress::measure(
            session,
            &settings,
            arms,
            sample_count,
            seed,
            &mut samples,
            &format!("{connections} connections: "),
        )?;
        let summaries: Vec<ArmSummary> = arms
            .iter()
            .enumerate()
            .map(|(i, a)| samples.arm_summary(i, &a.label))
            .collect();
        out.push(Level {
            connections,
            limits: summaries.iter().map(|a| limit(a).to_string()).collect(),
            comparisons: (1..arms.len())
                .map(|i| samples.compare(i, 0, threshold))
                .collect(),
            arms: summaries,
        });
    }
    Ok(SweepRecord {
        swept_at: crate::clock::now_utc(),
        unit: session.plan.event.unit().into(),
        sample_count,
        threshold,
        arms: arms.iter().map(|a| a.label.clone()).collect(),
        fingerprint,
        levels: out,
    })
}

pub fn render(r: &SweepRecord) -> String {
    let unit = &r.unit;
    let w = r.arms.iter().map(String::len).max().unwrap_or(0).max(8);
    let mut s = format!(
        "sweep: {} samples per level; cost in {unit} per connection (median); ratio to {} at the same level\n\n\
         {:>6}  {:<w$}  {:>5} {:>10} {:>10} {:>9} {:>8} {:>8}  {:<9}  {:>6} {:<16}\n",
        r.sample_count,
        r.arms.first().map_or("-", String::as_str),
        "conns",
        "arm",
        "gate",
        format!("{unit}/conn"),
        "conn/s",
        "p99 us",
        "sut busy",
        "gen busy",
        "limit",
        "ratio",
        "interval"
    );
    for level in &r.levels {
        for (i, a) in level.arms.iter().enumerate() {
            let cmp = i.checked_sub(1).and_then(|j| level.comparisons.get(j));
            s += &format!(
                "{:>6}  {:<w$}  {:>5} {:>10.0} {:>10.0} {:>9} {:>7.0}% {:>8}  {:<9}  {:>6} {:<16}\n",
                level.connections,
                a.arm,
                if a.gate.passed { "pass" } else { "FAIL" },
                a.cost_per_connection.median,
                a.throughput_cps,
                opt(a.latency_us.map(|l| l.p99), 0),
                a.sut_busy * 100.0,
                percent(a.generator_busy),
                level.limits[i],
                fmt_ratio(cmp.and_then(|c| c.ratio_median)),
                fmt_ci(cmp.and_then(|c| c.ratio_interval)),
            );
        }
    }
    s += "limit: generator = its cores saturated while the server's was not (throughput is then the generator's); \
          server = the SUT core saturated\n";
    s
}

const COLORS: [&str; 6] = [
    "#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02",
];

/// One measured quantity of an arm at a level, where it was measured.
type Metric = fn(&ArmSummary) -> Option<f64>;

/// Three charts stacked in one SVG: cost, throughput and p99 latency against
/// connections in flight (log scale). Hollow markers are trials the
/// generator limited.
pub fn chart(r: &SweepRecord) -> String {
    let x_of = |c: usize| (c.max(1) as f64).log2();
    let xs: Vec<f64> = r.levels.iter().map(|l| x_of(l.connections)).collect();
    let (x0, x1) = svg::range(xs.iter().copied(), (0.0, 1.0));
    let ticks: Vec<(f64, String)> = r
        .levels
        .iter()
        .map(|l| (x_of(l.connections), l.connections.to_string()))
        .collect();
    let metrics: [(&str, String, Metric); 3] = [
        ("cost", format!("Cost per connection ({})", r.unit), |a| {
            Some(a.cost_per_connection.median)
        }),
        ("throughput", "Throughput (connections/s)".into(), |a| {
            Some(a.throughput_cps)
        }),
        ("p99", "p99 latency (us)".into(), |a| {
            a.latency_us.map(|l| l.p99)
        }),
    ];
    let mut parts = Vec::new();
    for (id, title, value) in metrics {
        let values = r
            .levels
            .iter()
            .flat_map(|l| l.arms.iter().filter_map(value));
        let (lo, hi) = svg::range(values, (0.0, 1.0));
        let mut c = Chart::new(id, &title, (x0 - 0.3, x1 + 0.3), (lo.min(0.0), hi))
            .labels(
                "connections in flight at each server (log scale); hollow: the generator was the limit",
                &title,
            )
            .x_ticks(ticks.clone());
        for (i, arm) in r.arms.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let measured: Vec<(&Level, f64, f64)> = r
                .levels
                .iter()
                .filter_map(|l| value(&l.arms[i]).map(|y| (l, x_of(l.connections), y)))
                .collect();
            let points: Vec<(f64, f64)> = measured.iter().map(|&(_, x, y)| (x, y)).collect();
            c.line(&points, color, 2.0, false);
            for &(l, x, y) in &measured {
                let marker = if l.limits[i] == "generator" {
                    Marker::Ring
                } else {
                    Marker::Dot
                };
                c.marker(
                    x,
                    y,
                    color,
                    marker,
                    &format!(
                        "{arm} at {} connections: {y:.0} (limit: {})",
                        l.connections, l.limits[i]
                    ),
                );
            }
            c.legend(color, arm);
        }
        parts.push(c.render());
    }
    let height = 420.0;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="850" height="{}" font-family="sans-serif">"#,
        height * parts.len() as f64
    );
    for (i, p) in parts.iter().enumerate() {
        s += &format!(
            r#"<g transform="translate(0 {})">{p}</g>"#,
            height * i as f64
        );
    }
    s + "</svg>\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(sut: f64, generator: f64) -> ArmSummary {
        ArmSummary {
            arm: "a".into(),
            gate: Default::default(),
            cost_per_connection: crate::referee::compare::CostSummary {
                median: 1.0,
                samples: vec![],
            },
            score: 0.0,
            throughput_cps: 0.0,
            latency_us: Default::default(),
            syscalls_per_connection: None,
            completions_per_connection: None,
            context_switches_per_connection: None,
            sut_busy: sut,
            generator_busy: Some(generator),
            generator_headroom: Some(1.0 - generator),
            allotment_used: None,
            throttled_share: None,
            unsaturated_samples: 0,
            endurance: None,
        }
    }

    #[test]
    fn the_saturated_side_is_the_limit() {
        assert_eq!(limit(&summary(0.5, 0.99)), "generator");
        assert_eq!(limit(&summary(0.95, 0.99)), "server");
        assert_eq!(limit(&summary(0.3, 0.4)), "neither");
    }
}
