//! `ratchet replay`: re-measures a recorded run on this machine. Every
//! champion of the lineage is rebuilt from git (or from the journal's diffs)
//! and measured side by side with its predecessor, the run's start and the
//! control in the same interleaved blocks; each keep either reproduces (the
//! same verdict at the run's threshold) or does not. With `--decisions`,
//! every recorded attempt is re-applied in order and judged again by the keep
//! rule, and the decisions that come out differently are listed; with
//! `--attempts`, only the named ones are, each against the champion it was
//! recorded against, so one disputed decision costs minutes, not the run.
//!
//! Raw costs from another machine are never compared with this one's: the
//! two fingerprints are shown, and only ratios are compared.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::bench::environment::{self, Fingerprint};
use crate::bench::samples::Samples;
use crate::bench::servers::arm::Arm;
use crate::record::lineage::{self, Lineage};
use crate::record::recorded::RecordedRun;
use crate::referee::compare::{ArmSummary, Comparison};
use crate::referee::figures::{
    arm_medians, fmt_ci, fmt_comparison, fmt_estimate, fmt_ratio, fmt_vs_control,
};
use crate::referee::verdict::{AttemptVerdict, Verdict};
use crate::review::progress;
use crate::session::Session;

mod decisions;
pub use decisions::{decisions_heading, disagreements};

/// One kept attempt, as recorded and as measured again.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeepReplay {
    pub attempt: usize,
    pub hypothesis: String,
    pub recorded_ratio: Option<f64>,
    #[serde(alias = "recorded_ci95")]
    pub recorded_interval: Option<[f64; 2]>,
    /// Against its predecessor, in this replay.
    pub replayed: Comparison,
    /// The keep rule's verdict holds again: `better` at the run's threshold.
    pub reproduced: bool,
}

impl KeepReplay {
    /// attempt, recorded ratio and interval, replayed ratio and interval,
    /// verdict, reproduced: the row both renderings show.
    pub fn cells(&self) -> [String; 6] {
        [
            self.attempt.to_string(),
            fmt_estimate(self.recorded_ratio, self.recorded_interval),
            fmt_estimate(self.replayed.ratio_median, self.replayed.ratio_interval),
            self.replayed.verdict.name().to_string(),
            if self.reproduced { "yes" } else { "NO" }.to_string(),
            self.hypothesis.clone(),
        ]
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FinalReplay {
    /// Product of the recorded kept ratios.
    pub recorded_vs_start: f64,
    pub recorded_vs_control: Option<f64>,
    pub vs_start: Comparison,
    /// None for a run without a control.
    pub vs_control: Option<Comparison>,
    pub start_vs_control: Option<Comparison>,
}

/// One recorded attempt, decided again.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DecisionReplay {
    pub attempt: usize,
    pub hypothesis: String,
    pub recorded: AttemptVerdict,
    pub replayed: AttemptVerdict,
    pub ratio: Option<f64>,
    #[serde(alias = "ci95")]
    pub interval: Option<[f64; 2]>,
    pub extended: bool,
    pub note: Option<String>,
    /// None when the attempt had nothing to re-apply.
    pub agrees: Option<bool>,
}

/// What `ratchet replay` writes to `results/<run>/replays/` and prints with `--json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReplayRecord {
    pub run_id: String,
    pub replayed_at: String,
    pub threshold: f64,
    #[serde(alias = "blocks")]
    pub sample_count: usize,
    pub unit: String,
    pub recorded_fingerprint: Fingerprint,
    pub fingerprint: Fingerprint,
    /// Fields that differ between the two fingerprints.
    pub fingerprint_differences: Vec<String>,
    pub arms: Vec<ArmSummary>,
    pub keeps: Vec<KeepReplay>,
    pub champion: FinalReplay,
    pub samples: Samples,
    pub decisions: Option<Vec<DecisionReplay>>,
    /// The attempts re-decided alone (`--attempts`); empty when every
    /// attempt was re-decided in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decisions_only: Vec<usize>,
}

/// The fields of two fingerprints that differ, as `field: recorded -> now`.
pub fn differences(recorded: &Fingerprint, now: &Fingerprint) -> Vec<String> {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(recorded), serde_json::to_value(now))
    else {
        return vec![];
    };
    a.iter()
        .filter(|(k, v)| b.get(*k) != Some(v))
        .map(|(k, v)| {
            let now = b.get(k).cloned().unwrap_or(serde_json::Value::Null);
            format!("{k}: {v} -> {now}")
        })
        .collect()
}

pub struct Replayer<'a> {
    pub session: &'a Session,
    pub repo: &'a git2::Repository,
    pub run: &'a RecordedRun,
    pub seed: u64,
}

impl Replayer<'_> {
    fn threshold(&self) -> f64 {
        self.session.config().compare.threshold
    }

    fn sample_count(&self) -> usize {
        self.session.config().compare.samples
    }

    /// `--attempts`, sorted and checked against the journal.
    fn attempts_named(&self, only: &[usize]) -> Result<Vec<usize>> {
        let mut only = only.to_vec();
        only.sort_unstable();
        only.dedup();
        if let Some(n) = only
            .iter()
            .find(|n| !self.run.attempts.iter().any(|a| a.number == **n))
        {
            anyhow::bail!(
                "--attempts: run {} has no attempt {n} (its attempts are {})",
                self.run.run.run_id,
                match (self.run.attempts.first(), self.run.attempts.last()) {
                    (Some(a), Some(b)) => format!("{} to {}", a.number, b.number),
                    _ => "none".into(),
                }
            );
        }
        Ok(only)
    }

    /// Each champion of the lineage built from its recorded tree: the start,
    /// then `#N` for the attempt that made it.
    fn lineage_arms(&self, lineage: &Lineage, trees: &[git2::Oid]) -> Result<Vec<Arm>> {
        let mut arms = Vec::new();
        for (step, tree) in lineage.steps.iter().zip(trees) {
            let label = if step.attempt == 0 {
                "start".to_string()
            } else {
                format!("#{}", step.attempt)
            };
            arms.push(
                self.session
                    .workspace
                    .prepare_tree(self.repo, *tree, &label)
                    .with_context(|| format!("building {label} of the lineage"))?,
            );
        }
        Ok(arms)
    }

    /// `only` narrows `decisions` to those attempts; it is checked against
    /// the journal before anything is built.
    pub fn replay(&self, decisions: bool, only: &[usize]) -> Result<ReplayRecord> {
        let only = self.attempts_named(only)?;
        let (lineage, trees) = lineage::with_trees(self.repo, self.run)?;
        // Only the build needs the source; the binary stays in the cache.
        let control_src = tempfile::tempdir()?;
        let control = self
            .session
            .workspace
            .run_control(&self.run.run.base_commit, control_src.path())
            .context("building the run's control (run.control)")?;
        let mut arms = self.lineage_arms(&lineage, &trees)?;
        arms.extend(control.clone());
        let k = lineage.steps.len() - 1;
        let c = k + 1;
        let mut samples = Samples::new(arms.len());
        let settings = self.session.trial_settings();
        progress::measure(
            self.session,
            &settings,
            &arms,
            self.sample_count(),
            self.seed,
            &mut samples,
            "replaying the lineage: ",
        )?;
        let threshold = self.threshold();
        let keeps = (1..=k)
            .map(|i| {
                let step = &lineage.steps[i];
                let replayed = samples.compare(i, i - 1, threshold);
                KeepReplay {
                    attempt: step.attempt,
                    hypothesis: step.hypothesis.clone(),
                    recorded_ratio: step.ratio,
                    recorded_interval: step.interval,
                    reproduced: replayed.verdict == Verdict::Better,
                    replayed,
                }
            })
            .collect();
        let champion = FinalReplay {
            recorded_vs_start: lineage.steps[k].cumulative,
            recorded_vs_control: lineage.steps[k].vs_control,
            vs_start: samples.compare(k, 0, threshold),
            vs_control: control.is_some().then(|| samples.compare(k, c, threshold)),
            start_vs_control: control.is_some().then(|| samples.compare(0, c, threshold)),
        };
        let decisions = if decisions {
            Some(self.decisions(
                &lineage,
                &trees,
                &arms[..=k],
                control.as_ref(),
                &only,
                &settings,
            )?)
        } else {
            None
        };
        let fingerprint = environment::fingerprint(
            &self.session.plan,
            control.as_ref().and_then(|c| c.source_hash.clone()),
            arms[0].source_hash.clone(),
        );
        Ok(ReplayRecord {
            run_id: self.run.run.run_id.clone(),
            replayed_at: crate::clock::now_utc(),
            threshold,
            sample_count: self.sample_count(),
            unit: self.session.plan.event.unit().into(),
            fingerprint_differences: differences(&self.run.run.fingerprint, &fingerprint),
            recorded_fingerprint: self.run.run.fingerprint.clone(),
            fingerprint,
            arms: arms
                .iter()
                .enumerate()
                .map(|(i, a)| samples.arm_summary(i, &a.label))
                .collect(),
            keeps,
            champion,
            samples,
            decisions,
            decisions_only: only,
        })
    }
}

pub fn render(r: &ReplayRecord) -> String {
    let mut s = format!(
        "replay of run {} on this machine: meter {} ({}); {} samples; threshold {:.1}%\n",
        r.run_id,
        r.fingerprint.meter_event,
        r.unit,
        r.sample_count,
        r.threshold * 100.0
    );
    if r.fingerprint_differences.is_empty() {
        s += "fingerprint: the same as the recorded run's\n";
    } else {
        s += "fingerprint differs from the recorded run's (raw costs are not compared across them; ratios are):\n";
        for d in &r.fingerprint_differences {
            s += &format!("  {d}\n");
        }
    }
    s += &format!(
        "\neach keep against its predecessor, side by side:\n{:>7}  {:<23}  {:<23}  {:<8} {:<10} hypothesis\n",
        "attempt", "recorded [interval]", "now [interval]", "verdict", "reproduced"
    );
    for k in &r.keeps {
        let [n, recorded, now, verdict, reproduced, hypothesis] = k.cells();
        s += &format!(
            "{n:>7}  {recorded:<23}  {now:<23}  {verdict:<8} {reproduced:<10} {hypothesis}\n"
        );
    }
    let reproduced = r.keeps.iter().filter(|k| k.reproduced).count();
    s += &format!("{reproduced} of {} keeps reproduced\n", r.keeps.len());
    let c = &r.champion;
    s += &format!(
        "\nthe final champion:\n  against the start:   recorded {:.3} (product of kept ratios), now {}\n  \
         against the control: recorded {}, now {}\n  the start against the control, now {}\n",
        c.recorded_vs_start,
        fmt_comparison(&c.vs_start),
        fmt_ratio(c.recorded_vs_control),
        fmt_vs_control(c.vs_control.as_ref()),
        fmt_vs_control(c.start_vs_control.as_ref()),
    );
    s += "\n";
    s += &arm_medians(&r.unit, &r.arms);
    if let Some(ds) = &r.decisions {
        s += &format!(
            "\n{}:\n{:>7}  {:<13} {:<14} {:>6} {:<16}  note\n",
            decisions_heading(r),
            "attempt",
            "recorded",
            "now",
            "ratio",
            "interval"
        );
        for d in ds {
            s += &format!(
                "{:>7}  {:<13} {:<14} {:>6} {:<16}  {}{}\n",
                d.attempt,
                d.recorded,
                d.replayed,
                fmt_ratio(d.ratio),
                fmt_ci(d.interval),
                match d.agrees {
                    Some(false) => "DIFFERS ",
                    _ => "",
                },
                d.note.as_deref().unwrap_or("").lines().next().unwrap_or("")
            );
        }
        let differ = disagreements(ds);
        s += &if differ.is_empty() {
            "every re-made decision agrees with the recorded one\n".to_string()
        } else {
            format!("{} decisions differ: {}\n", differ.len(), differ.join(", "))
        };
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_differences_name_the_field_and_both_values() {
        let a = Fingerprint {
            kernel: "6.1".into(),
            cores: 2,
            ..Default::default()
        };
        let b = Fingerprint {
            kernel: "6.18".into(),
            cores: 2,
            ..Default::default()
        };
        assert_eq!(differences(&a, &b), ["kernel: \"6.1\" -> \"6.18\""]);
        assert!(differences(&a, &a).is_empty());
    }
}
