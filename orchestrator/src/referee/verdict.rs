//! The verdict of one arm against a baseline from its block ratios
//! (cost(arm) / cost(baseline); below 1 means the arm is cheaper).

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Better,
    Worse,
    Same,
    Invalid,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Better => "better",
            Verdict::Worse => "worse",
            Verdict::Same => "same",
            Verdict::Invalid => "invalid",
        }
    }
}

/// `better` needs both a large enough effect (median at least `threshold`
/// cheaper) and confidence that it is real (the whole 95% interval below 1);
/// `worse` needs only confidence, since a regression of any size is news.
pub fn judge(ratio_median: f64, ci95: (f64, f64), threshold: f64) -> Verdict {
    if ratio_median <= 1.0 - threshold && ci95.1 < 1.0 {
        Verdict::Better
    } else if ci95.0 > 1.0 {
        Verdict::Worse
    } else {
        Verdict::Same
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clear_win_is_better() {
        assert_eq!(judge(0.90, (0.88, 0.93), 0.03), Verdict::Better);
    }

    #[test]
    fn small_but_certain_win_is_same() {
        assert_eq!(judge(0.985, (0.98, 0.99), 0.03), Verdict::Same);
    }

    #[test]
    fn big_but_uncertain_win_is_same() {
        assert_eq!(judge(0.90, (0.80, 1.02), 0.03), Verdict::Same);
    }

    #[test]
    fn certain_regression_is_worse() {
        assert_eq!(judge(1.01, (1.005, 1.02), 0.03), Verdict::Worse);
    }

    #[test]
    fn threshold_is_inclusive() {
        assert_eq!(judge(0.97, (0.96, 0.98), 0.03), Verdict::Better);
    }
}
