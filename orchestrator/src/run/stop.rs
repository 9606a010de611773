//! When the loop stops on its own: the limits of `[run]`.

use std::time::{Duration, Instant};

use super::Loop;
use crate::referee::verdict::AttemptVerdict;

impl Loop<'_> {
    /// The limit reached, if any.
    pub(super) fn stop_reason(
        &self,
        started: Instant,
        iterations_this_call: usize,
    ) -> Option<String> {
        let r = &self.config().run;
        if self.attempts.len() >= r.max_iterations {
            return Some(format!("reached run.max_iterations = {}", r.max_iterations));
        }
        if started.elapsed() > Duration::from_secs(r.max_wall_minutes * 60)
            && iterations_this_call > 0
        {
            return Some(format!(
                "reached run.max_wall_minutes = {}",
                r.max_wall_minutes
            ));
        }
        let spent: f64 = self
            .attempts
            .iter()
            .filter_map(|a| a.usage.as_ref())
            .map(|u| u.cost_usd)
            .sum();
        if spent >= r.max_cost_usd {
            return Some(format!(
                "spent ${spent:.2}, run.max_cost_usd = {}",
                r.max_cost_usd
            ));
        }
        let streak = failure_streak(self.attempts.iter().map(|a| a.verdict));
        if streak >= r.max_consecutive_failures {
            return Some(format!(
                "{streak} attempts in a row measured nothing (run.max_consecutive_failures)"
            ));
        }
        None
    }
}

/// Attempts at the end of the run that measured nothing: failed builds,
/// broken contracts, malformed replies, agent errors. A measured discard or
/// promising attempt is the search doing its work, not a failure: counting
/// those stopped the reference run after 12 measured ideas with ten new ones
/// never measured.
fn failure_streak(verdicts: impl DoubleEndedIterator<Item = AttemptVerdict>) -> usize {
    verdicts.rev().take_while(|v| !v.is_decided()).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use AttemptVerdict::*;

    #[test]
    fn only_attempts_that_measured_nothing_count_as_failures() {
        let v = [Keep, BuildFailed, Discard, Promising, Invalid, AgentError];
        assert_eq!(failure_streak(v.into_iter()), 2);
        assert_eq!(failure_streak([Keep, Discard, Discard].into_iter()), 0);
        assert_eq!(failure_streak([BuildFailed, Malformed].into_iter()), 2);
    }
}
