//! The propose step of an iteration: the loop's own move (a stack, or a
//! retry for an agent that plans none), else the agent's, with the guards
//! that undo what an agent did to git or outside the worktree; then the
//! proposal taken into the attempt's record and into the worktree.

use anyhow::Result;
use std::collections::BTreeMap;
use std::time::Instant;

use super::iterate::Attempt;
use super::moves::Refusal;
use super::own_moves::LoopMove;
use super::{scope, Loop};
use crate::agent::edit::Edit;
use crate::agent::{AgentFailure, Origin, Proposal, ProposalContext, Proposed, Usage};
use crate::interrupt;
use crate::record::gitops::{GitDirSnapshot, MainTreeSnapshot};
use crate::record::journal::AttemptRecord;
use crate::referee::verdict::AttemptVerdict;

/// What asking gave: the proposal (or why there is none), the context it
/// was made in, and what the agent changed where it may not (undone).
pub(super) struct Asked {
    pub proposed: Result<Proposed>,
    pub ctx: ProposalContext,
    pub tampering: Vec<String>,
}

/// The verdict of an attempt the agent gave no usable proposal for, and
/// what asking cost; `None` for an error of ratchet's own.
fn failure_verdict(e: &anyhow::Error) -> Option<(AttemptVerdict, Usage)> {
    match e.downcast_ref::<AgentFailure>()? {
        AgentFailure::Malformed { usage, .. } => Some((AttemptVerdict::Malformed, usage.clone())),
        AgentFailure::Unavailable { usage, .. } => {
            Some((AttemptVerdict::AgentError, usage.clone()))
        }
    }
}

/// Fills `record` from an agent's proposal and returns its edits. The
/// attempt's idea is the playbook entry, else the idea of the attempt it
/// retries (`retried`), else stays its own `#n`.
fn take_proposal(record: &mut AttemptRecord, p: Proposal, retried: Option<String>) -> Vec<Edit> {
    record.hypothesis = p.hypothesis;
    record.category = p.category;
    record.origin = p.origin;
    record.retry_of = p.retry_of;
    if let Some(idea) = p.playbook_id.clone().or(retried) {
        record.idea = idea;
    }
    record.playbook_id = p.playbook_id;
    record.usage = p.usage;
    p.edits
}

/// The refusal of an idea already measured against this champion, as
/// attempt `k`.
fn already_measured(idea: &str, k: usize) -> Refusal {
    (
        AttemptVerdict::NoOp,
        format!("{idea} was already measured against this champion, as attempt #{k}"),
    )
}

impl Loop<'_> {
    /// The allowed files of the worktree, by repository-relative path.
    fn allowed_files(&self) -> Result<BTreeMap<String, String>> {
        let prefix = self.config().paths.treatment.display().to_string();
        scope::allowed_files(
            &self.treatment_in_worktree(),
            &prefix,
            &self.config().run.allowed_paths,
        )
    }

    /// Asks for the attempt's proposal: the loop's own move if it makes
    /// one and `own_moves` allows it, else the agent's. What the agent did
    /// to the git directory or outside the worktree is undone, and comes
    /// back as tampering.
    pub(super) fn ask(&mut self, at: &mut Attempt, own_moves: bool) -> Result<Asked> {
        let ctx = self.proposal_context()?;
        let forced = own_moves.then(|| self.own_move(&ctx)).flatten();
        let t = Instant::now();
        let git_before = GitDirSnapshot::take(&self.git)?;
        let tree_before = MainTreeSnapshot::take(&self.session.workspace.root)?;
        let agent_asked = forced.is_none();
        let proposed = self.propose(at.n, forced, &ctx);
        at.record.durations.propose_s = t.elapsed().as_secs_f64();
        if agent_asked {
            at.record.replies = self.agent.rounds().to_vec();
        }
        let tampering = self.undo_tampering(&git_before, &tree_before)?;
        interrupt::check()?;
        Ok(Asked {
            proposed,
            ctx,
            tampering,
        })
    }

    /// The loop's own move now, if it makes one.
    pub(super) fn own_move(&self, ctx: &ProposalContext) -> Option<LoopMove> {
        self.view(&ctx.history, &ctx.lineage)
            .next_move(self.agent.plans_retries(), self.agent.exploring(ctx))
    }

    /// What the agent is shown: the champion's allowed files, the run's
    /// history and lineage, the pool for stacks, the lessons, the profile
    /// and the contract.
    pub(super) fn proposal_context(&self) -> Result<ProposalContext> {
        let history = self.history();
        let lineage = self.lineage();
        let (pool, retries_left) = {
            let view = self.view(&history, &lineage);
            (view.pool(), view.retries_left())
        };
        Ok(ProposalContext {
            files: self.allowed_files()?,
            champion_commit: self.champion.commit.clone(),
            kept_ids: self.champion.kept_ids.clone(),
            kept_ideas: self.champion.kept_ideas.clone(),
            lineage,
            history,
            pool,
            retries_left,
            lessons: self.kb.digest(),
            profile: self.profile_text.clone(),
            contract: self.config().contract.clone(),
            target: self.config().target.clone(),
            allowed_paths: self.config().run.allowed_paths.clone(),
            build: crate::bench::servers::build::described(
                &self.treatment_in_worktree(),
                &self.config().target,
            ),
            worktree: self.git.path.clone(),
        })
    }

    /// The move: the loop's own (`forced`), else the agent's; an agent with
    /// nothing left still gets the last stack worth measuring or an
    /// interaction probe, if any.
    fn propose(
        &mut self,
        n: usize,
        forced: Option<LoopMove>,
        ctx: &ProposalContext,
    ) -> Result<Proposed> {
        match forced {
            Some(LoopMove::Stack(parts)) => Ok(Proposed::Stack { parts, usage: None }),
            Some(LoopMove::Retry(of)) => Ok(Proposed::Retry { of, usage: None }),
            None => {
                self.bar
                    .set_message(format!("#{n} asking the {} agent", self.agent.name()));
                match self.agent.propose(ctx) {
                    Ok(Proposed::Exhausted) => {
                        Ok(self.view(&ctx.history, &ctx.lineage).last_move().map_or(
                            Proposed::Exhausted,
                            |parts| Proposed::Stack { parts, usage: None },
                        ))
                    }
                    other => other,
                }
            }
        }
    }

    /// Puts the git directory and the main tree back as they were before
    /// the proposal, and says what had changed there.
    fn undo_tampering(
        &self,
        git_before: &GitDirSnapshot,
        tree_before: &MainTreeSnapshot,
    ) -> Result<Vec<String>> {
        let mut tampering: Vec<String> = git_before
            .restore(&self.git)?
            .into_iter()
            .map(|g| format!("the git directory: {g}"))
            .collect();
        tampering.extend(
            tree_before
                .restore()?
                .into_iter()
                .map(|p| format!("outside the worktree: {p}")),
        );
        Ok(tampering)
    }

    /// Ends an attempt the agent gave no usable proposal for (a malformed
    /// reply, an agent unavailable); any other error is ratchet's own and
    /// ends the run, with the worktree back at the champion either way.
    pub(super) fn end_without_proposal(&mut self, mut at: Attempt, e: anyhow::Error) -> Result<()> {
        self.git.reset_hard(at.champion)?;
        let Some((verdict, usage)) = failure_verdict(&e) else {
            return Err(e);
        };
        at.record.hypothesis = "(no usable proposal)".into();
        at.record.usage = Some(usage);
        let r = at.finish(verdict, Some(format!("{e:#}")));
        self.record(r)
    }

    /// Takes an agent's edits into the record and writes them into the
    /// worktree; edits that do not apply make the attempt malformed.
    pub(super) fn apply_edits(
        &self,
        record: &mut AttemptRecord,
        p: Proposal,
        files: &BTreeMap<String, String>,
    ) -> Result<Option<Refusal>> {
        let retried = p
            .retry_of
            .and_then(|k| self.attempts.iter().find(|a| a.number == k))
            .map(|a| a.idea.clone());
        let edits = take_proposal(record, p, retried);
        match crate::agent::edit::apply_all(files, &edits) {
            Ok(files) => {
                for (path, text) in files {
                    std::fs::write(self.git.path.join(&path), text)?;
                }
                Ok(None)
            }
            Err(e) => Ok(Some((AttemptVerdict::Malformed, format!("{e:#}")))),
        }
    }

    /// A stack or a retry: the worktree reset to the champion and the
    /// parts' commits merged into it ([`Loop::merge_move`]).
    pub(super) fn merge_onto_champion(
        &self,
        at: &mut Attempt,
        origin: Origin,
        parts: &[usize],
        usage: Option<Usage>,
    ) -> Result<Option<Refusal>> {
        at.record.usage = usage;
        self.git.reset_hard(at.champion)?;
        self.merge_move(&mut at.record, origin, parts)
    }

    /// The refusal of an idea this champion was already measured against,
    /// whoever proposed it.
    pub(super) fn measured_here(&self, idea: &str, ctx: &ProposalContext) -> Option<Refusal> {
        let k = self.view(&ctx.history, &ctx.lineage).tried_here(idea)?;
        Some(already_measured(idea, k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(cost_usd: f64) -> Usage {
        Usage {
            input_tokens: 10,
            output_tokens: 20,
            cost_usd,
        }
    }

    #[test]
    fn an_agent_failure_is_an_attempt_and_any_other_error_ends_the_run() {
        let malformed = anyhow::Error::new(AgentFailure::Malformed {
            message: "no JSON".into(),
            usage: usage(0.5),
        });
        assert_eq!(
            failure_verdict(&malformed),
            Some((AttemptVerdict::Malformed, usage(0.5)))
        );
        let down = anyhow::Error::new(AgentFailure::Unavailable {
            message: "HTTP 503".into(),
            usage: usage(0.0),
        })
        .context("asking the agent");
        assert_eq!(
            failure_verdict(&down),
            Some((AttemptVerdict::AgentError, usage(0.0)))
        );
        assert_eq!(failure_verdict(&anyhow::anyhow!("disk full")), None);
    }

    fn proposal(playbook_id: Option<&str>, retry_of: Option<usize>) -> Proposal {
        Proposal {
            hypothesis: "h".into(),
            category: "c".into(),
            playbook_id: playbook_id.map(String::from),
            edits: vec![Edit {
                path: "treatment/a.c".into(),
                search: "x".into(),
                replace: "y".into(),
            }],
            usage: Some(usage(0.1)),
            origin: if retry_of.is_some() {
                Origin::Retry
            } else {
                Origin::Agent
            },
            retry_of,
        }
    }

    fn blank(n: usize) -> AttemptRecord {
        let meter = crate::bench::meters::meter::MeterEvent::TaskClock;
        super::super::iterate::new_record(n, "offline", "c0", meter, String::new())
    }

    #[test]
    fn a_proposal_names_its_idea_by_playbook_entry_else_by_the_attempt_it_retries() {
        let mut r = blank(3);
        let edits = take_proposal(&mut r, proposal(Some("writev"), Some(1)), Some("#1".into()));
        assert_eq!(edits.len(), 1);
        assert_eq!(
            (r.idea.as_str(), r.playbook_id.as_deref()),
            ("writev", Some("writev"))
        );
        assert_eq!((r.origin, r.retry_of), (Origin::Retry, Some(1)));
        assert_eq!(r.usage, Some(usage(0.1)));
        let mut r = blank(3);
        take_proposal(&mut r, proposal(None, Some(1)), Some("#1".into()));
        assert_eq!(r.idea, "#1", "a retry keeps the retried attempt's idea");
        let mut r = blank(3);
        take_proposal(&mut r, proposal(None, None), None);
        assert_eq!((r.idea.as_str(), r.hypothesis.as_str()), ("#3", "h"));
    }

    #[test]
    fn an_idea_measured_against_this_champion_is_a_no_op() {
        let (v, d) = already_measured("writev", 2);
        assert_eq!(v, AttemptVerdict::NoOp);
        assert_eq!(
            d,
            "writev was already measured against this champion, as attempt #2"
        );
    }
}
