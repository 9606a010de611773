//! One iteration of the loop: propose -> scope, then the referee's judging
//! sequence, then keep (commit, new champion) or discard (reset), and the
//! record of it in the journal and the knowledge base.
//!
//! [`Loop::iterate`] is the sequence of steps; the propose step is in
//! `propose.rs`, the judging step in `judging.rs`, a generation's steps in
//! `generation.rs` and the record in `summary.rs`. A step that ends the
//! attempt writes in the order crash recovery (`recover.rs`) relies on:
//! git first (the worktree reset, or a keep's commit on the branch), then
//! the attempt's record in the journal, then a new champion's
//! `champion.json`.

use anyhow::Result;
use std::time::Instant;

use super::commits::{attempt_message, kept_message, provenance};
use super::moves::Refusal;
use super::{scope, Loop};
use crate::agent::{Origin, Proposed};
use crate::bench::meters::meter::MeterEvent;
use crate::clock::now_utc;
use crate::record::journal::{AttemptRecord, Durations};
use crate::record::trailers;
use crate::referee::judge::Judgement;
use crate::referee::verdict::AttemptVerdict;

/// An attempt under way: its number, when it started, the champion it is
/// made against, and its record as filled so far.
pub(super) struct Attempt {
    pub n: usize,
    started: Instant,
    pub champion: git2::Oid,
    pub record: AttemptRecord,
}

impl Attempt {
    /// The record, ended with `verdict` (and `detail`, when given).
    pub fn finish(self, verdict: AttemptVerdict, detail: Option<String>) -> AttemptRecord {
        let total_s = self.started.elapsed().as_secs_f64();
        close(self.record, verdict, detail, total_s, now_utc())
    }
}

/// The record of attempt `n` against `champion` before anything is known:
/// `invalid` until a step ends it, its idea its own `#n`.
pub(super) fn new_record(
    n: usize,
    agent: &str,
    champion: &str,
    meter: MeterEvent,
    started_at: String,
) -> AttemptRecord {
    AttemptRecord {
        number: n,
        agent: agent.to_string(),
        hypothesis: String::new(),
        category: "uncategorized".into(),
        playbook_id: None,
        idea: format!("#{n}"),
        origin: Origin::Agent,
        stack_of: vec![],
        retry_of: None,
        champion: champion.to_string(),
        attempt_ref: None,
        commit: None,
        diff: String::new(),
        build_ok: None,
        build_log_tail: None,
        binary_sha256: None,
        verdict: AttemptVerdict::Invalid,
        detail: None,
        meter: Some(meter),
        samples: None,
        vs_champion: None,
        vs_control: None,
        champion_vs_control: None,
        confirmation: None,
        extended: false,
        endurance: None,
        screen: None,
        ablation: None,
        control_drift: None,
        durations: Durations::default(),
        usage: None,
        replies: vec![],
        started_at,
        finished_at: String::new(),
    }
}

/// A record's last fields: its verdict, the detail of the step that ended
/// it when that step gives one (else the judge's stands), and its times.
fn close(
    mut r: AttemptRecord,
    verdict: AttemptVerdict,
    detail: Option<String>,
    total_s: f64,
    finished_at: String,
) -> AttemptRecord {
    r.verdict = verdict;
    if detail.is_some() {
        r.detail = detail;
    }
    r.durations.total_s = total_s;
    r.finished_at = finished_at;
    r
}

/// How the scope check ends an attempt, if it does: a no-op when nothing
/// changed at all, out of scope when anything changed where it may not.
fn scope_refusal(nothing_changed: bool, outside: &[String]) -> Option<Refusal> {
    if nothing_changed && outside.is_empty() {
        return Some((AttemptVerdict::NoOp, "the proposal changed nothing".into()));
    }
    (!outside.is_empty()).then(|| {
        let paths = outside.join(", ");
        let detail = format!("changed paths outside run.allowed_paths: {paths}");
        (AttemptVerdict::Scope, detail)
    })
}

/// How preparing an attempt ended.
pub(super) enum Prepared {
    /// The agent has nothing left.
    Exhausted,
    /// The attempt ended before anything was built, and is recorded.
    Ended,
    /// Its tree is fixed under its ref, ready to build and measure.
    Fixed(Box<Attempt>, git2::Oid),
}

impl Loop<'_> {
    /// One iteration. Returns false when the agent has nothing left.
    pub(super) fn iterate(&mut self) -> Result<bool> {
        if let Some(size) = self.generation_size()? {
            return self.generation(size);
        }
        let (mut at, tree) = match self.prepare(true)? {
            Prepared::Exhausted => return Ok(false),
            Prepared::Ended => return Ok(true),
            Prepared::Fixed(at, tree) => (*at, tree),
        };
        let judgement = self.judge(&mut at, tree)?;
        self.end_judged(at, tree, &judgement)?;
        Ok(true)
    }

    /// Keeps or discards a judged attempt, as its judgement says and as
    /// the ablation of a stack allows.
    pub(super) fn end_judged(
        &mut self,
        mut at: Attempt,
        tree: git2::Oid,
        judgement: &Judgement,
    ) -> Result<()> {
        if judgement.verdict.is_keep() && self.survives_ablation(&mut at, tree)? {
            self.keep(at, tree, judgement)
        } else {
            self.discard(at, judgement.tampered)
        }
    }

    /// A new attempt, proposed (by the loop's own move when `own_moves`
    /// allows one, else by the agent), scope-checked and fixed under its
    /// ref; or ended and recorded on the way.
    pub(super) fn prepare(&mut self, own_moves: bool) -> Result<Prepared> {
        let mut at = self.begin()?;
        let asked = self.ask(&mut at, own_moves)?;
        let refused = match asked.proposed {
            Ok(Proposed::Exhausted) => return Ok(Prepared::Exhausted),
            Err(e) => {
                self.end_without_proposal(at, e)?;
                return Ok(Prepared::Ended);
            }
            Ok(Proposed::Edits(p)) => self.apply_edits(&mut at.record, p, &asked.ctx.files)?,
            Ok(Proposed::WorktreeChanged {
                hypothesis,
                category,
            }) => {
                at.record.hypothesis = hypothesis;
                at.record.category = category;
                None
            }
            Ok(Proposed::Stack { parts, usage }) => {
                self.merge_onto_champion(&mut at, Origin::Stack, &parts, usage)?
            }
            Ok(Proposed::Retry { of, usage }) => {
                self.merge_onto_champion(&mut at, Origin::Retry, &[of], usage)?
            }
        };
        // No (idea, champion) pair is measured twice, whoever proposed it.
        let refused = refused.or_else(|| self.measured_here(&at.record.idea, &asked.ctx));
        if let Some(refusal) = refused {
            self.end_refused(at, refusal)?;
            return Ok(Prepared::Ended);
        }
        let changed = self.git.changed_paths()?;
        let outside = self.out_of_scope(&changed, asked.tampering)?;
        if let Some(refusal) = scope_refusal(changed.is_empty(), &outside) {
            self.end_at_scope(at, refusal)?;
            return Ok(Prepared::Ended);
        }
        let tree = self.fix_attempt(&mut at)?;
        Ok(Prepared::Fixed(Box::new(at), tree))
    }

    /// A new attempt, numbered after the recorded ones and those of the
    /// generation under way, against the champion.
    fn begin(&self) -> Result<Attempt> {
        let n = self.attempts.len() + self.unjournaled().len() + 1;
        let started = Instant::now();
        let champion = git2::Oid::from_str(&self.champion.commit)?;
        let record = new_record(
            n,
            self.agent.name(),
            &self.champion.commit,
            self.session.plan.event,
            now_utc(),
        );
        Ok(Attempt {
            n,
            started,
            champion,
            record,
        })
    }

    /// Ends an attempt refused before its scope check: the worktree back at
    /// the champion, then the record.
    fn end_refused(&mut self, at: Attempt, (verdict, detail): Refusal) -> Result<()> {
        self.git.reset_hard(at.champion)?;
        let r = at.finish(verdict, Some(detail));
        self.record(r)
    }

    /// What of the `changed` paths is out of scope: paths outside
    /// `run.allowed_paths`, hard links, and what the agent did to git or
    /// outside the worktree (`tampering`, already undone).
    fn out_of_scope(
        &self,
        changed: &[(String, bool)],
        tampering: Vec<String>,
    ) -> Result<Vec<String>> {
        let mut outside = scope::violations(&self.config().run.allowed_paths, changed);
        outside.extend(
            self.git
                .hard_links()?
                .into_iter()
                .map(|p| format!("{p} (hard link)")),
        );
        outside.extend(tampering);
        Ok(outside)
    }

    fn attempt_ref(&self, n: usize) -> String {
        format!("refs/ratchet/{}/attempts/{n}", self.run.run_id)
    }

    /// Ends an attempt at the scope check. One that changed something out
    /// of scope keeps the evidence of what was tried under its ref, without
    /// the symlinks' targets, and the worktree goes back to the champion.
    fn end_at_scope(&mut self, mut at: Attempt, (verdict, detail): Refusal) -> Result<()> {
        if verdict == AttemptVerdict::Scope {
            let message = attempt_message(&self.run.run_id, at.n, &at.record);
            let attempt_ref = self.attempt_ref(at.n);
            if let Ok(oid) = self.git.commit_worktree(&message, false) {
                self.git
                    .set_ref(&attempt_ref, oid, "ratchet attempt (scope)")?;
                at.record.attempt_ref = Some(attempt_ref);
            }
            self.git.reset_hard(at.champion)?;
        }
        let r = at.finish(verdict, Some(detail));
        self.record(r)
    }

    /// Fixes the attempt before anything untrusted runs: its tree, committed
    /// under its ref, is what the build, the measurement and a keep all use.
    fn fix_attempt(&self, at: &mut Attempt) -> Result<git2::Oid> {
        let message = attempt_message(&self.run.run_id, at.n, &at.record);
        let attempt_ref = self.attempt_ref(at.n);
        let tree = self.git.tree_of_worktree()?;
        let oid = self.git.commit_tree(tree, &message, false)?;
        self.git.set_ref(&attempt_ref, oid, "ratchet attempt")?;
        at.record.attempt_ref = Some(attempt_ref);
        at.record.diff = self.git.diff(at.champion, oid)?;
        Ok(tree)
    }

    /// Keeps the attempt: its tree committed on the run branch with the
    /// evidence, its record, then the new champion (journal, build, profile).
    pub(super) fn keep(
        &mut self,
        mut at: Attempt,
        tree: git2::Oid,
        judgement: &Judgement,
    ) -> Result<()> {
        let cost = judgement
            .evidence
            .as_ref()
            .map_or(0.0, |e| e.candidate_cost);
        let msg = kept_message(
            &at.record,
            self.agent.name(),
            &self.evidence(&at.record, cost),
        );
        let commit = self.git.commit_tree(tree, &msg, true)?;
        self.git.reset_hard(commit)?;
        at.record.commit = Some(commit.to_string());
        let new_champion = self.successor(&at.record, commit.to_string(), cost);
        let r = at.finish(AttemptVerdict::Keep, None);
        self.record(r)?;
        // A generation's attempts reach the journal in order, before the
        // champion they may have made.
        self.flush_generation()?;
        self.journal.write_champion(&new_champion)?;
        self.champion = new_champion;
        self.champion_arm = self.build_champion()?;
        self.refresh_profile();
        Ok(())
    }

    /// The trailers of a kept commit.
    fn evidence(&self, record: &AttemptRecord, cost: f64) -> trailers::Evidence {
        let cmp = record.vs_champion.as_ref();
        trailers::Evidence {
            run: self.run.run_id.clone(),
            attempt: record.number,
            meter: format!("{} ({})", self.session.plan.event.name(), self.unit()),
            unit: self.unit().into(),
            cost_per_connection: Some(cost),
            ratio: cmp.and_then(|c| c.ratio_median),
            interval: cmp.and_then(|c| c.ratio_interval),
            vs_control: record.vs_control.as_ref().and_then(|c| c.ratio_median),
            provenance: provenance(record),
        }
    }

    /// Discards the attempt: the worktree back at the champion (and the
    /// builds redone when a binary was modified on disk), then its record.
    pub(super) fn discard(&mut self, at: Attempt, tampered: bool) -> Result<()> {
        self.git.reset_hard(at.champion)?;
        if tampered {
            self.rebuild_after_tampering()?;
        }
        let verdict = at.record.verdict;
        let r = at.finish(verdict, None);
        self.record(r)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A new attempt's record, as the loop's tests start from.
    pub(in crate::run) fn record(n: usize) -> AttemptRecord {
        new_record(n, "offline", "c0", MeterEvent::TaskClock, "t0".into())
    }

    #[test]
    fn a_new_attempt_is_invalid_under_its_own_idea_until_a_step_ends_it() {
        let r = record(3);
        assert_eq!(r.verdict, AttemptVerdict::Invalid);
        assert_eq!(r.idea, "#3");
        assert_eq!(r.category, "uncategorized");
        assert_eq!(r.origin, Origin::Agent);
        assert_eq!(r.champion, "c0");
        assert_eq!(r.meter, Some(MeterEvent::TaskClock));
    }

    #[test]
    fn the_step_that_ends_an_attempt_gives_its_verdict_and_detail_if_any() {
        let mut r = record(1);
        r.detail = Some("the judge's".into());
        let kept = close(r.clone(), AttemptVerdict::Discard, None, 2.5, "t1".into());
        assert_eq!(kept.verdict, AttemptVerdict::Discard);
        assert_eq!(kept.detail.as_deref(), Some("the judge's"));
        assert_eq!(kept.durations.total_s, 2.5);
        assert_eq!(kept.finished_at, "t1");
        let ended = close(
            r,
            AttemptVerdict::NoOp,
            Some("a step's".into()),
            0.0,
            "t1".into(),
        );
        assert_eq!(ended.detail.as_deref(), Some("a step's"));
    }

    #[test]
    fn nothing_changed_is_a_no_op_and_anything_outside_is_out_of_scope() {
        let none: [String; 0] = [];
        let (v, d) = scope_refusal(true, &none).unwrap();
        assert_eq!(
            (v, d.as_str()),
            (AttemptVerdict::NoOp, "the proposal changed nothing")
        );
        assert!(scope_refusal(false, &none).is_none(), "in scope: judged");
        let outside = [
            "Makefile".to_string(),
            "the git directory: HEAD".to_string(),
        ];
        for nothing_changed in [true, false] {
            let (v, d) = scope_refusal(nothing_changed, &outside).unwrap();
            assert_eq!(v, AttemptVerdict::Scope);
            assert_eq!(
                d,
                "changed paths outside run.allowed_paths: Makefile, the git directory: HEAD"
            );
        }
    }
}
