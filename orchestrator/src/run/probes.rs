//! The loop's moves that beliefs cannot make: measurements the run must
//! take because adding the parts' worths foresees nothing. Before a run
//! stops, pairs of ideas that measured near 1 (two changes may pay only
//! together); and after a stack the keep rule passed but whose ablation
//! found a part costing more than it gives, the same stack without it.

use super::own_moves::{stack_idea, View};
use crate::agent::{AttemptSummary, Origin};

impl View<'_> {
    /// Ideas the champion lacks that may still pay beside another, cheapest
    /// first, at most `search.max_stack_parts`: the latest measurement of
    /// each, unless it resolved a loss larger than `search.near_zero`. An
    /// idea worth nothing alone is material too: two changes may each undo
    /// half of one cost, and only together remove it.
    pub fn material(&self) -> Vec<&AttemptSummary> {
        let mut out: Vec<&AttemptSummary> = self
            .latest()
            .into_iter()
            .filter(|a| !self.kept_ideas.contains(&a.idea))
            .filter(|a| {
                a.ratio.is_some()
                    && a.interval
                        .is_some_and(|[lo, _]| lo.ln() <= self.cfg.near_zero)
            })
            .collect();
        out.sort_by(|a, b| a.ratio.unwrap().total_cmp(&b.ratio.unwrap()));
        out.truncate(self.cfg.max_stack_parts);
        out
    }

    /// The interaction probe, made once the agent and the stacks have
    /// nothing left: the union of two material ideas, the pair whose parts
    /// measured cheapest first, never one already measured on this
    /// champion, at most `search.pairs` stacks of two per champion. Beliefs
    /// add the parts' worths, so no stack rule can foresee a pair that pays
    /// only together; only measuring it can.
    pub fn pair(&self) -> Option<Vec<usize>> {
        let here = self
            .history
            .iter()
            .filter(|a| {
                a.origin == Origin::Stack && a.champion == self.champion && a.stack_of.len() == 2
            })
            .count();
        if !self.stacks_allowed() || here >= self.cfg.pairs {
            return None;
        }
        let m = self.material();
        let mut best: Option<(f64, [usize; 2])> = None;
        for (i, a) in m.iter().enumerate() {
            for b in &m[i + 1..] {
                if self.tried_here(&stack_idea(&[&a.idea, &b.idea])).is_some() {
                    continue;
                }
                let cost = a.ratio.unwrap().ln() + b.ratio.unwrap().ln();
                if best.is_none_or(|(c, _)| cost < c) {
                    let mut parts = [a.number, b.number];
                    parts.sort_unstable();
                    best = Some((cost, parts));
                }
            }
        }
        best.map(|(_, parts)| parts.to_vec())
    }

    /// The move once the agent has nothing left: the last stack worth
    /// measuring, else an interaction probe. The run stops when neither is.
    pub fn last_move(&self) -> Option<Vec<usize>> {
        self.last_stack().or_else(|| self.pair())
    }

    /// A stack the keep rule passed but whose ablation found parts that
    /// cost more than they give: the same stack without them, once, while
    /// two parts are left and the run's stack budget allows.
    pub fn pruned(&self) -> Option<Vec<usize>> {
        let stack = self.history.iter().rev().find(|a| {
            a.origin == Origin::Stack && a.champion == self.champion && !a.costly_parts.is_empty()
        })?;
        let rest: Vec<usize> = stack
            .stack_of
            .iter()
            .copied()
            .filter(|n| !stack.costly_parts.contains(n))
            .collect();
        let ideas: Vec<&str> = rest
            .iter()
            .filter_map(|n| self.history.iter().find(|a| a.number == *n))
            .map(|a| a.idea.as_str())
            .collect();
        let fresh = ideas.len() == rest.len() && self.tried_here(&stack_idea(&ideas)).is_none();
        (rest.len() >= 2 && fresh && self.stacks_allowed()).then_some(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::search::SearchConfig;
    use crate::run::own_moves::tests::{attempt, c0, view};
    use crate::run::own_moves::LoopMove;

    #[test]
    fn ideas_worth_nothing_alone_are_probed_in_pairs_before_the_run_stops() {
        let cfg = SearchConfig {
            pairs: 2,
            ..SearchConfig::default()
        };
        let h = vec![
            attempt(1, "a", "c0", 1.001, 0.01),
            attempt(2, "b", "c0", 0.999, 0.01),
            attempt(3, "loss", "c0", 1.10, 0.01),
            attempt(4, "c", "c0", 1.012, 0.005),
        ];
        let lineage = c0();
        let v = view(&h, &lineage, &[], &cfg);
        assert_eq!(v.last_stack(), None, "beliefs foresee nothing together");
        let ideas: Vec<&str> = v.material().iter().map(|a| a.idea.as_str()).collect();
        assert_eq!(
            ideas,
            ["b", "a", "c"],
            "a resolved loss within near zero too"
        );
        assert_eq!(v.last_move(), Some(vec![1, 2]), "the cheapest pair first");
        let probe = |n, parts: [usize; 2], ideas: [&str; 2], champion: &str| {
            let mut s = attempt(n, &stack_idea(&ideas), champion, 1.0, 0.01);
            s.origin = Origin::Stack;
            s.stack_of = parts.to_vec();
            s
        };
        let h2 = [h.clone(), vec![probe(5, [1, 2], ["a", "b"], "c0")]].concat();
        assert_eq!(view(&h2, &lineage, &[], &cfg).last_move(), Some(vec![2, 4]));
        let h3 = [h2.clone(), vec![probe(6, [2, 4], ["b", "c"], "c0")]].concat();
        assert_eq!(
            view(&h3, &lineage, &[], &cfg).last_move(),
            None,
            "search.pairs per champion"
        );
        // A new champion is probed again, without its kept idea.
        let lineage = vec!["c0".to_string(), "c1".to_string()];
        let kept = vec!["b".to_string()];
        assert_eq!(
            view(&h3, &lineage, &kept, &cfg).last_move(),
            Some(vec![1, 4])
        );
        let off = SearchConfig {
            max_stacks: 2,
            ..cfg
        };
        assert_eq!(view(&h3, &lineage, &kept, &off).last_move(), None);
    }

    #[test]
    fn a_stack_with_a_part_that_costs_more_than_it_gives_is_measured_again_without_it() {
        let cfg = SearchConfig::default();
        let mut h = vec![
            attempt(1, "a", "c0", 0.97, 0.01),
            attempt(2, "b", "c0", 0.98, 0.01),
            attempt(3, "c", "c0", 0.98, 0.01),
        ];
        let mut s = attempt(4, &stack_idea(&["a", "b", "c"]), "c0", 0.93, 0.01);
        s.origin = Origin::Stack;
        s.stack_of = vec![1, 2, 3];
        h.push(s.clone());
        let lineage = c0();
        assert_eq!(
            view(&h, &lineage, &[], &cfg).pruned(),
            None,
            "no costly part"
        );
        s.costly_parts = vec![2];
        h[3] = s;
        let v = view(&h, &lineage, &[], &cfg);
        assert_eq!(v.pruned(), Some(vec![1, 3]));
        assert_eq!(v.next_move(true, true), Some(LoopMove::Stack(vec![1, 3])));
        // Once measured, not again; on a later champion, never.
        let mut again = attempt(5, &stack_idea(&["a", "c"]), "c0", 0.95, 0.01);
        again.origin = Origin::Stack;
        again.stack_of = vec![1, 3];
        let h2 = [h.clone(), vec![again]].concat();
        assert_eq!(view(&h2, &lineage, &[], &cfg).pruned(), None);
        let later = vec!["c0".to_string(), "c1".to_string()];
        assert_eq!(view(&h, &later, &[], &cfg).pruned(), None);
        // One part left is no stack.
        h[3].costly_parts = vec![2, 3];
        assert_eq!(view(&h, &lineage, &[], &cfg).pruned(), None);
    }
}
