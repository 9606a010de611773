//! When the loop stops on its own: the limits of `[run]`.

use std::time::{Duration, Instant};

use super::Loop;

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
        let streak = self
            .attempts
            .iter()
            .rev()
            .take_while(|a| !a.verdict.is_keep())
            .count();
        if streak >= r.max_consecutive_failures {
            return Some(format!(
                "{streak} attempts in a row without a keep (run.max_consecutive_failures)"
            ));
        }
        None
    }
}
