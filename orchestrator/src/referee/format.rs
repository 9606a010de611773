//! Human-readable rendering of comparison results (the number formats
//! every command's text shares are in [`crate::referee::figures`]). JSON
//! output is the serialized [`crate::referee::report::CompareReport`]
//! itself.

use crate::bench::config::Schedule;
use crate::bench::load::gate;
use crate::referee::compare::{ArmSummary, Comparison};
use crate::referee::cross_checks;
use crate::referee::figures::{fmt_ci, fmt_ratio, opt, percent};
use crate::referee::report::CompareReport;
use crate::referee::verdict::Verdict;

/// The table `compare` and `check` print: how it was measured, one row per
/// arm, each arm's ratio to the baseline, and what the costs leave out.
pub fn compare_table(r: &CompareReport) -> String {
    let w = r
        .arms
        .iter()
        .map(|a| a.arm.len())
        .max()
        .unwrap_or(0)
        .max(12);
    let mut out = how_measured(r);
    out += &column_header(&r.meter.unit, w);
    for a in &r.arms {
        out += &arm_row(a, w);
        out += &arm_notes(a, r.sample_count, w);
    }
    out += &ratios(r, w);
    out += &cross_checks::unaccounted_share(r);
    out += &cross_checks::cgroup_cross_check(r);
    out += &cross_checks::generator_limit(r);
    out
}

/// An arm's endurance run in a line: what one process served, what it
/// held at its first and last checkpoints, and the gate's word.
pub fn endurance_line(a: &ArmSummary) -> Option<String> {
    let e = a.endurance.as_ref()?;
    let held = match (e.footprints.first(), e.footprints.last()) {
        (Some(f), Some(l)) => format!(
            "; anonymous memory {} -> {} KiB, descriptors {} -> {}, sockets {} -> {}",
            f.anon_kib, l.anon_kib, f.descriptors, l.descriptors, f.sockets, l.sockets
        ),
        _ => String::new(),
    };
    let word = if e.gate.passed {
        "passed".to_string()
    } else {
        format!(
            "FAILED {} {}",
            gate::fmt_reasons(&e.gate.reasons),
            e.gate.detail.join("; ")
        )
    };
    Some(format!(
        "endurance {}: {} of {} connections in one process, {:.1} s{held}: {word}\n",
        a.arm, e.completed, e.connections, e.seconds
    ))
}

/// The meter, schedule and threshold, the environment's warnings and the
/// regime: what a reader needs before any number.
fn how_measured(r: &CompareReport) -> String {
    let unit = &r.meter.unit;
    let mut out = format!(
        "meter: {} (cost per connection in {unit}); schedule {}, {} {}; threshold {:.1}%\n\n",
        r.environment.meter_reason,
        r.schedule.name(),
        r.sample_count,
        if r.schedule == Schedule::Duet {
            "windows"
        } else {
            "blocks"
        },
        r.threshold * 100.0
    );
    if r.environment.privilege.starts_with("warning") {
        out += &format!("{}\n\n", r.environment.privilege);
    }
    if r.environment.containment.starts_with("warning") {
        out += &format!("{}\n\n", r.environment.containment);
    }
    out += &format!("regime: {}\n", r.regime.describe());
    if let Some(w) = &r.regime.warning {
        out += &format!("warning: regime: {w}\n");
    }
    out + "\n"
}

fn column_header(unit: &str, w: usize) -> String {
    format!(
        "{:<w$} {:>6} {:>14} {:>10} {:>10} {:>8} {:>8} {:>9} {:>9} {:>7} {:>8} {:>8} {:>7}\n",
        "arm",
        "gate",
        format!("{unit}/conn"),
        "score",
        "conn/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "sysc/conn",
        "cs/conn",
        "sut busy",
        "gen busy",
        "allot"
    )
}

fn arm_row(a: &ArmSummary, w: usize) -> String {
    format!(
"{:<w$} {:>6} {:>14.0} {:>10.1} {:>10.0} {:>8} {:>8} {:>9} {:>9} {:>7} {:>7.0}% {:>8} {:>7}\n",
        a.arm,
        if a.gate.passed { "pass" } else { "FAIL" },
        a.cost_per_connection.median,
        a.score,
        a.throughput_cps,
        opt(a.latency_us.map(|l| l.p50), 0),
        opt(a.latency_us.map(|l| l.p99), 0),
        opt(a.latency_us.map(|l| l.p999), 0),
        opt(a.syscalls_per_connection, 2),
        opt(a.context_switches_per_connection, 3),
        a.sut_busy * 100.0,
        percent(a.generator_busy),
        percent(a.allotment_used),
    )
}

/// Under an arm's row: the samples it left unscored for running out of
/// work, and its gate's counts and first reasons wherever it failed or
/// saw failures it tolerated.
fn arm_notes(a: &ArmSummary, samples: usize, w: usize) -> String {
    let mut out = String::new();
    if a.unsaturated_samples > 0 {
        out += &format!(
            "{:<w$} ran out of work in {} of {} samples (see saturation.*: it used too little of its allotment, slept too often or was too rarely throttled): those samples are not scored\n",
            "",
            a.unsaturated_samples,
            samples,
        );
    }
    if !a.gate.passed || !a.gate.reasons.is_empty() {
        out += &format!(
            "{:<w$} attempts {} completed {} failures {} (rate {:.6}) {}\n",
            "",
            a.gate.attempts,
            a.gate.completed,
            a.gate.failures,
            a.gate.failure_rate,
            crate::bench::load::gate::fmt_reasons(&a.gate.reasons)
        );
        for d in a.gate.detail.iter().take(3) {
            out += &format!("{:<w$} {}\n", "", d.lines().next().unwrap_or(""));
        }
    }
    out
}

/// Every arm's ratio to the first, with the drift its intervals carry.
fn ratios(r: &CompareReport, w: usize) -> String {
    let mut out = String::new();
    if let Some(base) = r.arms.first() {
        out += &format!(
            "\nagainst {} (ratio = cost / baseline cost; < 1 is cheaper):\n",
            base.arm
        );
    }
    if let Some(d) = r.comparisons.iter().find_map(|c| c.drift) {
        out += &format!(
            "  (each CI95 adds the meter's spread between measurements, {:.1}% (meter.task_clock_drift): \
             it holds for a measurement at another time, not only this one's minute)\n",
            d * 100.0
        );
    }
    for c in &r.comparisons {
        out += &format!(
            "  {:<w$} ratio {} CI95 {}  cv {}  => {} ({})\n",
            r.arms[c.arm].arm,
            fmt_ratio(c.ratio_median),
            fmt_ci(c.ratio_interval),
            opt(c.ratio_cv, 3),
            c.verdict.name(),
            change(c)
        );
    }
    out
}

/// How much cheaper or costlier an arm was, where it could be judged.
fn change(c: &Comparison) -> String {
    match (c.verdict, c.ratio_median) {
        (Verdict::Better | Verdict::Promising | Verdict::Worse | Verdict::Same, Some(m))
            if m < 1.0 =>
        {
            format!("{:.1}% cheaper", (1.0 - m) * 100.0)
        }
        (Verdict::Better | Verdict::Promising | Verdict::Worse | Verdict::Same, Some(m)) => {
            format!("{:.1}% costlier", (m - 1.0) * 100.0)
        }
        _ => "gate failed".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::environment::Fingerprint;
    use crate::bench::host::trial::{Latency, Measurement};
    use crate::bench::load::gate::GateResult;
    use crate::bench::meters::meter::{MeterEvent, MeterReading};
    use crate::bench::regime::RegimeRecord;
    use crate::bench::servers::cgroup::Allotment;
    use crate::referee::compare::CostSummary;
    use crate::referee::report::MeterInfo;

    fn arm(name: &str, cost: f64, gate: GateResult) -> ArmSummary {
        ArmSummary {
            arm: name.into(),
            gate,
            cost_per_connection: CostSummary {
                median: cost,
                samples: vec![cost],
            },
            score: 1e9 / cost,
            throughput_cps: 21_345.6,
            latency_us: Some(Latency {
                p50: 101.4,
                p99: 340.6,
                p999: 1_210.2,
            }),
            syscalls_per_connection: Some(6.004),
            completions_per_connection: None,
            context_switches_per_connection: None,
            sut_busy: 0.52,
            generator_busy: Some(0.94),
            generator_headroom: Some(0.06),
            allotment_used: Some(0.815),
            throttled_share: None,
            unsaturated_samples: 0,
            endurance: None,
        }
    }

    fn comparison(arm: usize, median: Option<f64>, verdict: Verdict) -> Comparison {
        Comparison {
            arm,
            baseline: 0,
            ratio_median: median,
            ratio_interval: median.map(|m| [m - 0.01, m + 0.02]),
            ci_level: 0.975,
            ci_coverage: None,
            drift: Some(0.035),
            verdict,
            ratio_cv: median.map(|_| 0.0123),
            block_ratios: vec![],
        }
    }

    fn sample(unaccounted: f64, cgroup_ns: u64) -> Measurement {
        Measurement {
            sut_unaccounted: Some(unaccounted),
            meter_delta: MeterReading {
                task_clock_ns: 1_000,
                cgroup_ns: Some(cgroup_ns),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Three arms: a baseline, a cheaper one that ran out of work, and one
    /// whose gate failed, under every warning the table can carry.
    fn report() -> CompareReport {
        let passed = GateResult {
            passed: true,
            attempts: 40_000,
            completed: 40_000,
            ..Default::default()
        };
        let mut failed = GateResult {
            attempts: 900,
            completed: 880,
            failures: 20,
            failure_rate: 20.0 / 900.0,
            ..Default::default()
        };
        failed
            .reasons
            .insert(crate::bench::load::gate::GateReason::Reset, 20);
        failed.detail = ["one\nsecond line", "two", "three", "four"]
            .map(String::from)
            .into();
        let mut cheaper = arm("treatment-with-a-long-name", 7_250.4, passed.clone());
        cheaper.unsaturated_samples = 2;
        cheaper.context_switches_per_connection = Some(0.0456);
        let mut broken = arm("broken", 9_100.0, failed);
        broken.allotment_used = None;
        broken.syscalls_per_connection = None;
        CompareReport {
            meter: MeterInfo {
                event: MeterEvent::TaskClock,
                unit: "ns".into(),
                source: None,
            },
            schedule: Schedule::Duet,
            orders: vec![],
            threshold: 0.03,
            sample_count: 12,
            arms: vec![arm("control", 8_000.0, passed), cheaper, broken],
            comparisons: vec![
                comparison(1, Some(0.9063), Verdict::Better),
                comparison(2, None, Verdict::Invalid),
            ],
            environment: Fingerprint {
                meter_reason: "task-clock: no PMU here".into(),
                privilege: "warning: servers run as root".into(),
                containment: "warning: no cgroup".into(),
                ..Default::default()
            },
            regime: RegimeRecord {
                allotment: Some(Allotment {
                    quota_us: 1_000,
                    period_us: 8_000,
                }),
                generator_capacity_cps: Some(31_000.0),
                warning: Some("the probe may have read its start-up".into()),
                ..Default::default()
            },
            trials: vec![
                vec![sample(0.04, 1_000), sample(0.02, 1_200)],
                vec![sample(0.08, 1_000)],
                vec![Measurement::default()],
            ],
            dropped: vec![],
        }
    }

    /// Pins the whole table, so a change to any part of it is seen.
    #[test]
    fn the_comparison_table_reads_as_it_always_has() {
        let expected = [
            "meter: task-clock: no PMU here (cost per connection in ns); schedule duet, 12 windows; threshold 3.0%",
            "",
            "warning: servers run as root",
            "",
            "warning: no cgroup",
            "",
            "regime: saturated: every arm rationed to 1000 us per 8000 us (12.5% of the SUT core), generator capacity about 31000 conn/s",
            "warning: regime: the probe may have read its start-up",
            "",
            "arm                          gate        ns/conn      score     conn/s   p50 us   p99 us  p99.9 us sysc/conn cs/conn sut busy gen busy   allot",
            "control                      pass           8000   125000.0      21346      101      341      1210      6.00       -      52%      94%     82%",
            "treatment-with-a-long-name   pass           7250   137923.4      21346      101      341      1210      6.00   0.046      52%      94%     82%",
            "                           ran out of work in 2 of 12 samples (see saturation.*: it used too little of its allotment, slept too often or was too rarely throttled): those samples are not scored",
            "broken                       FAIL           9100   109890.1      21346      101      341      1210         -       -      52%      94%       -",
            "                           attempts 900 completed 880 failures 20 (rate 0.022222) {\"reset\": 20}",
            "                           one",
            "                           two",
            "                           three",
            "",
            "against control (ratio = cost / baseline cost; < 1 is cheaper):",
            "  (each CI95 adds the meter's spread between measurements, 3.5% (meter.task_clock_drift): it holds for a measurement at another time, not only this one's minute)",
            "  treatment-with-a-long-name ratio 0.906 CI95 [0.896, 0.926]  cv 0.012  => better (9.4% cheaper)",
            "  broken                     ratio - CI95 -  cv -  => invalid (gate failed)",
            "",
            "SUT core: 4.0% of its busy time (median over samples, range 2.0-8.0%) ran in no arm: kernel threads, interrupts, other processes",
            "cross-check: the servers' cgroups used 1.067x the CPU time their counters saw (per arm 1.10, 1.00)",
            "",
            "note: the load generator used 94% of its cores while the SUT core was at most 52% busy: the generator, not the server, is the limit; costs per connection remain comparable, throughput does not.",
            "",
        ]
        .join("\n");
        assert_eq!(compare_table(&report()), expected);
    }

    /// The least a table can hold: the blocks schedule, one arm, no
    /// warning, nothing to compare and no sample to cross-check.
    #[test]
    fn a_bare_table_has_no_notes() {
        let mut r = report();
        r.schedule = Schedule::Blocks;
        r.environment = Fingerprint::default();
        r.regime = RegimeRecord::default();
        r.arms.truncate(1);
        r.arms[0].generator_busy = Some(0.5);
        r.comparisons.clear();
        r.trials.clear();
        let expected = [
            "meter:  (cost per connection in ns); schedule blocks, 12 blocks; threshold 3.0%",
            "",
            "regime: idle: servers not rationed; they sleep between arrivals when the generator is the limit",
            "",
            "arm            gate        ns/conn      score     conn/s   p50 us   p99 us  p99.9 us sysc/conn cs/conn sut busy gen busy   allot",
            "control        pass           8000   125000.0      21346      101      341      1210      6.00       -      52%      50%     82%",
            "",
            "against control (ratio = cost / baseline cost; < 1 is cheaper):",
            "",
        ]
        .join("\n");
        assert_eq!(compare_table(&r), expected);
    }

    /// An emulated backlog times no connection and runs no generator
    /// beside the server: its row shows those columns unmeasured.
    #[test]
    fn what_was_not_measured_is_a_dash_never_a_zero() {
        let mut a = arm("control", 8000.0, GateResult::default());
        a.latency_us = None;
        a.generator_busy = None;
        a.allotment_used = None;
        let row = arm_row(&a, 14);
        assert_eq!(
            row.split_whitespace().collect::<Vec<_>>(),
            [
                "control", "FAIL", "8000", "125000.0", "21346", "-", "-", "-", "6.00", "-", "52%",
                "-", "-"
            ],
            "{row}"
        );
    }
}
