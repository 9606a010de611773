//! `ratchet replay --decisions`: every recorded attempt re-applied in order
//! and judged again by the loop's own judging sequence, so a decision that
//! comes out differently here is the record's or the machine's, never a
//! second implementation's.

use anyhow::{Context, Result};
use std::time::Duration;

use super::{DecisionReplay, ReplayRecord, Replayer};
use crate::bench::host::trial;
use crate::bench::samples::Samples;
use crate::bench::servers::arm::Arm;
use crate::record::lineage::{self, Lineage, Trees};
use crate::referee::judge::{self, Phase, Rules, Stages};
use crate::referee::verdict::AttemptVerdict;
use crate::review::progress;

impl Replayer<'_> {
    /// Re-applies every recorded attempt in order against the champion of
    /// this replay, and decides again with the loop's own stages and rule.
    /// With `only`, just those attempts, each against the lineage champion
    /// (`steps`, built) it was recorded against.
    pub(super) fn decisions(
        &self,
        lineage: &Lineage,
        trees: &[git2::Oid],
        steps: &[Arm],
        control: Option<&Arm>,
        only: &[usize],
        settings: &trial::TrialSettings,
    ) -> Result<Vec<DecisionReplay>> {
        let as_champion = |arm: &Arm| Arm {
            label: "champion".into(),
            ..arm.clone()
        };
        let mut champion_tree = trees[0];
        let mut champion = as_champion(&steps[0]);
        let mut out = Vec::new();
        let selected = self
            .run
            .attempts
            .iter()
            .filter(|a| only.is_empty() || only.contains(&a.number));
        for a in selected {
            let mut d = DecisionReplay {
                attempt: a.number,
                hypothesis: a.hypothesis.clone(),
                recorded: a.verdict,
                replayed: AttemptVerdict::Skipped,
                ratio: None,
                interval: None,
                extended: false,
                note: None,
                agrees: None,
            };
            if a.diff.trim().is_empty() {
                d.replayed = AttemptVerdict::Skipped;
                d.note = Some("nothing to re-apply: the attempt recorded no diff".into());
                out.push(d);
                continue;
            }
            // The attempt as recorded, carried over to this replay's champion
            // when an earlier decision came out differently.
            let base = lineage
                .steps
                .iter()
                .position(|s| s.recorded_commit == a.champion);
            if let Some(i) = base.filter(|_| !only.is_empty()) {
                champion_tree = trees[i];
                champion = as_champion(&steps[i]);
            }
            // Made against a champion this replay did not keep: say so, since
            // the decision then answers a different question.
            let carried = base.filter(|&i| trees[i] != champion_tree).map(|i| {
                match lineage.steps[i].attempt {
                    0 => "recorded against the start, which this replay replaced".to_string(),
                    n => format!("recorded against champion #{n}, which this replay did not keep"),
                }
            });
            let tree = base
                .context("the attempt's champion is not in the lineage")
                .and_then(|i| {
                    let attempt = Trees::new(self.repo).of_attempt(self.run, a, trees[i])?;
                    if trees[i] == champion_tree {
                        Ok(attempt)
                    } else {
                        lineage::carry_over(self.repo, trees[i], champion_tree, attempt)
                    }
                });
            let outcome = match tree {
                Err(e) => Outcome::Ended(AttemptVerdict::DoesNotApply, Some(format!("{e:#}"))),
                Ok(t) if t == champion_tree => Outcome::Ended(AttemptVerdict::NoOp, None),
                Ok(t) => self.decide(a.number, t, &champion, control, settings, &mut d)?,
            };
            let note = match outcome {
                Outcome::Ended(v, note) => {
                    d.replayed = v;
                    note
                }
                Outcome::Kept(tree, arm) => {
                    d.replayed = AttemptVerdict::Keep;
                    champion_tree = tree;
                    champion = as_champion(&arm);
                    None
                }
            };
            d.note = match (carried, note) {
                (Some(c), Some(n)) => Some(format!("{c}: {n}")),
                (c, n) => c.or(n),
            };
            d.agrees = Some(d.replayed == d.recorded);
            out.push(d);
        }
        Ok(out)
    }

    /// The loop's judging sequence, with the candidate built from `tree`
    /// and measured beside `champion` and the control, as the loop does.
    fn decide(
        &self,
        n: usize,
        tree: git2::Oid,
        champion: &Arm,
        control: Option<&Arm>,
        settings: &trial::TrialSettings,
        d: &mut DecisionReplay,
    ) -> Result<Outcome> {
        let config = self.session.config();
        let rules = Rules {
            threshold: config.compare.threshold,
            suspicious_gain: config.run.suspicious_gain,
            max_p99_factor: config.compare.max_p99_factor,
            smoke_window: Duration::from_millis(config.run.smoke_window_ms),
        };
        let mut stages = ReplayStages {
            replayer: self,
            tree,
            n,
            settings,
        };
        let j = judge::judge(
            &mut stages,
            champion,
            control,
            &rules,
            &self.session.plan,
            settings,
        )?;
        d.ratio = j.vs_champion().and_then(|c| c.ratio_median);
        d.interval = j.vs_champion().and_then(|c| c.ratio_interval);
        d.extended = j.extended;
        Ok(match (j.verdict, j.candidate) {
            (AttemptVerdict::Keep, Some(arm)) => Outcome::Kept(tree, arm),
            (v, _) => Outcome::Ended(v, j.detail.or(j.build_log_tail)),
        })
    }
}

/// Replay's side of the judging sequence: the candidate is a tree rebuilt
/// from git or the journal, and progress is a bar of its own.
struct ReplayStages<'r, 'a> {
    replayer: &'r Replayer<'a>,
    tree: git2::Oid,
    n: usize,
    settings: &'r trial::TrialSettings,
}

impl Stages for ReplayStages<'_, '_> {
    fn build(&mut self) -> Result<Arm> {
        let r = self.replayer;
        r.session
            .workspace
            .prepare_tree(r.repo, self.tree, &format!("#{}", self.n))
    }

    fn measure(&mut self, arms: &[Arm], samples: &mut Samples, phase: Phase) -> Result<()> {
        let r = self.replayer;
        let (settings, n) = judge::phase_settings(
            phase,
            self.settings,
            r.sample_count(),
            r.session.config().run.has_control(),
        );
        progress::measure(
            r.session,
            &settings,
            arms,
            n,
            r.seed + self.n as u64,
            samples,
            &format!("#{} {}: ", self.n, phase.name()),
        )
    }
}

enum Outcome {
    Ended(AttemptVerdict, Option<String>),
    Kept(git2::Oid, Arm),
}

/// The re-made decisions that differ from the recorded ones, as
/// `#6 (recorded keep, now discard)`.
pub fn disagreements(ds: &[DecisionReplay]) -> Vec<String> {
    ds.iter()
        .filter(|d| d.agrees == Some(false))
        .map(|d| {
            format!(
                "#{} (recorded {}, now {})",
                d.attempt, d.recorded, d.replayed
            )
        })
        .collect()
}

/// What the decisions section of a replay holds, for both renderings.
pub fn decisions_heading(r: &ReplayRecord) -> String {
    if r.decisions_only.is_empty() {
        "every decision re-made in order".into()
    } else {
        let list: Vec<String> = r.decisions_only.iter().map(|n| format!("#{n}")).collect();
        format!(
            "decisions re-made for {} only, each against the champion it was recorded against",
            list.join(", ")
        )
    }
}
