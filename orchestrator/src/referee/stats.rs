//! Statistics over block ratios, kept apart from measurement and reporting.
//!
//! Block ratios are noisy and few (5 by default), so the summaries are robust
//! ones: the median and a percentile-bootstrap interval of the median. The
//! bootstrap is seeded from the data, so the same samples always give the same
//! interval and a recorded verdict can be recomputed exactly.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Number of bootstrap resamples. Enough that the interval's end points are
/// stable to well under the 3% resolution that matters here.
const RESAMPLES: usize = 10_000;

pub fn median(samples: &[f64]) -> f64 {
    quantile(samples, 0.5)
}

/// Linear-interpolated quantile (type 7, as R and numpy default).
pub fn quantile(samples: &[f64], q: f64) -> f64 {
    assert!(!samples.is_empty(), "quantile of no samples");
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

pub fn mean(samples: &[f64]) -> f64 {
    samples.iter().sum::<f64>() / samples.len() as f64
}

/// Sample standard deviation (n - 1); 0 for fewer than two samples.
pub fn std_dev(samples: &[f64]) -> f64 {
    if samples.len() < 2 {
        return 0.0;
    }
    let m = mean(samples);
    let var = samples.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (samples.len() - 1) as f64;
    var.sqrt()
}

/// Coefficient of variation: the spread of block ratios relative to their
/// mean, the number that says whether a 3% threshold is resolvable at all.
pub fn coefficient_of_variation(samples: &[f64]) -> f64 {
    std_dev(samples) / mean(samples)
}

/// Percentile-bootstrap confidence interval of the median at `level`
/// (for example 0.95). With very few samples this is wide by construction
/// (for five samples it is close to [min, max]), which is the honest answer.
pub fn bootstrap_median_ci(samples: &[f64], level: f64) -> (f64, f64) {
    assert!(!samples.is_empty(), "confidence interval of no samples");
    if samples.len() == 1 {
        return (samples[0], samples[0]);
    }
    let mut rng = StdRng::seed_from_u64(seed_of(samples));
    let mut medians = Vec::with_capacity(RESAMPLES);
    let mut resample = vec![0.0; samples.len()];
    for _ in 0..RESAMPLES {
        for slot in resample.iter_mut() {
            *slot = samples[rng.gen_range(0..samples.len())];
        }
        medians.push(median(&resample));
    }
    let tail = (1.0 - level) / 2.0;
    (quantile(&medians, tail), quantile(&medians, 1.0 - tail))
}

/// The median of `samples` and its 95% interval; None for no samples.
pub fn median_ci95(samples: &[f64]) -> Option<(f64, [f64; 2])> {
    if samples.is_empty() {
        return None;
    }
    let (lo, hi) = bootstrap_median_ci(samples, 0.95);
    Some((median(samples), [lo, hi]))
}

fn seed_of(samples: &[f64]) -> u64 {
    samples.iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
        (h ^ x.to_bits()).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn quantile_ends() {
        let s = [5.0, 1.0, 3.0];
        assert_eq!(quantile(&s, 0.0), 1.0);
        assert_eq!(quantile(&s, 1.0), 5.0);
    }

    #[test]
    fn cv_of_constant_is_zero() {
        assert_eq!(coefficient_of_variation(&[2.0, 2.0, 2.0]), 0.0);
        let cv = coefficient_of_variation(&[0.9, 1.0, 1.1]);
        assert!((cv - 0.1).abs() < 1e-9, "{cv}");
    }

    #[test]
    fn ci_contains_median_and_is_deterministic() {
        let s = [0.95, 0.97, 0.96, 0.99, 0.94];
        let (lo, hi) = bootstrap_median_ci(&s, 0.95);
        assert!(lo <= median(&s) && median(&s) <= hi);
        assert_eq!((lo, hi), bootstrap_median_ci(&s, 0.95));
        assert!(lo >= 0.94 && hi <= 0.99);
    }

    #[test]
    fn ci_narrows_with_more_blocks() {
        let five = [0.9, 0.95, 1.0, 1.05, 1.1];
        let twenty: Vec<f64> = five.iter().cycle().take(20).copied().collect();
        let w5 = bootstrap_median_ci(&five, 0.95);
        let w20 = bootstrap_median_ci(&twenty, 0.95);
        assert!(w20.1 - w20.0 < w5.1 - w5.0, "{w5:?} {w20:?}");
    }

    #[test]
    fn single_sample_ci_is_a_point() {
        assert_eq!(bootstrap_median_ci(&[1.2], 0.95), (1.2, 1.2));
    }
}
