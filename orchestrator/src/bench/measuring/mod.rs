//! The seam between the bench and everything above it: a measuring host
//! takes built arms and turns them into samples, each sample measuring
//! every arm once, recorded with the meter, schedule and regime that
//! measured it. The referee, the loop and review see only those samples.
//!
//! Two hosts implement it: [`Host`](crate::bench::host::Host), this machine
//! (its PMU or task-clock, a duet or blocks, rationed or idle), and
//! [`Emulated`](crate::bench::emulated::measure::Emulated), guests in an
//! emulator that count instructions (a backlog or live clients). A new one
//! (a cluster's nodes, say) is one more implementation, chosen in
//! `bench/choice.rs`.

use anyhow::Result;
use std::time::Duration;

use crate::bench::samples::{Samples, Step};
use crate::bench::servers::arm::Arm;

pub trait MeasuringHost {
    /// Readies `samples` for an A/A check of `arms`: the arms screened and
    /// the regime settled (for at most `within`) where the host needs it.
    /// Returns the generator capacities it read on the way.
    fn settle(&self, samples: &mut Samples, arms: &[Arm], within: Duration) -> Result<Vec<f64>>;

    /// Measures `count` more samples of every arm of `arms` into `samples`,
    /// reporting each step; `seed` fixes the order of arms in a sample.
    fn measure(
        &self,
        samples: &mut Samples,
        arms: &[Arm],
        count: usize,
        seed: u64,
        on_step: &mut dyn FnMut(Step<'_>),
    ) -> Result<()>;
}

#[cfg(test)]
pub mod planted;
