//! The offline agent: a search over the curated library of ideas in
//! `knowledge-base/playbook/*.toml`, not an LLM. Each idea is an edit, or a
//! parameter (a `#define`) explored over a range ([`super::param`]). Every
//! attempt, the agent forms a belief about what each idea it could propose
//! is worth against the current champion, from the entry's prior and every
//! measurement of that idea so far ([`super::search`]), and proposes the
//! move the policy picks: a new idea, a retry of one measured against an
//! earlier champion, or a parameter step. It stops when no move clears the
//! keep line with `search.min_keep_probability`, not when a list ends.
//! Stacks of promising attempts are the loop's, for every agent.

use anyhow::Result;

mod library;
pub use library::{load, Entry};

use super::search::{self, SearchConfig};

use super::{Agent, AttemptSummary, Origin, Proposal, ProposalContext, Proposed};
use crate::agent::edit::{self, Edit};
use crate::referee::posterior::Belief;
use crate::referee::verdict::AttemptVerdict;

pub struct Playbook {
    entries: Vec<Entry>,
    cfg: SearchConfig,
    threshold: f64,
}

/// One move the agent could make now.
struct Move {
    idea: String,
    hypothesis: String,
    category: String,
    edits: Vec<Edit>,
    belief: Belief,
    retry_of: Option<usize>,
    /// Never measured against any champion.
    fresh: bool,
}

/// Verdicts after which an idea is not proposed again: it does not build,
/// breaks the contract, changes nothing or was caught at something.
fn ends_the_idea(v: AttemptVerdict) -> bool {
    matches!(
        v,
        AttemptVerdict::BuildFailed
            | AttemptVerdict::Invalid
            | AttemptVerdict::NoOp
            | AttemptVerdict::Scope
            | AttemptVerdict::LatencyRegression
    )
}

impl Playbook {
    pub fn new(entries: Vec<Entry>, cfg: SearchConfig, threshold: f64) -> Self {
        Self {
            entries,
            cfg,
            threshold,
        }
    }

    /// The move for `idea` with `edits`, unless it was tried against this
    /// champion, has ended, or would be a retry beyond the budget.
    fn consider(
        &self,
        ctx: &ProposalContext,
        entry: &Entry,
        idea: String,
        hypothesis: String,
        edits: Vec<Edit>,
    ) -> Option<Move> {
        let of_idea: Vec<&AttemptSummary> = ctx.history.iter().filter(|a| a.idea == idea).collect();
        if of_idea
            .iter()
            .any(|a| a.champion == ctx.champion_commit || ends_the_idea(a.verdict))
        {
            return None;
        }
        let retry_of = of_idea
            .iter()
            .filter(|a| a.verdict.is_decided())
            .map(|a| a.number)
            .max();
        if retry_of.is_some() && ctx.retries_left == 0 {
            return None;
        }
        edit::apply_all(&ctx.files, &edits).ok()?;
        let belief = search::belief(
            &ctx.history,
            &idea,
            &ctx.lineage,
            entry.expected_ratio(),
            &self.cfg,
        );
        Some(Move {
            fresh: search::observations(&ctx.history, &idea, &ctx.lineage).is_empty(),
            idea,
            hypothesis,
            category: entry.category.clone(),
            edits,
            belief,
            retry_of,
        })
    }

    /// Every move open now, in the playbook's order.
    fn moves(&self, ctx: &ProposalContext) -> Vec<Move> {
        let mut moves = Vec::new();
        for entry in &self.entries {
            if let Some(missing) = entry.requires.iter().find(|r| !ctx.kept_ids.contains(r)) {
                tracing::debug!("playbook: {} requires {missing}", entry.id);
                continue;
            }
            let Some(param) = &entry.param else {
                // An entry that inserts lines before an anchor still
                // "applies" to a champion that has it; the lineage decides.
                if !ctx.kept_ids.contains(&entry.id) {
                    moves.extend(self.consider(
                        ctx,
                        entry,
                        entry.id.clone(),
                        entry.hypothesis.clone(),
                        entry.edits.clone(),
                    ));
                }
                continue;
            };
            let Some(text) = ctx.files.get(&param.path) else {
                continue;
            };
            let Some(current) = param.current(text) else {
                continue;
            };
            let key = |v: i64| format!("{}={v}", entry.id);
            let measured = |v: i64| {
                ctx.history
                    .iter()
                    .any(|a| a.idea == key(v) && a.champion == ctx.champion_commit)
            };
            for v in param.candidates(current, &measured) {
                let Some(edit) = param.edit(text, v) else {
                    continue;
                };
                let hypothesis = entry
                    .hypothesis
                    .replace("{value}", &v.to_string())
                    .replace("{current}", &current.to_string());
                moves.extend(self.consider(ctx, entry, key(v), hypothesis, vec![edit]));
            }
        }
        moves
    }
}

impl Agent for Playbook {
    fn name(&self) -> &str {
        "playbook"
    }

    fn plans_retries(&self) -> bool {
        true
    }

    fn exploring(&self, ctx: &ProposalContext) -> bool {
        self.moves(ctx).iter().any(|m| m.fresh)
    }

    fn propose(&mut self, ctx: &ProposalContext) -> Result<Proposed> {
        let moves = self.moves(ctx);
        let beliefs: Vec<Belief> = moves.iter().map(|m| m.belief).collect();
        let fresh: Vec<bool> = moves.iter().map(|m| m.fresh).collect();
        let round = ctx.history.len() as u64;
        let Some(i) = search::choose(&beliefs, &fresh, self.threshold, &self.cfg, round) else {
            return Ok(Proposed::Exhausted);
        };
        let m = moves.into_iter().nth(i).expect("chosen among the moves");
        tracing::debug!(
            "playbook: {} (expected ratio {:.3}, keep probability {:.2})",
            m.idea,
            m.belief.ratio(),
            m.belief.keep_probability(self.threshold)
        );
        Ok(Proposed::Edits(Proposal {
            hypothesis: m.hypothesis,
            category: m.category,
            playbook_id: Some(m.idea),
            edits: m.edits,
            usage: None,
            origin: if m.retry_of.is_some() {
                Origin::Retry
            } else {
                Origin::Agent
            },
            retry_of: m.retry_of,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::library::tests::{root, vanilla};
    use super::*;
    use std::path::Path;

    fn agent() -> Playbook {
        let entries = load(&root().join("knowledge-base/playbook")).unwrap();
        Playbook::new(entries, SearchConfig::default(), 0.03)
    }

    fn proposal(agent: &mut Playbook, ctx: &ProposalContext) -> Proposal {
        match agent.propose(ctx).unwrap() {
            Proposed::Edits(p) => p,
            _ => panic!("expected a proposal"),
        }
    }

    fn measured(
        p: &Proposal,
        n: usize,
        champion: &str,
        ratio: f64,
        ci: [f64; 2],
    ) -> AttemptSummary {
        let idea = p.playbook_id.clone().unwrap();
        let verdict = if ci[1] < 1.0 {
            AttemptVerdict::Promising
        } else {
            AttemptVerdict::Discard
        };
        let mut a = AttemptSummary::measured(n, &idea, champion, verdict);
        a.ratio = Some(ratio);
        a.interval = Some(ci);
        a
    }

    #[test]
    fn proposes_by_prior_and_skips_what_was_tried_or_needs_a_missing_win() {
        let mut agent = agent();
        let mut ctx = ProposalContext::for_tests(vanilla(), Path::new(""));
        let first = proposal(&mut agent, &ctx);
        assert_eq!(first.playbook_id.as_deref(), Some("ring-defer-taskrun"));
        assert_eq!(first.origin, Origin::Agent);
        ctx.history
            .push(measured(&first, 1, "c0", 0.99, [0.985, 0.996]));
        let second = proposal(&mut agent, &ctx);
        assert_eq!(second.playbook_id.as_deref(), Some("multishot-accept"));
        // Against a new champion the near-zero idea is worth a retry, and
        // says so; the multishot idea (kept) is never proposed again, even
        // where its edits would still apply (it only inserts before anchors).
        let multishot = edit::apply_all(&ctx.files, &second.edits).unwrap();
        assert!(edit::apply_all(&multishot, &second.edits).is_ok());
        ctx.history
            .push(measured(&second, 2, "c0", 0.9, [0.88, 0.92]));
        ctx.files = multishot;
        ctx.kept_ids = vec!["multishot-accept".into()];
        ctx.champion_commit = "c1".into();
        ctx.lineage.push("c1".into());
        let mut seen = vec![];
        for n in 3..40 {
            let Proposed::Edits(p) = agent.propose(&ctx).unwrap() else {
                break;
            };
            let idea = p.playbook_id.clone().unwrap();
            assert_ne!(idea, "multishot-accept");
            assert!(
                !seen.contains(&idea),
                "{idea} proposed twice on one champion"
            );
            if idea == "ring-defer-taskrun" {
                assert_eq!((p.origin, p.retry_of), (Origin::Retry, Some(1)));
            }
            seen.push(idea);
            ctx.history.push(measured(&p, n, "c1", 1.05, [1.03, 1.07]));
        }
        assert!(seen.contains(&"ring-defer-taskrun".to_string()), "{seen:?}");
        // Ideas that need a missing win are not proposed.
        assert!(
            !seen.iter().any(|i| i.starts_with("file-table")),
            "{seen:?}"
        );
    }

    #[test]
    fn a_parameter_is_explored_coarse_then_fine_and_the_search_stops() {
        let entries: Vec<Entry> = load(&root().join("knowledge-base/playbook"))
            .unwrap()
            .into_iter()
            .filter(|e| e.id == "queue-depth")
            .collect();
        assert_eq!(entries.len(), 1, "the playbook has a queue-depth parameter");
        let mut agent = Playbook::new(entries, SearchConfig::default(), 0.03);
        let mut ctx = ProposalContext::for_tests(vanilla(), Path::new(""));
        let mut order = vec![];
        for n in 1..20 {
            let Proposed::Edits(p) = agent.propose(&ctx).unwrap() else {
                break;
            };
            let files = edit::apply_all(&ctx.files, &p.edits).unwrap();
            assert!(files["treatment/server.c"].contains(&format!(
                "#define QUEUE_DEPTH {}\n",
                p.playbook_id.as_deref().unwrap().split('=').nth(1).unwrap()
            )));
            order.push(p.playbook_id.clone().unwrap());
            ctx.history.push(measured(&p, n, "c0", 1.0, [0.99, 1.01]));
        }
        // From 2048: x4 each way, then x2 each way, then nothing is likely.
        assert_eq!(
            order,
            [
                "queue-depth=512",
                "queue-depth=8192",
                "queue-depth=1024",
                "queue-depth=4096"
            ]
        );
    }
}
