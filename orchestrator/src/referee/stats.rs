//! Statistics over sample ratios, kept apart from measurement and reporting.
//!
//! Ratios are few (a dozen windows) and their distribution is not known, so
//! the summary is the median with an exact, distribution-free interval: the
//! order statistics [x(k), x(n+1-k)] cover the true median with probability
//! 1 - 2 P(Bin(n, 1/2) < k), whatever the distribution. That coverage is
//! stated with every interval; fewer than [`MIN_SAMPLES`] samples give none,
//! since with 5 the widest interval, [min, max], covers only 93.75%.

/// The fewest samples that give a 95% interval of the median (6 give
/// [min, max] at 96.9%).
pub const MIN_SAMPLES: usize = 6;

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

/// The probabilities P(Bin(n, p) = i) for i = 0..=n, from their logarithms
/// so that no term underflows on its way to the ones that matter (0.5^n is
/// 0 in f64 beyond n = 1074, which would make every interval cover).
fn binomial_pmfs(n: usize, p: f64) -> impl Iterator<Item = f64> {
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    (0..=n).scan(n as f64 * lq, move |log_pmf, i| {
        if i > 0 {
            *log_pmf += ((n + 1 - i) as f64 / i as f64).ln() + lp - lq;
        }
        Some(log_pmf.exp())
    })
}

/// P(Bin(n, 1/2) <= k).
fn binomial_half_cdf(n: usize, k: usize) -> f64 {
    binomial_pmfs(n, 0.5).take(k.min(n) + 1).sum()
}

/// An interval of the median with its exact coverage.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MedianInterval {
    pub lo: f64,
    pub hi: f64,
    /// The probability that the interval covers the true median (at least
    /// the level asked for).
    pub coverage: f64,
}

/// The narrowest order-statistic interval of the median whose coverage is at
/// least `level`; None for fewer than [`MIN_SAMPLES`] samples, or when even
/// [min, max] does not reach `level`.
pub fn median_interval(samples: &[f64], level: f64) -> Option<MedianInterval> {
    let n = samples.len();
    if n < MIN_SAMPLES {
        return None;
    }
    // The largest k (1-based) with coverage 1 - 2 P(Bin <= k - 1) >= level.
    let k = interval_rank(n, level)?;
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    Some(MedianInterval {
        lo: sorted[k - 1],
        hi: sorted[n - k],
        coverage: 1.0 - 2.0 * binomial_half_cdf(n, k - 1),
    })
}

/// `interval` of a ratio around `median`, widened for a spread between
/// measurements: on the log scale each half-width adds z * `drift` in
/// quadrature, z the normal quantile of `level`. The windows of one
/// measurement share its minute; the interval then covers the ratio a
/// measurement at another time would find, not only this minute's.
pub fn with_drift(median: f64, interval: [f64; 2], drift: f64, level: f64) -> [f64; 2] {
    let z = normal_quantile(0.5 + level / 2.0);
    let widen = |half: f64| (half * half + (z * drift).powi(2)).sqrt();
    let (below, above) = ((median / interval[0]).ln(), (interval[1] / median).ln());
    [median / widen(below).exp(), median * widen(above).exp()]
}

/// The median of `samples` and its 95% interval; None for too few samples.
pub fn median_ci95(samples: &[f64]) -> Option<(f64, [f64; 2])> {
    median_and_interval(samples, 0.95)
}

/// The median of `samples` and its interval at `level`.
pub fn median_and_interval(samples: &[f64], level: f64) -> Option<(f64, [f64; 2])> {
    let i = median_interval(samples, level)?;
    Some((median(samples), [i.lo, i.hi]))
}

/// The standard normal quantile (Acklam's rational approximation, relative
/// error below 1.2e-9): enough for sizing samples.
pub fn normal_quantile(p: f64) -> f64 {
    assert!(p > 0.0 && p < 1.0, "normal quantile of {p}");
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// An upper confidence bound on the standard deviation of a normal sample,
/// from the chi-square distribution of (n - 1) s^2 / sigma^2 with the
/// Wilson-Hilferty approximation of its quantile.
pub fn std_dev_upper_bound(samples: &[f64], confidence: f64) -> f64 {
    let n = samples.len();
    let s = std_dev(samples);
    if n < 2 {
        return f64::INFINITY;
    }
    let df = (n - 1) as f64;
    let z = normal_quantile(1.0 - confidence);
    let h = 2.0 / (9.0 * df);
    let chi2_low = df * (1.0 - h + z * h.sqrt()).powi(3);
    s * (df / chi2_low.max(1e-9)).sqrt()
}

/// The standard normal distribution function (Abramowitz and Stegun
/// 7.1.26, absolute error below 1.5e-7).
pub fn normal_cdf(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-z * z).exp();
    if x >= 0.0 {
        1.0 - erfc / 2.0
    } else {
        erfc / 2.0
    }
}

/// The 1-based rank k of the order-statistic interval [x(k), x(n+1-k)]
/// that [`median_interval`] takes for `n` samples at `level`.
fn interval_rank(n: usize, level: f64) -> Option<usize> {
    if n < MIN_SAMPLES {
        return None;
    }
    // Coverage 1 - 2 P(Bin <= k - 1) >= level: the count of ranks whose
    // lower tail stays within (1 - level) / 2, in one pass.
    let tail = (1.0 - level) / 2.0;
    let mut cdf = 0.0;
    let k = binomial_pmfs(n, 0.5)
        .take(n / 2)
        .take_while(|pmf| {
            cdf += pmf;
            cdf <= tail
        })
        .count();
    (k >= 1).then_some(k)
}

/// The fewest samples that give an interval of the median at `level`.
pub fn min_samples(level: f64) -> usize {
    (MIN_SAMPLES..)
        .find(|&n| interval_rank(n, level).is_some())
        .expect("some n reaches any level below 1")
}

/// P(Bin(n, p) >= m).
fn binomial_tail(n: usize, p: f64, m: usize) -> f64 {
    binomial_pmfs(n, p).skip(m).sum()
}

/// Samples needed so that, with per-sample spread `sd` (normal, of log
/// ratios), a true gain of `effect` gives an interval of the median at
/// `level` wholly below 1 with probability at least `power`. Exact for the
/// order-statistic interval: its upper end x(n+1-k) is below 1 exactly when
/// at least n+1-k samples are, and each is with probability
/// p = Phi(effect / sd).
pub fn samples_needed(sd: f64, effect: f64, level: f64, power: f64) -> usize {
    let p = normal_cdf(effect / sd.max(1e-12)).min(1.0 - 1e-12);
    (MIN_SAMPLES..=10_000)
        .find(|&n| interval_rank(n, level).is_some_and(|k| binomial_tail(n, p, n + 1 - k) >= power))
        .unwrap_or(10_000)
}

/// A deterministic generator of normal variates (Box-Muller over an LCG):
/// the simulations below and the search's Thompson draws give the same
/// answer every run for a seed.
pub struct Normals(pub u64);

impl Normals {
    fn uniform(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    pub fn next(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
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
    fn order_statistic_coverage_is_exact() {
        // n = 6: [min, max] covers 1 - 2/64.
        let i = median_interval(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 0.95).unwrap();
        assert_eq!((i.lo, i.hi), (1.0, 6.0));
        assert!((i.coverage - (1.0 - 2.0 / 64.0)).abs() < 1e-12);
        // n = 12: [x(3), x(10)] covers 96.1%.
        let s: Vec<f64> = (1..=12).map(f64::from).collect();
        let i = median_interval(&s, 0.95).unwrap();
        assert_eq!((i.lo, i.hi), (3.0, 10.0));
        assert!((i.coverage - 0.9614).abs() < 1e-3, "{}", i.coverage);
    }

    #[test]
    fn fewer_than_six_samples_have_no_interval() {
        assert!(median_interval(&[1.0; 5], 0.95).is_none());
        assert!(median_ci95(&[0.9, 1.0, 1.1]).is_none());
    }

    #[test]
    fn simulated_coverage_reaches_the_stated_level() {
        // 4000 simulated samples of 12 skewed ratios: the interval covers
        // the true median at least as often as it says.
        let mut g = Normals(7);
        let mut covered = 0;
        let trials = 4000;
        for _ in 0..trials {
            let s: Vec<f64> = (0..12).map(|_| (0.02 * g.next()).exp()).collect();
            let i = median_interval(&s, 0.95).unwrap();
            if i.lo <= 1.0 && 1.0 <= i.hi {
                covered += 1;
            }
        }
        let rate = covered as f64 / trials as f64;
        assert!(rate > 0.95, "covered {rate}");
        assert!(rate < 0.975, "covered {rate}: the exact level is 0.961");
    }

    #[test]
    fn normal_cdf_and_quantile_agree() {
        for p in [0.01, 0.2, 0.5, 0.8, 0.975] {
            assert!((normal_cdf(normal_quantile(p)) - p).abs() < 1e-6, "{p}");
        }
    }

    #[test]
    fn a_long_measurement_gets_an_interval_of_the_coverage_asked() {
        // 2000 samples: 0.5^2000 underflows in f64, and an interval built on
        // it covered nothing while reporting a coverage of 1.
        let samples: Vec<f64> = (0..2000).map(|i| i as f64).collect();
        let i = median_interval(&samples, 0.95).unwrap();
        assert!(i.coverage >= 0.95 && i.coverage < 0.96, "{i:?}");
        // The normal approximation: n/2 - 1.96 sqrt(n)/2 = 956.2.
        assert!((955.0..=957.0).contains(&i.lo), "{i:?}");
        assert_eq!(i.hi, 1999.0 - i.lo);
    }

    #[test]
    fn normal_quantiles() {
        assert!((normal_quantile(0.975) - 1.959964).abs() < 1e-5);
        assert!((normal_quantile(0.8) - 0.841621).abs() < 1e-5);
        assert!((normal_quantile(0.01) + 2.326348).abs() < 1e-5);
    }

    #[test]
    fn the_spread_bound_covers_the_true_spread() {
        let mut g = Normals(11);
        let mut held = 0;
        for _ in 0..2000 {
            let s: Vec<f64> = (0..10).map(|_| 0.02 * g.next()).collect();
            if std_dev_upper_bound(&s, 0.95) >= 0.02 {
                held += 1;
            }
        }
        let rate = held as f64 / 2000.0;
        assert!((0.93..0.97).contains(&rate), "{rate}");
    }

    #[test]
    fn sizing_gives_the_power_it_promises() {
        // With sd 2% and a true 3% gain, the sized sample's interval at 97.5%
        // clears 1 in at least 80% of simulated measurements.
        let (sd, effect) = (0.02, 0.03);
        let n = samples_needed(sd, effect, 0.975, 0.8);
        assert!((6..=40).contains(&n), "{n}");
        let mut g = Normals(3);
        let mut cleared = 0;
        for _ in 0..2000 {
            let s: Vec<f64> = (0..n).map(|_| 1.0 - effect + sd * g.next()).collect();
            if median_interval(&s, 0.975).unwrap().hi < 1.0 {
                cleared += 1;
            }
        }
        let power = cleared as f64 / 2000.0;
        assert!(power >= 0.77, "{cleared} of 2000 with n = {n}");
        // And not oversized: one sample fewer falls short of the promise
        // (or is the minimum).
        assert!(
            n == MIN_SAMPLES || {
                let k = interval_rank(n - 1, 0.975).unwrap();
                binomial_tail(n - 1, normal_cdf(effect / sd), n - k) < 0.8
            }
        );
        assert_eq!(samples_needed(0.001, 0.03, 0.95, 0.8), MIN_SAMPLES);
        assert_eq!(min_samples(0.95), 6);
        assert_eq!(min_samples(0.975), 7);
    }

    #[test]
    fn drift_widens_an_interval_in_quadrature_on_the_log_scale() {
        let (m, ci) = (0.8, [0.78, 0.83]);
        let same = with_drift(m, ci, 0.0, 0.95);
        assert!((same[0] - ci[0]).abs() < 1e-12 && (same[1] - ci[1]).abs() < 1e-12);
        // A point interval becomes +-1.96 drift (in logs).
        let [lo, hi] = with_drift(m, [m, m], 0.02, 0.95);
        assert!(((m / lo).ln() - 1.96 * 0.02).abs() < 1e-4, "{lo}");
        assert!(((hi / m).ln() - 1.96 * 0.02).abs() < 1e-4, "{hi}");
        // Each side adds alike; the wider side stays wider.
        let [lo, hi] = with_drift(m, ci, 0.02, 0.95);
        let (below, above) = ((m / lo).ln(), (hi / m).ln());
        let z = 1.959_964 * 0.02;
        assert!((below - ((m / 0.78f64).ln().powi(2) + z * z).sqrt()).abs() < 1e-6);
        assert!((above - ((0.83f64 / m).ln().powi(2) + z * z).sqrt()).abs() < 1e-6);
    }
}
