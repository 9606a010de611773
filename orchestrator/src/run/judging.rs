//! The judging step of an iteration: the referee's one judging sequence
//! (build -> no-op -> smoke -> measure -> keep rule) run on the attempt's
//! committed tree, built and measured by the loop; what it found taken into
//! the attempt's record; and the worktree checked again after it.

use anyhow::Result;

use super::iterate::Attempt;
use super::moves::Refusal;
use super::{say, Loop};
use crate::bench::samples::Samples;
use crate::bench::servers::arm::Arm;
use crate::record::journal::AttemptRecord;
use crate::referee::judge::{self, Judgement, Phase, Stages};
use crate::referee::verdict::AttemptVerdict;

/// Paths that changed in the worktree after the scope check, while the
/// candidate was built or measured: whatever the judge found, the attempt
/// is then out of scope.
fn moved_refusal(moved: &[(String, bool)]) -> Option<Refusal> {
    if moved.is_empty() {
        return None;
    }
    let paths: Vec<&str> = moved.iter().map(|(p, _)| p.as_str()).collect();
    Some((
        AttemptVerdict::Scope,
        format!(
            "the worktree changed after the scope check, while the candidate was built or measured: {}",
            paths.join(", ")
        ),
    ))
}

/// How far the control's cost moved since the run started, when the
/// starting cost is known.
fn control_drift(start: Option<f64>, now: Option<f64>) -> Option<f64> {
    let now = now?;
    start.filter(|c| *c > 0.0).map(|start| now / start - 1.0)
}

/// The loop's side of the judging sequence: it builds the attempt's
/// committed tree (exported where no agent or server writes, not the
/// worktree), and measures with the loop's status line.
struct LoopStages<'l, 'a> {
    lp: &'l Loop<'a>,
    n: usize,
    tree: git2::Oid,
}

impl Stages for LoopStages<'_, '_> {
    fn build(&mut self) -> Result<Arm> {
        self.lp.bar.set_message(format!("#{} building", self.n));
        let arm =
            self.lp
                .session
                .workspace
                .prepare_tree(&self.lp.git.repo, self.tree, "candidate")?;
        self.lp.bar.set_message(format!("#{} smoke run", self.n));
        Ok(arm)
    }

    fn measure(&mut self, arms: &[Arm], samples: &mut Samples, phase: Phase) -> Result<()> {
        let label = format!("#{} {}", self.n, phase.name());
        let (settings, n) = judge::phase_settings(
            phase,
            &self.lp.settings(),
            self.lp.run.sample_count,
            self.lp.control.is_some(),
        );
        self.lp.measure(arms, n, samples, &label, &settings)
    }
}

impl Loop<'_> {
    /// The referee's judging sequence on the attempt's tree (build -> no-op
    /// -> smoke -> measure -> keep rule), taken into the record.
    pub(super) fn judge(&self, at: &mut Attempt, tree: git2::Oid) -> Result<Judgement> {
        let rules = self.session.rules();
        let settings = self.settings();
        let mut judgement = judge::judge(
            &mut LoopStages {
                lp: self,
                n: at.n,
                tree,
            },
            &self.champion_arm,
            self.control.as_ref(),
            &rules,
            &self.session.plan,
            &settings,
        )?;
        self.take_judgement(&mut at.record, &mut judgement);
        // What ran (the build, the servers) may have found the worktree.
        if let Some((verdict, detail)) = moved_refusal(&self.git.changed_since(tree)?) {
            judgement.verdict = verdict;
            at.record.verdict = verdict;
            at.record.detail = Some(detail);
        }
        Ok(judgement)
    }

    /// build -> no-op -> smoke for a candidate of a generation, on its
    /// committed tree: its arm, or none when that ended it (the record then
    /// says how).
    pub(super) fn admit(&self, at: &mut Attempt, tree: git2::Oid) -> Result<Option<Arm>> {
        let mut stages = LoopStages {
            lp: self,
            n: at.n,
            tree,
        };
        let settings = self.settings();
        match judge::admit(
            &mut stages,
            &self.champion_arm,
            &self.session.rules(),
            &self.session.plan,
            &settings,
        )? {
            Ok((arm, j)) => {
                at.record.build_ok = j.build_ok;
                at.record.durations.build_s = j.build_s;
                Ok(Some(arm))
            }
            Err(mut ended) => {
                self.take_judgement(&mut at.record, &mut ended);
                Ok(None)
            }
        }
    }

    /// Copies what the judge found into the attempt's record, and warns when
    /// the control drifted since the run started.
    fn take_judgement(&self, record: &mut AttemptRecord, j: &mut Judgement) {
        record.verdict = j.verdict;
        record.detail = j.detail.take();
        record.build_ok = j.build_ok;
        record.build_log_tail = j.build_log_tail.take();
        record.binary_sha256 = j.binary_sha256.take();
        record.extended = j.extended;
        record.endurance = j.endurance.take();
        record.durations.build_s = j.build_s;
        record.durations.measure_s = j.measure_s;
        let Some(e) = j.evidence.as_ref() else {
            return;
        };
        if let Some(drift) = control_drift(self.run.control_start_cost, e.control_cost) {
            record.control_drift = Some(drift);
            if drift.abs() > self.config().run.drift_warning {
                say(&self.bar, format!(
                    "warning: the control's cost moved {:+.1}% since the run started (machine drift); ratios stay comparable, raw costs do not",
                    drift * 100.0
                ));
            }
        }
        record.vs_champion = Some(e.vs_champion.clone());
        record.vs_control = e.vs_control.clone();
        record.champion_vs_control = e.champion_vs_control.clone();
        record.samples = Some(e.samples.clone());
        record.confirmation = e.confirmation.as_ref().map(|(c, _)| c.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worktree_moved_while_judging_makes_the_attempt_out_of_scope() {
        assert!(moved_refusal(&[]).is_none());
        let moved = [("a.c".to_string(), false), ("b".to_string(), true)];
        let (v, d) = moved_refusal(&moved).unwrap();
        assert_eq!(v, AttemptVerdict::Scope);
        assert!(
            d.ends_with("while the candidate was built or measured: a.c, b"),
            "{d}"
        );
    }

    #[test]
    fn the_control_drift_is_against_a_known_starting_cost() {
        assert_eq!(control_drift(None, Some(2.0)), None);
        assert_eq!(control_drift(Some(0.0), Some(2.0)), None);
        assert_eq!(
            control_drift(Some(2.0), None),
            None,
            "a run without a control"
        );
        let d = control_drift(Some(2.0), Some(2.1)).unwrap();
        assert!((d - 0.05).abs() < 1e-12);
    }
}
