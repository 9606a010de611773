//! The loop's own moves, made for every agent: a stack (the union of
//! promising attempts, merged onto the champion) and, for agents that do not
//! plan their own, a retry (an idea measured against an earlier champion,
//! merged onto the current one). Both are derived from the journal alone,
//! so a resumed run makes exactly the moves it would have made.
//!
//! A stack is proposed when the beliefs of its parts
//! ([`crate::agent::search`]) give the union at least
//! `search.stack_min_probability` of clearing the keep line: a union the
//! measurements say most likely falls short would only spend an attempt.
//! Among the unions of the cheapest `search.max_stack_parts` promising
//! attempts, the likeliest to clear is proposed; the same set of ideas is
//! never stacked twice on one champion. When the agent has no move left,
//! the bar drops to `search.min_keep_probability`, the one the offline
//! agent stops at, so a run never stops with a stack worth an attempt.
//! Past that, the moves in `probes.rs`: interaction probes, and a stack
//! pruned of a part its ablation found costly.

use crate::agent::search::{self, SearchConfig};
use crate::agent::{AttemptSummary, Origin, PoolEntry};
use crate::referee::posterior::Belief;
use crate::referee::verdict::AttemptVerdict;

/// A move the loop makes instead of asking the agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoopMove {
    Stack(Vec<usize>),
    Retry(usize),
}

/// The run as the search sees it.
pub struct View<'a> {
    pub history: &'a [AttemptSummary],
    pub champion: &'a str,
    /// The champions in order, the current one last.
    pub lineage: &'a [String],
    pub kept_ideas: &'a [String],
    pub cfg: &'a SearchConfig,
    pub threshold: f64,
}

/// The idea of a stack of `ideas`, whatever their order.
pub fn stack_idea(ideas: &[&str]) -> String {
    let mut v: Vec<&str> = ideas.to_vec();
    v.sort_unstable();
    format!("stack:{}", v.join("+"))
}

impl View<'_> {
    /// The attempt that already stands for `idea` against this champion:
    /// measuring the pair again is refused.
    pub fn tried_here(&self, idea: &str) -> Option<usize> {
        self.history
            .iter()
            .find(|a| {
                a.idea == idea
                    && a.champion == self.champion
                    && !matches!(
                        a.verdict,
                        AttemptVerdict::Malformed | AttemptVerdict::AgentError
                    )
            })
            .map(|a| a.number)
    }

    /// The latest decided measurement of each idea that is not a stack,
    /// in attempt order.
    pub(super) fn latest(&self) -> Vec<&AttemptSummary> {
        let mut out: Vec<&AttemptSummary> = Vec::new();
        for a in self.history.iter().filter(|a| a.verdict.is_decided()) {
            if a.origin == Origin::Stack {
                continue;
            }
            out.retain(|b| b.idea != a.idea);
            out.push(a);
        }
        out
    }

    fn belief(&self, idea: &str) -> Belief {
        search::belief(self.history, idea, self.lineage, 1.0, self.cfg)
    }

    /// Promising attempts whose idea the champion lacks, cheapest first.
    pub fn pool(&self) -> Vec<PoolEntry> {
        let mut pool: Vec<PoolEntry> = self
            .latest()
            .into_iter()
            .filter(|a| a.resolved_gain())
            .filter(|a| !self.kept_ideas.contains(&a.idea))
            .filter_map(|a| {
                Some(PoolEntry {
                    attempt: a.number,
                    idea: a.idea.clone(),
                    hypothesis: a.hypothesis.clone(),
                    ratio: a.ratio?,
                    ci: a.interval?,
                    ci_level: a.ci_level,
                    champions_ago: search::distance(self.lineage, &a.champion),
                })
            })
            .collect();
        pool.sort_by(|a, b| a.ratio.total_cmp(&b.ratio));
        pool
    }

    /// Retries the run's budget still allows.
    pub fn retries_left(&self) -> usize {
        let used = self
            .history
            .iter()
            .filter(|a| a.origin == Origin::Retry)
            .count();
        self.cfg.max_retries.saturating_sub(used)
    }

    /// The stack to measure now, if any (see the module's rule).
    pub fn stack(&self) -> Option<Vec<usize>> {
        self.stack_at(self.cfg.stack_min_probability)
    }

    /// The stack to measure once the agent has no move left: the likeliest
    /// union that clears the line with `search.min_keep_probability`, the
    /// bar the offline agent stops at. A run that stopped with such a stack
    /// unmeasured would claim no move was worth an attempt while one was.
    pub fn last_stack(&self) -> Option<Vec<usize>> {
        self.stack_at(self.cfg.min_keep_probability)
    }

    /// Stacks are proposed at all: asked for, and within the run's budget.
    pub(super) fn stacks_allowed(&self) -> bool {
        let stacks = self
            .history
            .iter()
            .filter(|a| a.origin == Origin::Stack)
            .count();
        self.cfg.stack && stacks < self.cfg.max_stacks
    }

    fn stack_at(&self, min_probability: f64) -> Option<Vec<usize>> {
        if !self.stacks_allowed() {
            return None;
        }
        let pool: Vec<PoolEntry> = self
            .pool()
            .into_iter()
            .take(self.cfg.max_stack_parts)
            .collect();
        let beliefs: Vec<Belief> = pool.iter().map(|p| self.belief(&p.idea)).collect();
        let mut best: Option<(f64, Vec<usize>)> = None;
        for mask in 1u32..(1 << pool.len()) {
            if mask.count_ones() < 2 {
                continue;
            }
            let members: Vec<usize> = (0..pool.len()).filter(|i| mask & (1 << i) != 0).collect();
            let ideas: Vec<&str> = members.iter().map(|&i| pool[i].idea.as_str()).collect();
            if self.tried_here(&stack_idea(&ideas)).is_some() {
                continue;
            }
            let parts: Vec<Belief> = members.iter().map(|&i| beliefs[i]).collect();
            let p = Belief::sum(&parts).keep_probability(self.threshold);
            if p >= min_probability && best.as_ref().is_none_or(|(b, _)| p > *b) {
                best = Some((p, members.iter().map(|&i| pool[i].attempt).collect()));
            }
        }
        best.map(|(_, mut parts)| {
            parts.sort_unstable();
            parts
        })
    }

    /// The retry the loop makes for an agent that does not plan its own:
    /// after a keep, a promising or near-zero idea measured against an
    /// earlier champion, within `search.retries_per_keep` per champion and
    /// `search.max_retries` per run, the likeliest to clear the line.
    pub fn retry(&self) -> Option<usize> {
        let here = self
            .history
            .iter()
            .filter(|a| a.origin == Origin::Retry && a.champion == self.champion)
            .count();
        if self.retries_left() == 0 || here >= self.cfg.retries_per_keep {
            return None;
        }
        self.latest()
            .into_iter()
            .filter(|a| a.champion != self.champion && !self.kept_ideas.contains(&a.idea))
            .filter(|a| self.tried_here(&a.idea).is_none())
            .filter(|a| match (a.verdict, a.ratio) {
                _ if a.resolved_gain() => true,
                (AttemptVerdict::Discard | AttemptVerdict::Screened, Some(r)) => {
                    r.ln().abs() <= self.cfg.near_zero
                }
                _ => false,
            })
            .map(|a| {
                (
                    a.number,
                    self.belief(&a.idea).keep_probability(self.threshold),
                )
            })
            .filter(|(_, p)| *p >= self.cfg.min_keep_probability)
            .fold(None, |best: Option<(usize, f64)>, (n, p)| match best {
                Some((_, b)) if b >= p => best,
                _ => Some((n, p)),
            })
            .map(|(n, _)| n)
    }

    /// What the loop does before asking the agent, if anything.
    /// The loop's own move, if any: a stack (held while the agent is still
    /// `exploring` and the pool has room for more parts), else a retry for
    /// an agent that plans none.
    pub fn next_move(&self, agent_plans_retries: bool, exploring: bool) -> Option<LoopMove> {
        if let Some(parts) = self.pruned() {
            return Some(LoopMove::Stack(parts));
        }
        let hold = exploring && self.pool().len() < self.cfg.max_stack_parts;
        if let Some(parts) = self.stack().filter(|_| !hold) {
            return Some(LoopMove::Stack(parts));
        }
        if agent_plans_retries {
            return None;
        }
        self.retry().map(LoopMove::Retry)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::run) fn attempt(
        n: usize,
        idea: &str,
        champion: &str,
        ratio: f64,
        half: f64,
    ) -> AttemptSummary {
        let verdict = if ratio + half < 1.0 {
            AttemptVerdict::Promising
        } else {
            AttemptVerdict::Discard
        };
        let mut a = AttemptSummary::measured(n, idea, champion, verdict);
        a.ratio = Some(ratio);
        a.interval = Some([ratio - half, ratio + half]);
        a
    }

    pub(in crate::run) fn view<'a>(
        history: &'a [AttemptSummary],
        lineage: &'a [String],
        kept: &'a [String],
        cfg: &'a SearchConfig,
    ) -> View<'a> {
        View {
            history,
            champion: lineage.last().unwrap(),
            lineage,
            kept_ideas: kept,
            cfg,
            threshold: 0.03,
        }
    }

    pub(in crate::run) fn c0() -> Vec<String> {
        vec!["c0".into()]
    }

    #[test]
    fn two_promising_wins_that_clear_the_line_together_are_stacked() {
        let cfg = SearchConfig::default();
        let h = vec![
            attempt(1, "a", "c0", 0.981, 0.005),
            attempt(2, "b", "c0", 1.04, 0.01),
            attempt(3, "c", "c0", 0.979, 0.005),
        ];
        let lineage = c0();
        let v = view(&h, &lineage, &[], &cfg);
        assert_eq!(
            v.pool().iter().map(|p| p.attempt).collect::<Vec<_>>(),
            [3, 1]
        );
        assert_eq!(v.next_move(true, false), Some(LoopMove::Stack(vec![1, 3])));
        assert_eq!(
            v.next_move(true, true),
            None,
            "held while the agent explores"
        );
        let full = SearchConfig {
            max_stack_parts: 2,
            ..cfg.clone()
        };
        assert_eq!(
            view(&h, &lineage, &[], &full).next_move(true, true),
            Some(LoopMove::Stack(vec![1, 3])),
            "a full pool is stacked whatever the agent has left"
        );
        // Once measured on this champion, the same set is not stacked again.
        let mut s = attempt(4, &stack_idea(&["c", "a"]), "c0", 0.962, 0.005);
        s.origin = Origin::Stack;
        s.stack_of = vec![1, 3];
        let h2 = [h.clone(), vec![s]].concat();
        assert_eq!(view(&h2, &c0(), &[], &cfg).stack(), None);
    }

    #[test]
    fn promising_wins_too_small_together_are_not_stacked() {
        let cfg = SearchConfig::default();
        let h = vec![
            attempt(1, "a", "c0", 0.992, 0.004),
            attempt(2, "b", "c0", 0.991, 0.004),
        ];
        assert_eq!(view(&h, &c0(), &[], &cfg).stack(), None);
        // A third makes the union likely to clear it.
        let h = [h, vec![attempt(3, "c", "c0", 0.986, 0.004)]].concat();
        assert_eq!(view(&h, &c0(), &[], &cfg).stack(), Some(vec![1, 2, 3]));
        let off = SearchConfig {
            stack: false,
            ..cfg
        };
        assert_eq!(view(&h, &c0(), &[], &off).stack(), None);
    }

    #[test]
    fn an_unlikely_stack_is_the_last_move_before_the_run_stops() {
        let cfg = SearchConfig::default();
        let h = vec![
            attempt(1, "a", "c0", 0.988, 0.006),
            attempt(2, "b", "c0", 0.987, 0.006),
        ];
        let lineage = c0();
        let v = view(&h, &lineage, &[], &cfg);
        assert_eq!(v.stack(), None, "under stack_min_probability");
        assert_eq!(v.last_stack(), Some(vec![1, 2]));
        let tiny = vec![
            attempt(1, "a", "c0", 0.997, 0.002),
            attempt(2, "b", "c0", 0.997, 0.002),
        ];
        assert_eq!(
            view(&tiny, &c0(), &[], &cfg).last_stack(),
            None,
            "a union that cannot clear the line is not measured"
        );
    }

    #[test]
    fn no_idea_champion_pair_is_measured_twice() {
        let cfg = SearchConfig::default();
        let lineage = vec!["c0".to_string(), "c1".to_string()];
        let h = vec![
            attempt(1, "near", "c0", 0.995, 0.01),
            attempt(2, "loss", "c0", 1.10, 0.01),
            attempt(3, "win", "c0", 0.9, 0.01),
        ];
        let kept = vec!["win".to_string()];
        let v = view(&h, &lineage, &kept, &cfg);
        assert_eq!(v.next_move(false, false), Some(LoopMove::Retry(1)));
        assert_eq!(
            v.next_move(true, false),
            None,
            "the agent plans its own retries"
        );
        let mut r = attempt(4, "near", "c1", 0.996, 0.01);
        r.origin = Origin::Retry;
        r.retry_of = Some(1);
        let h2 = [h.clone(), vec![r]].concat();
        let v = view(&h2, &lineage, &kept, &cfg);
        assert_eq!(v.tried_here("near"), Some(4));
        assert_eq!(
            v.retry(),
            None,
            "near was measured against c1; loss is no candidate"
        );
        assert_eq!(v.retries_left(), cfg.max_retries - 1);
    }

    #[test]
    fn the_retry_budget_per_keep_holds() {
        let cfg = SearchConfig {
            retries_per_keep: 1,
            ..SearchConfig::default()
        };
        let lineage = vec!["c0".to_string(), "c1".to_string()];
        let mut r = attempt(3, "x", "c1", 1.0, 0.01);
        r.origin = Origin::Retry;
        let h = vec![
            attempt(1, "near", "c0", 0.995, 0.01),
            attempt(2, "x", "c0", 0.995, 0.01),
            r,
        ];
        assert_eq!(view(&h, &lineage, &[], &cfg).retry(), None);
    }
}
