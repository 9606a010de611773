//! The keep rule: a candidate replaces the champion only if it is at least
//! `threshold` cheaper by the median of its block ratios AND the whole 95%
//! interval of that ratio lies below 1. When the interval straddles the
//! threshold line the evidence is extended once with more blocks; a
//! suspiciously large gain is extended once too before it can be kept.

use crate::referee::compare::Comparison;
use crate::referee::verdict::{AttemptVerdict, Verdict};

/// What the keep rule says after one look at the evidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Decided(AttemptVerdict),
    /// Measure more, then decide again with `extended = true`.
    Extend,
}

/// The keep condition is the comparison's `better` verdict: one rule, in
/// [`crate::referee::verdict::judge`].
pub fn decide(c: &Comparison, threshold: f64, suspicious_gain: f64, extended: bool) -> Step {
    let (Some(median), Some([lo, hi])) = (c.ratio_median, c.ratio_ci95) else {
        return Step::Decided(AttemptVerdict::Invalid);
    };
    let keep = match c.verdict {
        Verdict::Invalid => return Step::Decided(AttemptVerdict::Invalid),
        v => v == Verdict::Better,
    };
    let line = 1.0 - threshold;
    if keep && !extended && median < 1.0 / suspicious_gain {
        return Step::Extend;
    }
    if keep {
        return Step::Decided(AttemptVerdict::Keep);
    }
    if !extended && lo < line && line < hi {
        return Step::Extend;
    }
    Step::Decided(AttemptVerdict::Discard)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmp(median: f64, lo: f64, hi: f64) -> Comparison {
        Comparison::judged(median, lo, hi, 0.03)
    }

    #[test]
    fn clear_win_is_kept() {
        assert_eq!(
            decide(&cmp(0.90, 0.88, 0.92), 0.03, 2.0, false),
            Step::Decided(AttemptVerdict::Keep)
        );
    }

    #[test]
    fn straddling_interval_is_extended_once_then_discarded() {
        let c = cmp(0.975, 0.95, 1.01);
        assert_eq!(decide(&c, 0.03, 2.0, false), Step::Extend);
        assert_eq!(
            decide(&c, 0.03, 2.0, true),
            Step::Decided(AttemptVerdict::Discard)
        );
    }

    #[test]
    fn clear_loss_or_no_effect_is_discarded_at_once() {
        assert_eq!(
            decide(&cmp(1.10, 1.05, 1.15), 0.03, 2.0, false),
            Step::Decided(AttemptVerdict::Discard)
        );
        assert_eq!(
            decide(&cmp(0.99, 0.98, 1.00), 0.03, 2.0, false),
            Step::Decided(AttemptVerdict::Discard)
        );
    }

    #[test]
    fn suspiciously_large_gain_is_revalidated_before_keeping() {
        let c = cmp(0.30, 0.28, 0.33);
        assert_eq!(decide(&c, 0.03, 2.0, false), Step::Extend);
        assert_eq!(
            decide(&c, 0.03, 2.0, true),
            Step::Decided(AttemptVerdict::Keep)
        );
    }

    #[test]
    fn invalid_comparison_is_invalid() {
        let mut c = cmp(0.9, 0.8, 0.95);
        c.verdict = Verdict::Invalid;
        assert_eq!(
            decide(&c, 0.03, 2.0, false),
            Step::Decided(AttemptVerdict::Invalid)
        );
    }
}
