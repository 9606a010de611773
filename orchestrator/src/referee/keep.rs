//! The keep rule: a candidate replaces the champion only if it is at least
//! `threshold` cheaper by the median of its block ratios AND the whole 95%
//! interval of that ratio lies below 1. When the interval straddles the
//! threshold line the evidence is extended once with more blocks; a
//! suspiciously large gain is extended once too before it can be kept.

use anyhow::Result;

use crate::referee::compare::{Comparison, Samples};
use crate::referee::verdict::Verdict;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Keep,
    Discard,
    Invalid,
    /// Measure more blocks, then decide again with `extended = true`.
    Extend,
}

pub fn decide(c: &Comparison, threshold: f64, suspicious_gain: f64, extended: bool) -> Decision {
    let (Some(median), Some([lo, hi])) = (c.ratio_median, c.ratio_ci95) else {
        return Decision::Invalid;
    };
    if c.verdict == Verdict::Invalid {
        return Decision::Invalid;
    }
    let line = 1.0 - threshold;
    let keep = median <= line && hi < 1.0;
    if keep && !extended && median < 1.0 / suspicious_gain {
        return Decision::Extend;
    }
    if keep {
        return Decision::Keep;
    }
    if !extended && lo < line && line < hi {
        return Decision::Extend;
    }
    Decision::Discard
}

/// What the keep rule concluded about a measured candidate.
pub struct Judged {
    pub comparison: Comparison,
    pub decision: Decision,
    pub extended: bool,
}

/// Measures with `more` (which adds blocks to `samples`, or returns false
/// when the measurement had to be abandoned), applies the keep rule, and
/// extends the evidence once when the rule asks for it. The decision is never
/// `Extend`.
pub fn judge_measured(
    samples: &mut Samples,
    candidate: usize,
    champion: usize,
    threshold: f64,
    suspicious_gain: f64,
    more: &mut dyn FnMut(&mut Samples, bool) -> Result<bool>,
) -> Result<Option<Judged>> {
    if !more(samples, false)? {
        return Ok(None);
    }
    let mut comparison = samples.compare(candidate, champion, threshold);
    let mut decision = decide(&comparison, threshold, suspicious_gain, false);
    let extended = decision == Decision::Extend;
    if extended {
        if !more(samples, true)? {
            return Ok(None);
        }
        comparison = samples.compare(candidate, champion, threshold);
        decision = decide(&comparison, threshold, suspicious_gain, true);
    }
    Ok(Some(Judged {
        comparison,
        decision,
        extended,
    }))
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
            Decision::Keep
        );
    }

    #[test]
    fn straddling_interval_is_extended_once_then_discarded() {
        let c = cmp(0.975, 0.95, 1.01);
        assert_eq!(decide(&c, 0.03, 2.0, false), Decision::Extend);
        assert_eq!(decide(&c, 0.03, 2.0, true), Decision::Discard);
    }

    #[test]
    fn clear_loss_or_no_effect_is_discarded_at_once() {
        assert_eq!(
            decide(&cmp(1.10, 1.05, 1.15), 0.03, 2.0, false),
            Decision::Discard
        );
        assert_eq!(
            decide(&cmp(0.99, 0.98, 1.00), 0.03, 2.0, false),
            Decision::Discard
        );
    }

    #[test]
    fn suspiciously_large_gain_is_revalidated_before_keeping() {
        let c = cmp(0.30, 0.28, 0.33);
        assert_eq!(decide(&c, 0.03, 2.0, false), Decision::Extend);
        assert_eq!(decide(&c, 0.03, 2.0, true), Decision::Keep);
    }

    #[test]
    fn invalid_comparison_is_invalid() {
        let mut c = cmp(0.9, 0.8, 0.95);
        c.verdict = Verdict::Invalid;
        assert_eq!(decide(&c, 0.03, 2.0, false), Decision::Invalid);
    }
}
