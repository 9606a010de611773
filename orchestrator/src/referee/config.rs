//! The referee's section of `harness.toml`: how many samples a measurement
//! takes, on which schedule, and the keep rule's threshold and latency
//! guard. It lives with the referee so the referee compiles without the
//! loop's or the agents' settings.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::bench::config::Schedule;
use crate::check::range;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompareConfig {
    pub schedule: Schedule,
    /// Samples per measurement: windows (duet) or blocks (blocks). Read
    /// as `blocks` too, its name until 2026-12-05.
    #[serde(alias = "blocks")]
    pub samples: usize,
    pub threshold: f64,
    /// A keep whose p99 latency is more than this many times the champion's,
    /// measured side by side, is rejected: CPU bought with waiting (timers,
    /// batching) is not a saving.
    pub max_p99_factor: f64,
}

impl Default for CompareConfig {
    fn default() -> Self {
        Self {
            schedule: Schedule::default(),
            samples: 12,
            threshold: 0.03,
            max_p99_factor: 2.0,
        }
    }
}

impl CompareConfig {
    pub fn validate(&self) -> Result<()> {
        // Fewer samples give no interval with a stated coverage (see stats).
        range("compare.samples", self.samples as f64, 6.0, 1000.0)?;
        range("compare.threshold", self.threshold, 0.0, 0.99)?;
        range("compare.max_p99_factor", self.max_p99_factor, 1.0, 1000.0)
    }
}
