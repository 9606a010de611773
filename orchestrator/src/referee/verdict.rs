//! Verdicts. [`Verdict`] is what one comparison says of an arm against a
//! baseline from its block ratios (cost(arm) / cost(baseline); below 1 means
//! the arm is cheaper). [`AttemptVerdict`] is how an attempt of the loop
//! ended; it is what the journal, the lessons, the agents, `log`, `replay`
//! and the report read and compare, so it is one type, serialized to the
//! journal's strings.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Better,
    /// Credibly cheaper (the whole interval below 1) but short of the
    /// threshold: the loop's word for it, since `same` read as "no
    /// difference" where a resolved 2.8% gain sat beside a 2.7% `worse`.
    Promising,
    Worse,
    Same,
    Invalid,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Better => "better",
            Verdict::Promising => "promising",
            Verdict::Worse => "worse",
            Verdict::Same => "same",
            Verdict::Invalid => "invalid",
        }
    }
}

/// How an attempt ended. The serialized names are the journal's, so every
/// recorded run loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptVerdict {
    /// Measured better than the champion at the threshold: the new champion.
    Keep,
    /// Measured, and not better by the threshold.
    Discard,
    /// Measured credibly cheaper (the whole decision interval below 1) but
    /// short of the threshold: discarded as champion, kept as material for
    /// stacks and retries.
    Promising,
    /// Better by the threshold, but its p99 latency beyond
    /// `compare.max_p99_factor` times the champion's: CPU bought with waiting.
    LatencyRegression,
    /// A gate failed: the smoke run or the measurement broke the contract.
    Invalid,
    BuildFailed,
    /// Nothing changed: no edit, or a binary identical to the champion's.
    NoOp,
    /// A change outside `run.allowed_paths`, or tampering with what ratchet
    /// measures or records.
    Scope,
    /// The agent's reply could not be used.
    Malformed,
    /// The agent could not be reached or failed.
    AgentError,
    /// The edit does not apply to the champion: a replayed attempt, or a
    /// stack or retry whose part conflicts with it (the detail names the part).
    DoesNotApply,
    /// Replay only: the attempt recorded nothing to re-apply.
    Skipped,
    /// Measured in a generation's screen, side by side with the champion
    /// and its rivals, and not judged: a rival ranked first, or it was not
    /// worth judging. Its screen is a measurement the search learns from;
    /// only the keep rule keeps.
    Screened,
}

impl AttemptVerdict {
    pub fn name(self) -> &'static str {
        match self {
            AttemptVerdict::Keep => "keep",
            AttemptVerdict::Discard => "discard",
            AttemptVerdict::Promising => "promising",
            AttemptVerdict::LatencyRegression => "latency_regression",
            AttemptVerdict::Invalid => "invalid",
            AttemptVerdict::BuildFailed => "build_failed",
            AttemptVerdict::NoOp => "no_op",
            AttemptVerdict::Scope => "scope",
            AttemptVerdict::Malformed => "malformed",
            AttemptVerdict::AgentError => "agent_error",
            AttemptVerdict::DoesNotApply => "does_not_apply",
            AttemptVerdict::Skipped => "skipped",
            AttemptVerdict::Screened => "screened",
        }
    }

    pub fn is_keep(self) -> bool {
        self == AttemptVerdict::Keep
    }

    /// The referee measured the candidate beside the champion and said
    /// what it is worth: kept, or not, or ranked in a screen.
    pub fn is_decided(self) -> bool {
        matches!(
            self,
            AttemptVerdict::Keep
                | AttemptVerdict::Discard
                | AttemptVerdict::Promising
                | AttemptVerdict::Screened
        )
    }
}

impl std::fmt::Display for AttemptVerdict {
    /// Padding and width apply, so tables can align it like a string.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// `better` needs both a large enough effect (median at least `threshold`
/// cheaper) and confidence that it is real (the whole 95% interval below 1);
/// `worse` needs only confidence, since a regression of any size is news.
/// A gain with that confidence but not that size is `promising`: resolved,
/// and under the threshold.
pub fn of(ratio_median: f64, interval: (f64, f64), threshold: f64) -> Verdict {
    if ratio_median <= 1.0 - threshold && interval.1 < 1.0 {
        Verdict::Better
    } else if interval.1 < 1.0 {
        Verdict::Promising
    } else if interval.0 > 1.0 {
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
        assert_eq!(of(0.90, (0.88, 0.93), 0.03), Verdict::Better);
    }

    /// Resolved both ways alike: a certain gain under the threshold is
    /// named as a gain, as a certain loss of any size is.
    #[test]
    fn small_but_certain_win_is_promising() {
        assert_eq!(of(0.985, (0.98, 0.99), 0.03), Verdict::Promising);
        assert_eq!(of(0.972, (0.969, 0.973), 0.03), Verdict::Promising);
        assert_eq!(of(1.027, (1.025, 1.030), 0.03), Verdict::Worse);
    }

    #[test]
    fn big_but_uncertain_win_is_same() {
        assert_eq!(of(0.90, (0.80, 1.02), 0.03), Verdict::Same);
    }

    #[test]
    fn certain_regression_is_worse() {
        assert_eq!(of(1.01, (1.005, 1.02), 0.03), Verdict::Worse);
    }

    #[test]
    fn attempt_verdicts_keep_the_journal_names() {
        for v in [
            AttemptVerdict::Keep,
            AttemptVerdict::Promising,
            AttemptVerdict::BuildFailed,
            AttemptVerdict::NoOp,
            AttemptVerdict::AgentError,
            AttemptVerdict::DoesNotApply,
        ] {
            let json = serde_json::to_string(&v).unwrap();
            assert_eq!(json, format!("\"{}\"", v.name()));
            assert_eq!(serde_json::from_str::<AttemptVerdict>(&json).unwrap(), v);
        }
        assert_eq!(format!("{:<8}|", AttemptVerdict::NoOp), "no_op   |");
    }

    #[test]
    fn threshold_is_inclusive() {
        assert_eq!(of(0.97, (0.96, 0.98), 0.03), Verdict::Better);
    }
}
