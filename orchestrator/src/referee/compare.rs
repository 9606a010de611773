//! Side-by-side comparison of the samples a schedule measured: per-sample
//! cost ratios against a baseline arm, their median, an interval with stated
//! coverage, and a verdict.

use serde::{Deserialize, Serialize};

use crate::bench::host::endurance::Endurance;
use crate::bench::host::trial::{Latency, Measurement};
use crate::bench::load::gate::{self, GateResult};
use crate::bench::samples::Samples;
use crate::referee::stats;
use crate::referee::verdict::{self, Verdict};

/// The median of the ratios of arm 1 to arm 0 so far: what progress displays show.
pub fn ratio_so_far(samples: &Samples) -> Option<f64> {
    let r = if samples.trials.len() > 1 {
        samples.ratios(1, 0)
    } else {
        vec![]
    };
    (!r.is_empty()).then(|| stats::median(&r))
}

impl Samples {
    /// Block ratios cost(arm) / cost(baseline), over blocks where both passed
    /// and neither ran out of work: a sample in which an arm idled is not a
    /// sample of the saturated regime, and is not scored.
    pub fn ratios(&self, arm: usize, baseline: usize) -> Vec<f64> {
        let scored = |m: &Measurement| m.saturated != Some(false);
        self.trials[arm]
            .iter()
            .zip(&self.trials[baseline])
            .filter(|(a, b)| scored(a) && scored(b))
            .filter_map(|(a, b)| Some(a.cost_per_connection? / b.cost_per_connection?))
            .collect()
    }

    /// The arm's gate over every sample; a dropped arm's is the verdict
    /// that dropped it, counted once.
    pub fn gate(&self, arm: usize) -> GateResult {
        if let Some(d) = self.dropped(arm) {
            return d.measurement().gate;
        }
        let gates: Vec<GateResult> = self.trials[arm].iter().map(|m| m.gate.clone()).collect();
        gate::combine(&gates)
    }

    /// Which of `arms` (index, name) failed the gate, in which of its
    /// trials, and why, for a verdict's detail: an invalid comparison is
    /// the candidate's fault only if the candidate is the arm that failed,
    /// and one failed trial among many is named, not lost in a total.
    pub fn gate_failures(&self, arms: &[(usize, &str)]) -> Option<String> {
        let failed: Vec<String> = arms
            .iter()
            .filter_map(|&(arm, name)| {
                let g = self.gate(arm);
                if g.passed {
                    return None;
                }
                let trials = &self.trials[arm];
                let named: Vec<String> = trials
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| !m.gate.passed)
                    .map(|(i, m)| format!("trial {} of {}: {}", i + 1, trials.len(), why(&m.gate)))
                    .collect();
                Some(if named.is_empty() {
                    format!("the {name} failed the gate ({})", why(&g))
                } else {
                    format!("the {name} failed the gate in {}", named.join("; in "))
                })
            })
            .collect();
        (!failed.is_empty()).then(|| failed.join(", "))
    }

    /// How many samples went unscored for the arms judged against arm 0,
    /// when that left a comparison with a median but too few ratios for an
    /// interval and every gate passed: an arm ran out of work in those
    /// samples, which more samples can make up (the loop's keep rule
    /// extends once for the same reason). `None` when nothing is short.
    pub fn unscored_short_of_an_interval(&self) -> Option<usize> {
        let short = (1..self.trials.len()).filter(|&arm| {
            let c = self.compare(arm, 0, 0.0);
            c.ratio_median.is_some()
                && c.ratio_interval.is_none()
                && self.gate(arm).passed
                && self.gate(0).passed
        });
        short
            .map(|arm| self.trials[arm].len().min(self.trials[0].len()) - self.ratios(arm, 0).len())
            .max()
    }

    /// The comparison with a 95% interval.
    pub fn compare(&self, arm: usize, baseline: usize, threshold: f64) -> Comparison {
        self.compare_at(arm, baseline, threshold, 0.95)
    }

    /// The comparison with an interval of coverage at least `level`. The
    /// median has one only from [`stats::MIN_SAMPLES`] ratios on.
    pub fn compare_at(
        &self,
        arm: usize,
        baseline: usize,
        threshold: f64,
        level: f64,
    ) -> Comparison {
        let ratios = self.ratios(arm, baseline);
        let valid = self.gate(arm).passed && self.gate(baseline).passed && !ratios.is_empty();
        let median = (!ratios.is_empty()).then(|| stats::median(&ratios));
        let interval = stats::median_interval(&ratios, level);
        let ci = interval.zip(median).map(|(i, m)| match self.drift {
            Some(d) if d > 0.0 => stats::with_drift(m, [i.lo, i.hi], d, level),
            _ => [i.lo, i.hi],
        });
        let verdict = match (valid, median, ci) {
            (true, Some(m), Some(ci)) => verdict::of(m, (ci[0], ci[1]), threshold),
            _ => Verdict::Invalid,
        };
        Comparison {
            arm,
            baseline,
            ratio_median: median,
            ratio_interval: ci,
            ci_level: level,
            ci_coverage: interval.map(|i| i.coverage),
            drift: self.drift,
            ratio_cv: (ratios.len() > 1).then(|| stats::coefficient_of_variation(&ratios)),
            block_ratios: ratios,
            verdict,
        }
    }

    pub fn arm_summary(&self, arm: usize, label: &str) -> ArmSummary {
        let trials = &self.trials[arm];
        let gate = self.gate(arm);
        let costs: Vec<f64> = trials
            .iter()
            .filter_map(|m| m.cost_per_connection)
            .collect();
        let median_of = |f: &dyn Fn(&Measurement) -> Option<f64>| {
            let v: Vec<f64> = trials.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| stats::median(&v))
        };
        let cost = (!costs.is_empty()).then(|| stats::median(&costs));
        ArmSummary {
            arm: label.to_string(),
            score: match (gate.passed, cost) {
                (true, Some(c)) if c > 0.0 => 1e9 / c,
                _ => 0.0,
            },
            gate,
            cost_per_connection: CostSummary {
                median: cost.unwrap_or(0.0),
                samples: costs,
            },
            throughput_cps: median_of(&|m| Some(m.throughput_cps)).unwrap_or(0.0),
            latency_us: median_of(&|m| m.latency_us.map(|l| l.p50)).map(|p50| Latency {
                p50,
                p99: median_of(&|m| m.latency_us.map(|l| l.p99)).unwrap_or(0.0),
                p999: median_of(&|m| m.latency_us.map(|l| l.p999)).unwrap_or(0.0),
            }),
            syscalls_per_connection: median_of(&|m| m.syscalls_per_connection),
            completions_per_connection: median_of(&|m| m.completions_per_connection),
            context_switches_per_connection: median_of(&|m| m.context_switches_per_connection),
            sut_busy: median_of(&|m| Some(m.sut_busy)).unwrap_or(0.0),
            generator_busy: median_of(&|m| m.generator_busy),
            generator_headroom: median_of(&|m| m.generator_busy.map(|b| 1.0 - b)),
            allotment_used: median_of(&|m| m.allotment_used),
            throttled_share: median_of(&|m| m.throttled_share),
            unsaturated_samples: trials.iter().filter(|m| m.saturated == Some(false)).count(),
            endurance: None,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CostSummary {
    pub median: f64,
    pub samples: Vec<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ArmSummary {
    pub arm: String,
    pub gate: GateResult,
    pub cost_per_connection: CostSummary,
    pub score: f64,
    pub throughput_cps: f64,
    /// Where clients timed their connections (not an emulated backlog).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<Latency>,
    pub syscalls_per_connection: Option<f64>,
    /// Where measured: io_uring completions posted per connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions_per_connection: Option<f64>,
    /// Idle sleeps and thread hand-offs on the SUT core, per connection:
    /// near 0 for a single-threaded server that always has work.
    pub context_switches_per_connection: Option<f64>,
    /// The arm's CPU time over the time it held load: the whole window
    /// when every arm is loaded at once (its share of the core), its own
    /// slices in a sliced duet (above 1 where it works on after its slice
    /// ends, draining its backlog in the next arm's slice).
    pub sut_busy: f64,
    /// Share of the load cores ratchet itself used: near 1, the generator
    /// is the limit. Where a generator ran beside the servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator_busy: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator_headroom: Option<f64>,
    /// In the saturated regime: the median share of its allotment the arm
    /// used, and of bandwidth periods in which it spent its whole quota.
    #[serde(default)]
    pub allotment_used: Option<f64>,
    #[serde(default)]
    pub throttled_share: Option<f64>,
    /// Samples in which the arm ran out of work: not scored.
    #[serde(default)]
    pub unsaturated_samples: usize,
    /// One process serving many connections, where it was run (`check`,
    /// and a candidate about to be kept): see `bench/host/endurance.rs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endurance: Option<Endurance>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Comparison {
    pub arm: usize,
    pub baseline: usize,
    pub ratio_median: Option<f64>,
    /// The interval of the median ratio, at `ci_level` (the field keeps its
    /// recorded name; the decision's own interval may be wider than 95%).
    #[serde(alias = "ratio_ci95")]
    pub ratio_interval: Option<[f64; 2]>,
    #[serde(default = "default_level")]
    pub ci_level: f64,
    /// The exact coverage of the windows' own interval (order statistics
    /// of the median), before any `drift` widened it; absent from records
    /// made with the bootstrap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_coverage: Option<f64>,
    /// The between-measurement spread (sd of the log ratio) the interval
    /// adds, if any: see `meter.task_clock_drift`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<f64>,
    pub verdict: Verdict,
    pub ratio_cv: Option<f64>,
    pub block_ratios: Vec<f64>,
}

fn default_level() -> f64 {
    0.95
}

/// A gate's reasons with their counts, then its details.
fn why(g: &GateResult) -> String {
    let mut why: Vec<String> = g.reasons.iter().map(|(k, v)| format!("{k} {v}")).collect();
    why.extend(g.detail.iter().cloned());
    why.join("; ")
}

#[cfg(test)]
impl Comparison {
    /// A comparison with this median and interval, judged at `threshold`:
    /// what the rules built on comparisons are tested with.
    pub fn judged(median: f64, lo: f64, hi: f64, threshold: f64) -> Self {
        Self {
            arm: 1,
            baseline: 0,
            ratio_median: Some(median),
            ratio_interval: Some([lo, hi]),
            ci_level: 0.95,
            ci_coverage: None,
            drift: None,
            verdict: verdict::of(median, (lo, hi), threshold),
            ratio_cv: None,
            block_ratios: vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::load::gate::GateConfig;
    use crate::bench::load::gate::GateEvidence;

    fn trial(cost: Option<f64>) -> Measurement {
        Measurement {
            gate: GateResult {
                passed: cost.is_some(),
                attempts: 10,
                completed: 10,
                ..Default::default()
            },
            cost_per_connection: cost,
            ..Default::default()
        }
    }

    fn samples(a: &[Option<f64>], b: &[Option<f64>]) -> Samples {
        Samples {
            trials: vec![
                a.iter().map(|c| trial(*c)).collect(),
                b.iter().map(|c| trial(*c)).collect(),
            ],
            orders: vec![],
            schedule: None,
            regime: None,
            dropped: vec![],
            drift: None,
        }
    }

    /// A 4% saving whose windows agree closely is `better` within its
    /// minute, and `same` once a meter's spread between minutes (2.5%;
    /// task-clock's here is 3.3%) is added: the interval then reaches past 1.
    #[test]
    fn drift_between_measurements_widens_the_interval_and_the_verdict_follows() {
        let base = [Some(100.0); 12];
        let arm: Vec<Option<f64>> = (0..12).map(|i| Some(96.0 + (i % 3) as f64 * 0.2)).collect();
        let mut s = samples(&base, &arm);
        let tight = s.compare(1, 0, 0.03);
        assert_eq!(tight.verdict, Verdict::Better);
        s.drift = Some(0.025);
        let wide = s.compare(1, 0, 0.03);
        assert_eq!(wide.ratio_median, tight.ratio_median);
        assert_eq!(wide.drift, Some(0.025));
        let [lo, hi] = wide.ratio_interval.unwrap();
        assert!(hi > 1.0 && lo < 0.93, "{lo} {hi}");
        assert_eq!(wide.verdict, Verdict::Same);
    }

    #[test]
    fn a_dropped_arm_fails_with_the_verdict_that_dropped_it_counted_once() {
        use crate::bench::samples::{Dropped, Stage};
        let mut s = samples(&[Some(1.0); 6], &[None; 6]);
        let mut reasons = std::collections::BTreeMap::new();
        reasons.insert(gate::GateReason::WrongBytes, 3);
        let verdict = GateResult {
            passed: false,
            attempts: 3,
            failures: 3,
            reasons,
            ..Default::default()
        };
        s.dropped = vec![
            None,
            Some(Dropped {
                stage: Stage::Screen,
                gate: verdict,
            }),
        ];
        let gate = s.gate(1);
        assert!(!gate.passed);
        assert_eq!(
            gate.reasons[&gate::GateReason::WrongBytes],
            3,
            "not once per sample"
        );
        assert!(gate.detail[0].contains("dropped alone, before the probe"));
        assert!(s.gate(0).passed);
        assert_eq!(s.compare(1, 0, 0.03).verdict, Verdict::Invalid);
    }

    #[test]
    fn ratios_are_per_block() {
        let a = [100.0, 200.0, 100.0, 200.0, 100.0, 200.0].map(Some);
        let b = [50.0, 100.0, 50.0, 100.0, 50.0, 100.0].map(Some);
        let s = samples(&a, &b);
        assert_eq!(s.ratios(1, 0), vec![0.5; 6]);
        let c = s.compare(1, 0, 0.03);
        assert_eq!(c.verdict, Verdict::Better);
        assert_eq!(c.ratio_median, Some(0.5));
        assert!(c.ci_coverage.unwrap() > 0.96);
    }

    #[test]
    fn fewer_than_six_samples_decide_nothing() {
        let s = samples(&[Some(100.0); 5], &[Some(50.0); 5]);
        let c = s.compare(1, 0, 0.03);
        assert_eq!(c.verdict, Verdict::Invalid);
        assert_eq!(c.ratio_interval, None);
        assert_eq!(c.ratio_median, Some(0.5));
    }

    #[test]
    fn samples_an_arm_idled_in_are_counted_when_they_leave_no_interval() {
        let mut s = samples(&[Some(100.0); 6], &[Some(50.0); 6]);
        assert_eq!(s.unscored_short_of_an_interval(), None);
        s.trials[1][2].saturated = Some(false);
        assert_eq!(s.compare(1, 0, 0.03).ratio_interval, None);
        assert_eq!(s.unscored_short_of_an_interval(), Some(1));
        // More samples cannot mend a failed gate.
        s.trials[0][4] = trial(None);
        assert_eq!(s.unscored_short_of_an_interval(), None);
    }

    #[test]
    fn one_failed_gate_makes_the_arm_invalid_and_scores_zero() {
        let s = samples(&[Some(100.0), Some(100.0)], &[Some(50.0), None]);
        assert_eq!(s.compare(1, 0, 0.03).verdict, Verdict::Invalid);
        assert_eq!(s.arm_summary(1, "b").score, 0.0);
        assert!(!s.arm_summary(1, "b").gate.passed);
    }

    #[test]
    fn an_invalid_baseline_invalidates_the_comparison() {
        let s = samples(&[None, Some(100.0)], &[Some(50.0), Some(50.0)]);
        assert_eq!(s.compare(1, 0, 0.03).verdict, Verdict::Invalid);
    }

    #[test]
    fn gate_failures_name_the_arm_that_failed_and_why() {
        let mut s = samples(&[Some(100.0); 2], &[Some(50.0); 2]);
        let arms = [(0, "champion"), (1, "candidate")];
        assert_eq!(s.gate_failures(&arms), None);
        s.trials[0][1].gate = gate::check(
            &GateEvidence {
                attempts: 10,
                completed: 10,
                window_completed: 10_000,
                alive: true,
                held_connections: 3,
                ..Default::default()
            },
            &GateConfig::default(),
        );
        let why = s.gate_failures(&arms).unwrap();
        assert!(
            why.starts_with("the champion failed the gate in trial 2 of 2: deferred_close 3;"),
            "{why}"
        );
        assert!(why.contains("still held 3 connections"), "{why}");
        assert!(!why.contains("candidate"), "{why}");
    }

    #[test]
    fn score_is_a_billion_over_median_cost() {
        let s = samples(&[Some(100.0), Some(300.0), Some(200.0)], &[Some(1.0); 3]);
        assert_eq!(s.arm_summary(0, "a").score, 1e9 / 200.0);
    }
}
