//! `ratchet replay --decisions`: every recorded attempt re-applied in order
//! and judged again by the loop's own judging sequence, so a decision that
//! comes out differently here is the record's or the machine's, never a
//! second implementation's.

use anyhow::{Context, Result};

use super::{DecisionReplay, ReplayRecord, Replayer};
use crate::bench::host::trial;
use crate::bench::samples::Samples;
use crate::bench::servers::arm::{with_control, Arm};
use crate::record::journal::AttemptRecord;
use crate::record::lineage::{self, Lineage, Trees};
use crate::referee::judge::{self, Phase, Stages};
use crate::referee::screen;
use crate::referee::verdict::AttemptVerdict;
use crate::review::progress;

/// The champion a replay of decisions stands at, as it moves.
struct Standing {
    tree: git2::Oid,
    arm: Arm,
}

fn as_champion(arm: &Arm) -> Arm {
    Arm {
        label: "champion".into(),
        ..arm.clone()
    }
}

/// The generation an attempt was screened in, when it was screened with
/// others: the attempts' numbers, in order.
fn generation_of(a: &AttemptRecord) -> Option<&[usize]> {
    a.screen
        .as_ref()
        .map(|s| s.generation.as_slice())
        .filter(|g| g.len() > 1)
}

impl<'a> Replayer<'a> {
    /// Re-applies every recorded attempt in order against the champion of
    /// this replay, and decides again with the loop's own stages and rule.
    /// A generation is screened again together, and judged as the loop
    /// judged it. With `only`, just those attempts (and the generations
    /// they were screened in), each against the lineage champion (`steps`,
    /// built) it was recorded against.
    pub(super) fn decisions(
        &self,
        lineage: &Lineage,
        trees: &[git2::Oid],
        steps: &[Arm],
        control: Option<&Arm>,
        only: &[usize],
        settings: &trial::TrialSettings,
    ) -> Result<Vec<DecisionReplay>> {
        let mut at = Standing {
            tree: trees[0],
            arm: as_champion(&steps[0]),
        };
        let mut out: Vec<DecisionReplay> = Vec::new();
        let attempts = &self.run.attempts;
        let selected = |a: &AttemptRecord| {
            only.is_empty()
                || only.contains(&a.number)
                || generation_of(a).is_some_and(|g| g.iter().any(|n| only.contains(n)))
        };
        for a in attempts.iter().filter(|a| selected(a)) {
            if out.iter().any(|d| d.attempt == a.number) {
                continue;
            }
            let Some(generation) = generation_of(a) else {
                let prepared = self.prepare(a, lineage, trees, steps, only, &mut at);
                let d = match prepared {
                    Prepared::Ready(mut d, tree) => {
                        let outcome =
                            self.decide(a.number, tree, &at.arm, control, settings, &mut d)?;
                        conclude(d, outcome, &mut at)
                    }
                    Prepared::Done(d) => d,
                };
                out.push(d);
                continue;
            };
            let members: Vec<&AttemptRecord> = attempts
                .iter()
                .filter(|m| generation.contains(&m.number))
                .collect();
            out.extend(self.generation(
                &members, lineage, trees, steps, control, only, settings, &mut at,
            )?);
        }
        Ok(out)
    }

    /// An attempt carried to this replay's champion: ready to build from
    /// its tree, or decided already (nothing to re-apply, does not apply,
    /// changes nothing).
    fn prepare(
        &self,
        a: &AttemptRecord,
        lineage: &Lineage,
        trees: &[git2::Oid],
        steps: &[Arm],
        only: &[usize],
        at: &mut Standing,
    ) -> Prepared {
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
            d.note = Some("nothing to re-apply: the attempt recorded no diff".into());
            return Prepared::Done(d);
        }
        // The attempt as recorded, carried over to this replay's champion
        // when an earlier decision came out differently.
        let base = lineage
            .steps
            .iter()
            .position(|s| s.recorded_commit == a.champion);
        if let Some(i) = base.filter(|_| !only.is_empty()) {
            at.tree = trees[i];
            at.arm = as_champion(&steps[i]);
        }
        // Made against a champion this replay did not keep: say so, since
        // the decision then answers a different question.
        d.note = base
            .filter(|&i| trees[i] != at.tree)
            .map(|i| match lineage.steps[i].attempt {
                0 => "recorded against the start, which this replay replaced".to_string(),
                n => format!("recorded against champion #{n}, which this replay did not keep"),
            });
        let tree = base
            .context("the attempt's champion is not in the lineage")
            .and_then(|i| {
                let attempt = Trees::new(self.repo).of_attempt(self.run, a, trees[i])?;
                if trees[i] == at.tree {
                    Ok(attempt)
                } else {
                    lineage::carry_over(self.repo, trees[i], at.tree, attempt)
                }
            });
        match tree {
            Err(e) => Prepared::Done(ended(
                d,
                AttemptVerdict::DoesNotApply,
                Some(format!("{e:#}")),
            )),
            Ok(t) if t == at.tree => Prepared::Done(ended(d, AttemptVerdict::NoOp, None)),
            Ok(t) => Prepared::Ready(d, t),
        }
    }

    /// A generation screened again: its members built, measured together
    /// beside the champion and the control, then judged best first while
    /// the screen finds them worth it, until one is kept.
    #[allow(clippy::too_many_arguments)]
    fn generation(
        &self,
        members: &[&AttemptRecord],
        lineage: &Lineage,
        trees: &[git2::Oid],
        steps: &[Arm],
        control: Option<&Arm>,
        only: &[usize],
        settings: &trial::TrialSettings,
        at: &mut Standing,
    ) -> Result<Vec<DecisionReplay>> {
        let mut done = Vec::new();
        let mut ready = Vec::new();
        for a in members {
            match self.prepare(a, lineage, trees, steps, only, at) {
                Prepared::Done(d) => done.push(d),
                Prepared::Ready(d, tree) => match self.admit(a.number, tree, &at.arm, settings)? {
                    Ok(arm) => ready.push((d, tree, arm)),
                    Err((v, note)) => done.push(ended(d, v, note)),
                },
            }
        }
        let numbers: Vec<usize> = ready.iter().map(|(d, _, _)| d.attempt).collect();
        let arms = with_control(
            std::iter::once(at.arm.clone()).chain(ready.iter().map(|(_, _, arm)| arm.clone())),
            control,
        );
        let mut samples = Samples::new(arms.len());
        if ready.len() > 1 {
            progress::measure(
                self.session,
                settings,
                &arms,
                self.sample_count(),
                self.seed + screen::SEED + numbers[0] as u64,
                &mut samples,
                &format!(
                    "screen of #{}-#{}: ",
                    numbers[0],
                    numbers[numbers.len() - 1]
                ),
            )?;
        }
        let threshold = self.session.config().compare.threshold;
        let arms_of: Vec<usize> = (1..=ready.len()).collect();
        let ranked = screen::rank(&samples, &arms_of, threshold);
        let mut order: Vec<_> = ready.into_iter().zip(ranked).collect();
        order.sort_by_key(|(_, s)| s.rank.unwrap_or(usize::MAX));
        let alone = order.len() == 1;
        let mut kept = false;
        for ((mut d, tree, _), s) in order {
            if !kept && (alone || s.worth_judging) {
                let outcome = self.decide(d.attempt, tree, &at.arm, control, settings, &mut d)?;
                let d = conclude(d, outcome, at);
                kept = d.replayed.is_keep();
                done.push(d);
                continue;
            }
            d.ratio = s.vs_champion.ratio_median;
            d.interval = s.vs_champion.ratio_interval;
            let verdict = match s.failed {
                Some(_) => AttemptVerdict::Invalid,
                None => AttemptVerdict::Screened,
            };
            done.push(ended(d, verdict, s.failed));
        }
        done.sort_by_key(|d| d.attempt);
        Ok(done)
    }

    /// build -> no-op -> smoke for a member of a generation.
    fn admit(
        &self,
        n: usize,
        tree: git2::Oid,
        champion: &Arm,
        settings: &trial::TrialSettings,
    ) -> Result<std::result::Result<Arm, (AttemptVerdict, Option<String>)>> {
        let mut stages = self.stages(n, tree, settings);
        let admitted = judge::admit(
            &mut stages,
            champion,
            &self.session.rules(),
            &self.session.plan,
            settings,
        )?;
        Ok(admitted
            .map(|(arm, _)| arm)
            .map_err(|j| (j.verdict, j.detail.or(j.build_log_tail))))
    }

    /// The stages that build attempt `n` from `tree` and measure it.
    fn stages<'r>(
        &'r self,
        n: usize,
        tree: git2::Oid,
        settings: &'r trial::TrialSettings,
    ) -> ReplayStages<'r, 'a> {
        ReplayStages {
            replayer: self,
            tree,
            n,
            settings,
        }
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
        let rules = self.session.rules();
        let mut stages = self.stages(n, tree, settings);
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

/// An attempt on its way to a replayed decision.
enum Prepared {
    Ready(DecisionReplay, git2::Oid),
    Done(DecisionReplay),
}

/// `d` decided `v` before it was measured, or by a screen.
fn ended(mut d: DecisionReplay, v: AttemptVerdict, note: Option<String>) -> DecisionReplay {
    d.replayed = v;
    d.note = match (d.note.take(), note) {
        (Some(c), Some(n)) => Some(format!("{c}: {n}")),
        (c, n) => c.or(n),
    };
    d.agrees = Some(d.replayed == d.recorded);
    d
}

/// `d` as its judgement came out; a keep moves the replay's champion.
fn conclude(d: DecisionReplay, outcome: Outcome, at: &mut Standing) -> DecisionReplay {
    match outcome {
        Outcome::Ended(v, note) => ended(d, v, note),
        Outcome::Kept(tree, arm) => {
            at.tree = tree;
            at.arm = as_champion(&arm);
            ended(d, AttemptVerdict::Keep, None)
        }
    }
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
