//! The search's settings and its shared reasoning: what every measurement
//! so far says each idea is worth against the current champion
//! ([`crate::referee::posterior`]), and the policy that picks the next move
//! from those beliefs. The offline agent ranks its ideas, retries and
//! parameter steps with it; the loop sizes its stacks and retries with it.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use super::AttemptSummary;
use crate::check::range;
use crate::referee::posterior::{Belief, Observation};
use crate::referee::stats::Normals;

/// How the next move is picked from the beliefs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// The move with the highest probability of clearing the keep line;
    /// ties go to the playbook's order.
    Greedy,
    /// Thompson sampling: one draw from each move's belief, seeded by
    /// `search.seed` and the attempt number; the cheapest draw wins.
    Thompson,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchConfig {
    pub policy: Policy,
    pub seed: u64,
    /// The loop proposes unions of promising attempts (every agent).
    pub stack: bool,
    /// Stacks measured per run at most.
    pub max_stacks: usize,
    /// Parts of one stack at most (the cheapest promising attempts).
    pub max_stack_parts: usize,
    /// A stack is proposed only when it clears the keep line with at least
    /// this probability.
    pub stack_min_probability: f64,
    /// Stacks of two measured on one champion at most: the interaction
    /// probes among material ideas, made when nothing else is left.
    pub pairs: usize,
    /// A stack the keep rule passed is measured without each part before
    /// it is kept; one with a part that costs more than it gives is not.
    pub ablate_stacks: bool,
    /// Retries measured per run at most, and after each keep at most.
    pub max_retries: usize,
    pub retries_per_keep: usize,
    /// A discard within this of a ratio of 1 (in ln) is near zero: worth
    /// a retry after a keep.
    pub near_zero: f64,
    /// The spread (ln ratio) of an untried idea's worth.
    pub prior_sd: f64,
    /// How much an idea's worth may move with each keep since it was measured.
    pub interaction_sd: f64,
    /// The search stops when no move clears the keep line with at least
    /// this probability.
    pub min_keep_probability: f64,
    /// Candidates of the agent's gathered into one generation and screened
    /// in one measurement beside the champion; those the screen finds worth
    /// it are then judged one by one, best first, by the keep rule. 1: each
    /// candidate judged alone, as it comes.
    pub generation: usize,
}

/// The most candidates one screen measures: each is an arm of every sample.
pub const MAX_GENERATION: usize = 12;

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            policy: Policy::Greedy,
            seed: 1,
            stack: true,
            max_stacks: 8,
            max_stack_parts: 5,
            stack_min_probability: 0.5,
            pairs: 3,
            ablate_stacks: true,
            max_retries: 8,
            retries_per_keep: 3,
            near_zero: 0.02,
            prior_sd: 0.05,
            interaction_sd: 0.02,
            min_keep_probability: 0.05,
            generation: 1,
        }
    }
}

impl SearchConfig {
    pub fn validate(&self) -> Result<()> {
        let probability = |field: &str, v: f64| range(&format!("search.{field}"), v, 0.0, 1.0);
        probability("stack_min_probability", self.stack_min_probability)?;
        probability("min_keep_probability", self.min_keep_probability)?;
        for (field, v) in [
            ("prior_sd", self.prior_sd),
            ("interaction_sd", self.interaction_sd),
            ("near_zero", self.near_zero),
        ] {
            if !(v > 0.0 && v < 1.0) {
                bail!(
                    "search.{field} must be above 0 and below 1 (a spread of ln ratios), got {v}"
                );
            }
        }
        if !(1..=MAX_GENERATION).contains(&self.generation) {
            bail!(
                "search.generation must be 1 to {MAX_GENERATION} candidates, got {}",
                self.generation
            );
        }
        if self.max_stack_parts < 2 {
            bail!(
                "search.max_stack_parts must be at least 2, got {}",
                self.max_stack_parts
            );
        }
        Ok(())
    }
}

/// Keeps between `champion` and the last champion of `lineage`; an unknown
/// champion counts as the run's start.
pub fn distance(lineage: &[String], champion: &str) -> usize {
    let last = lineage.len().saturating_sub(1);
    lineage
        .iter()
        .position(|c| c == champion)
        .map_or(last, |i| last - i)
}

/// The measurements of `idea` in `history`, each with its distance from the
/// current champion. Stacks are measurements of their union, not of a part.
pub fn observations(
    history: &[AttemptSummary],
    idea: &str,
    lineage: &[String],
) -> Vec<Observation> {
    history
        .iter()
        .filter(|a| a.idea == idea)
        .filter_map(|a| {
            let (ratio, ci) = (a.ratio?, a.interval?);
            a.verdict
                .is_decided()
                .then(|| Observation::of(ratio, ci, a.ci_level, distance(lineage, &a.champion)))
        })
        .collect()
}

/// What the measurements say `idea` is worth now, from a prior centred on
/// `expected_ratio`.
pub fn belief(
    history: &[AttemptSummary],
    idea: &str,
    lineage: &[String],
    expected_ratio: f64,
    cfg: &SearchConfig,
) -> Belief {
    Belief::prior(expected_ratio, cfg.prior_sd)
        .update(&observations(history, idea, lineage), cfg.interaction_sd)
}

/// The index of the move to make among `beliefs` (in the caller's order of
/// preference), or None when none clears the keep line with at least
/// `min_keep_probability`. A move never measured (`fresh`) stays eligible
/// whatever its prior says: a curated idea is measured once before its
/// belief can rule it out. `round` varies Thompson's draws between attempts
/// while keeping them reproducible for a seed.
pub fn choose(
    beliefs: &[Belief],
    fresh: &[bool],
    threshold: f64,
    cfg: &SearchConfig,
    round: u64,
) -> Option<usize> {
    let eligible: Vec<usize> = (0..beliefs.len())
        .filter(|&i| {
            fresh.get(i).copied().unwrap_or(false)
                || beliefs[i].keep_probability(threshold) >= cfg.min_keep_probability
        })
        .collect();
    match cfg.policy {
        Policy::Greedy => eligible.into_iter().fold(None, |best: Option<usize>, i| {
            let p = beliefs[i].keep_probability(threshold);
            match best {
                Some(b) if beliefs[b].keep_probability(threshold) >= p => Some(b),
                _ => Some(i),
            }
        }),
        Policy::Thompson => {
            let mut g = Normals(cfg.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ round);
            eligible
                .into_iter()
                .map(|i| (i, beliefs[i].mean + beliefs[i].sd * g.next()))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(i, _)| i)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::referee::verdict::AttemptVerdict;

    fn beliefs() -> Vec<Belief> {
        vec![
            Belief::prior(1.0, 0.05),
            Belief::prior(0.95, 0.05),
            Belief::prior(0.97, 0.01),
            Belief::prior(1.2, 0.01),
        ]
    }

    #[test]
    fn greedy_takes_the_likeliest_keep_and_stops_when_none_is_likely() {
        let cfg = SearchConfig::default();
        assert_eq!(choose(&beliefs(), &[], 0.03, &cfg, 0), Some(1));
        let hopeless = [Belief::prior(1.0, 0.005), Belief::prior(1.2, 0.05)];
        assert_eq!(choose(&hopeless, &[], 0.03, &cfg, 0), None);
        // An idea never measured is tried whatever its prior.
        assert_eq!(choose(&hopeless, &[false, true], 0.03, &cfg, 0), Some(1));
        // Ties go to the first.
        let same = [Belief::prior(1.0, 0.05), Belief::prior(1.0, 0.05)];
        assert_eq!(choose(&same, &[], 0.03, &cfg, 0), Some(0));
    }

    #[test]
    fn the_policy_is_deterministic_for_a_seed() {
        let cfg = SearchConfig {
            policy: Policy::Thompson,
            seed: 7,
            ..SearchConfig::default()
        };
        let picks = |cfg: &SearchConfig| -> Vec<Option<usize>> {
            (0..40)
                .map(|r| choose(&beliefs(), &[], 0.03, cfg, r))
                .collect()
        };
        assert_eq!(picks(&cfg), picks(&cfg));
        let other = SearchConfig {
            seed: 8,
            ..cfg.clone()
        };
        assert_ne!(picks(&cfg), picks(&other), "the seed changes the draws");
        // Thompson explores: more than one move is drawn over the rounds,
        // and never the hopeless one.
        let drawn: std::collections::BTreeSet<_> = picks(&cfg).into_iter().flatten().collect();
        assert!(drawn.len() > 1, "{drawn:?}");
        assert!(!drawn.contains(&3));
    }

    #[test]
    fn beliefs_come_from_the_ideas_own_measurements() {
        let lineage = vec!["c0".to_string(), "c1".to_string()];
        let mut a = AttemptSummary::measured(1, "x", "c0", AttemptVerdict::Promising);
        a.ratio = Some(0.98);
        a.interval = Some([0.975, 0.985]);
        let mut other = AttemptSummary::measured(2, "y", "c1", AttemptVerdict::Discard);
        other.ratio = Some(1.3);
        other.interval = Some([1.2, 1.4]);
        let cfg = SearchConfig::default();
        let b = belief(&[a, other], "x", &lineage, 1.0, &cfg);
        assert!((b.ratio() - 0.98).abs() < 0.005, "{b:?}");
        assert_eq!(distance(&lineage, "c0"), 1);
        assert_eq!(distance(&lineage, "c1"), 0);
    }

    #[test]
    fn bad_settings_are_named() {
        let cfg = SearchConfig {
            prior_sd: 0.0,
            ..SearchConfig::default()
        };
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("search.prior_sd"));
    }
}
