//! What the measurements so far say an idea is worth against the current
//! champion: a normal belief over its log cost ratio, updated from every
//! side-by-side measurement of it (normal-normal conjugacy).
//!
//! A measurement against an older champion counts for less: each keep
//! since then adds `interaction_sd`² to its variance, because a change's
//! worth moves with what it is combined with (the original study: a change
//! that lost against one champion can win against a later one). The search
//! ranks moves, stacks and retries by the probability this belief gives of
//! clearing the keep line, and stops when no move is likely to.

use crate::referee::stats::{normal_cdf, normal_quantile};

/// A normal belief over ln(cost ratio); below 0 is cheaper.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Belief {
    pub mean: f64,
    pub sd: f64,
}

/// One measured ratio of an idea against a champion.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Observation {
    pub log_ratio: f64,
    /// The standard error of `log_ratio`, from the measurement's interval.
    pub se: f64,
    /// Keeps between the champion it was measured against and the current one.
    pub distance: usize,
}

/// The smallest standard error a measurement is credited with: the
/// interval of a median of a few samples understates the machine's
/// between-run drift, which the A/A check measured at about this size.
const MIN_SE: f64 = 0.004;

impl Observation {
    /// From a median ratio and its interval of coverage `level` (two-sided).
    pub fn of(median: f64, ci: [f64; 2], level: f64, distance: usize) -> Self {
        let z = normal_quantile(0.5 + level / 2.0);
        let se = (ci[1].max(1e-9).ln() - ci[0].max(1e-9).ln()) / (2.0 * z);
        Self {
            log_ratio: median.max(1e-9).ln(),
            se: se.max(MIN_SE),
            distance,
        }
    }
}

impl Belief {
    /// A prior centred on an expected ratio.
    pub fn prior(expected_ratio: f64, sd: f64) -> Self {
        Self {
            mean: expected_ratio.max(1e-9).ln(),
            sd,
        }
    }

    /// The belief after `observations`.
    pub fn update(self, observations: &[Observation], interaction_sd: f64) -> Self {
        let mut precision = 1.0 / (self.sd * self.sd);
        let mut weighted = self.mean * precision;
        for o in observations {
            let var = o.se * o.se + o.distance as f64 * interaction_sd * interaction_sd;
            precision += 1.0 / var;
            weighted += o.log_ratio / var;
        }
        Self {
            mean: weighted / precision,
            sd: precision.sqrt().recip(),
        }
    }

    /// The belief over several independent changes applied together: their
    /// log ratios add.
    pub fn sum(parts: &[Belief]) -> Self {
        Self {
            mean: parts.iter().map(|b| b.mean).sum(),
            sd: parts.iter().map(|b| b.sd * b.sd).sum::<f64>().sqrt(),
        }
    }

    /// The expected cost ratio (the median of the belief).
    pub fn ratio(&self) -> f64 {
        self.mean.exp()
    }

    /// The probability that the change costs at most `1 - threshold` of
    /// the champion: that the keep rule's line is cleared.
    pub fn keep_probability(&self, threshold: f64) -> f64 {
        normal_cdf(((1.0 - threshold).ln() - self.mean) / self.sd.max(1e-12))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prior() -> Belief {
        Belief::prior(1.0, 0.05)
    }

    #[test]
    fn an_untried_idea_is_worth_trying_and_a_measured_null_is_not() {
        let p = prior();
        assert!(p.keep_probability(0.03) > 0.2);
        let null = Observation::of(1.0, [0.99, 1.01], 0.975, 0);
        let b = p.update(&[null], 0.02);
        assert!(b.keep_probability(0.03) < 0.01, "{b:?}");
    }

    #[test]
    fn a_measurement_against_an_older_champion_counts_for_less() {
        let o = Observation::of(0.985, [0.978, 0.992], 0.975, 0);
        let here = prior().update(&[o], 0.02);
        let later = prior().update(&[Observation { distance: 1, ..o }], 0.02);
        assert!(later.sd > here.sd);
        // A promising idea is worth retrying on a new champion; a clear
        // loss is not.
        assert!(later.keep_probability(0.03) > 0.1, "{later:?}");
        let loss = Observation::of(1.10, [1.08, 1.12], 0.975, 1);
        assert!(prior().update(&[loss], 0.02).keep_probability(0.03) < 0.01);
    }

    #[test]
    fn two_promising_savings_stack_past_the_line() {
        let a = prior().update(&[Observation::of(0.98, [0.975, 0.985], 0.975, 0)], 0.02);
        let b = prior().update(&[Observation::of(0.979, [0.974, 0.984], 0.975, 0)], 0.02);
        assert!(a.keep_probability(0.03) < 0.1);
        let both = Belief::sum(&[a, b]);
        assert!((both.ratio() - 0.98 * 0.979).abs() < 0.002, "{both:?}");
        assert!(both.keep_probability(0.03) > 0.5, "{both:?}");
    }

    #[test]
    fn the_interval_sets_the_standard_error() {
        let o = Observation::of(0.9, [0.85, 0.95], 0.95, 0);
        let expect = (0.95f64.ln() - 0.85f64.ln()) / (2.0 * 1.959964);
        assert!((o.se - expect).abs() < 1e-4, "{}", o.se);
        assert!(Observation::of(1.0, [1.0, 1.0], 0.95, 0).se >= MIN_SE);
    }
}
