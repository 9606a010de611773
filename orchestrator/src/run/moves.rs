//! Stacks and retries as attempts: the loop resolves their parts from the
//! journal and merges the parts' commits onto the champion in the worktree,
//! where the attempt then goes through the same scope check, judge and keep
//! rule as any agent's edit.

use anyhow::Result;

use super::search::{stack_idea, View};
use super::Loop;
use crate::agent::{AttemptSummary, Origin};
use crate::record::journal::{AttemptRecord, ChampionRecord};
use crate::referee::verdict::AttemptVerdict;

/// Why a stack or retry ends before it is built: its verdict and detail.
pub type Refusal = (AttemptVerdict, String);

impl Loop<'_> {
    /// The champions of the run in order, the current one last.
    pub(super) fn lineage(&self) -> Vec<String> {
        lineage_of(&self.champion)
    }

    /// The search's view of the run, over `history`.
    pub(super) fn view<'v>(
        &'v self,
        history: &'v [AttemptSummary],
        lineage: &'v [String],
    ) -> View<'v> {
        View {
            history,
            champion: &self.champion.commit,
            lineage,
            kept_ideas: &self.champion.kept_ideas,
            cfg: &self.config().search,
            threshold: self.config().compare.threshold,
        }
    }

    /// Fills `record` for a stack of `parts` (or a retry of one part) and
    /// merges them into the worktree; a part that is no measured attempt,
    /// or does not apply to the champion, ends the attempt.
    pub(super) fn merge_move(
        &self,
        record: &mut AttemptRecord,
        origin: Origin,
        parts: &[usize],
    ) -> Result<Option<Refusal>> {
        record.origin = origin;
        let mut found: Vec<&AttemptRecord> = Vec::new();
        for n in parts {
            match self.attempts.iter().find(|a| a.number == *n) {
                Some(a) if a.verdict.is_decided() && a.attempt_ref.is_some() => found.push(a),
                _ => {
                    return Ok(Some((
                        AttemptVerdict::Malformed,
                        format!("#{n} is not a measured attempt of this run"),
                    )))
                }
            }
        }
        if origin == Origin::Stack {
            if found.len() < 2 {
                return Ok(Some((
                    AttemptVerdict::Malformed,
                    "a stack needs at least two attempts".into(),
                )));
            }
            let ideas: Vec<&str> = found.iter().map(|a| a.idea.as_str()).collect();
            record.idea = stack_idea(&ideas);
            record.stack_of = parts.to_vec();
            record.category = "stack".into();
            record.hypothesis = format!(
                "stack of {}: {}",
                parts
                    .iter()
                    .map(|n| format!("#{n}"))
                    .collect::<Vec<_>>()
                    .join(" + "),
                found
                    .iter()
                    .map(|a| a.hypothesis.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        } else {
            let a = found[0];
            record.idea = a.idea.clone();
            record.retry_of = Some(a.number);
            record.playbook_id = a.playbook_id.clone();
            record.category = a.category.clone();
            record.hypothesis = format!(
                "retry of #{} on a newer champion: {}",
                a.number, a.hypothesis
            );
        }
        let mut commits = Vec::new();
        for a in &found {
            let name = a.attempt_ref.as_deref().expect("checked above");
            match self.git.repo.refname_to_id(name) {
                Ok(oid) => commits.push((a.number, oid)),
                Err(_) => {
                    return Ok(Some((
                        AttemptVerdict::DoesNotApply,
                        format!("attempt #{}: its ref {name} is missing", a.number),
                    )))
                }
            }
        }
        let champion = git2::Oid::from_str(&self.champion.commit)?;
        Ok(self
            .git
            .merge_into_worktree(champion, &commits)?
            .err()
            .map(|why| (AttemptVerdict::DoesNotApply, why)))
    }

    /// The champion a keep of `record` makes.
    pub(super) fn successor(
        &self,
        record: &AttemptRecord,
        commit: String,
        cost: f64,
    ) -> ChampionRecord {
        let parts: Vec<&AttemptRecord> = self
            .attempts
            .iter()
            .filter(|a| record.stack_of.contains(&a.number))
            .collect();
        self.champion
            .succeeded_by(record, &parts, commit, Some(cost))
    }
}

pub fn lineage_of(champion: &ChampionRecord) -> Vec<String> {
    let mut l = champion.lineage.clone();
    l.push(champion.commit.clone());
    l
}
