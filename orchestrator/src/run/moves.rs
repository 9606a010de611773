//! Stacks and retries as attempts: the loop resolves their parts from the
//! journal and merges the parts' commits onto the champion in the worktree,
//! where the attempt then goes through the same scope check, judge and keep
//! rule as any agent's edit.

use anyhow::Result;

use super::own_moves::{stack_idea, View};
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
        let found = match resolve_parts(&self.attempts, parts) {
            Ok(found) => found,
            Err(refusal) => return Ok(Some(refusal)),
        };
        if let Some(refusal) = describe_move(record, origin, parts, &found) {
            return Ok(Some(refusal));
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

/// The attempts `parts` names, each a measured attempt of this run with
/// its ref; else the refusal of the move.
fn resolve_parts<'r>(
    attempts: &'r [AttemptRecord],
    parts: &[usize],
) -> std::result::Result<Vec<&'r AttemptRecord>, Refusal> {
    let mut found = Vec::new();
    for n in parts {
        match attempts.iter().find(|a| a.number == *n) {
            Some(a) if a.verdict.is_decided() && a.attempt_ref.is_some() => found.push(a),
            _ => {
                return Err((
                    AttemptVerdict::Malformed,
                    format!("#{n} is not a measured attempt of this run"),
                ))
            }
        }
    }
    Ok(found)
}

/// Fills `record` for a stack of the attempts `found` (numbered `parts`),
/// or for a retry of `found[0]`; a stack of fewer than two is refused.
fn describe_move(
    record: &mut AttemptRecord,
    origin: Origin,
    parts: &[usize],
    found: &[&AttemptRecord],
) -> Option<Refusal> {
    if origin == Origin::Stack {
        if found.len() < 2 {
            return Some((
                AttemptVerdict::Malformed,
                "a stack needs at least two attempts".into(),
            ));
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
    None
}

pub fn lineage_of(champion: &ChampionRecord) -> Vec<String> {
    let mut l = champion.lineage.clone();
    l.push(champion.commit.clone());
    l
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::meters::meter::MeterEvent;

    fn attempt(n: usize, idea: &str, verdict: AttemptVerdict, measured: bool) -> AttemptRecord {
        let meter = MeterEvent::TaskClock;
        let mut a = super::super::iterate::new_record(n, "offline", "c0", meter, String::new());
        a.idea = idea.into();
        a.hypothesis = format!("try {idea}");
        a.category = "syscalls".into();
        a.playbook_id = Some(idea.into());
        a.verdict = verdict;
        a.attempt_ref = measured.then(|| format!("refs/ratchet/r/attempts/{n}"));
        a
    }

    fn journal() -> Vec<AttemptRecord> {
        vec![
            attempt(1, "writev", AttemptVerdict::Promising, true),
            attempt(2, "nodelay", AttemptVerdict::BuildFailed, true),
            attempt(3, "cork", AttemptVerdict::Discard, true),
            attempt(4, "epoll", AttemptVerdict::Promising, false),
        ]
    }

    #[test]
    fn only_measured_attempts_with_their_ref_are_parts() {
        let journal = journal();
        let found = resolve_parts(&journal, &[1, 3]).unwrap();
        assert_eq!(found.iter().map(|a| a.number).collect::<Vec<_>>(), [1, 3]);
        for n in [2, 4, 9] {
            let (v, d) = resolve_parts(&journal, &[1, n]).unwrap_err();
            assert_eq!(v, AttemptVerdict::Malformed);
            assert_eq!(d, format!("#{n} is not a measured attempt of this run"));
        }
    }

    #[test]
    fn a_stack_is_named_by_its_parts_and_a_retry_after_the_attempt_it_retries() {
        let journal = journal();
        let blank = || attempt(5, "#5", AttemptVerdict::Invalid, false);
        let mut r = blank();
        let found = resolve_parts(&journal, &[3, 1]).unwrap();
        assert_eq!(describe_move(&mut r, Origin::Stack, &[3, 1], &found), None);
        assert_eq!(r.idea, stack_idea(&["writev", "cork"]));
        assert_eq!(r.hypothesis, "stack of #3 + #1: try cork; try writev");
        assert_eq!(
            (r.category.as_str(), r.stack_of.as_slice()),
            ("stack", &[3, 1][..])
        );
        let mut r = blank();
        let found = resolve_parts(&journal, &[1]).unwrap();
        let refused = describe_move(&mut r, Origin::Stack, &[1], &found).unwrap();
        assert_eq!(refused.1, "a stack needs at least two attempts");
        let mut r = blank();
        assert_eq!(describe_move(&mut r, Origin::Retry, &[1], &found), None);
        assert_eq!(r.hypothesis, "retry of #1 on a newer champion: try writev");
        assert_eq!((r.idea.as_str(), r.retry_of), ("writev", Some(1)));
        assert_eq!(r.playbook_id.as_deref(), Some("writev"));
        assert_eq!(r.category, "syscalls");
    }
}
