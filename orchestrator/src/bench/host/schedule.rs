//! The blocks schedule: which arm runs when. A measurement is a series of samples
//! in which every arm is measured once; the referee compares arms only
//! within a sample, so slow drift of the machine lands on every arm alike.

use anyhow::Result;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::bench::host::trial::{Measurement, TrialSettings};
use crate::bench::meters::meter::MeterPlan;
use crate::bench::samples::{verify, Samples, Step};
use crate::bench::servers::arm::Arm;
use crate::bench::servers::launch::ServerCommand;

/// The order of `arms` arms in block `b`. Every block's order is uniformly
/// random, and each run of `arms` consecutive blocks uses the rotations of one
/// random permutation, so every arm runs in every position equally often: an
/// order effect (the first trial of a block running costlier, say) then adds
/// no bias to any arm. Seeded, so a schedule is reproducible.
pub fn block_order(arms: usize, b: usize, seed: u64) -> Vec<usize> {
    let group = (b / arms.max(1)) as u64;
    let mut rng = StdRng::seed_from_u64(seed ^ group.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut base: Vec<usize> = (0..arms).collect();
    base.shuffle(&mut rng);
    let mut rotations: Vec<usize> = (0..arms).collect();
    rotations.shuffle(&mut rng);
    base.rotate_left(rotations[b % arms.max(1)]);
    base
}

/// How one arm's sample in a block is taken: the host's timed trial, or
/// the emulated guest's batches.
pub type Trial<'a> = &'a dyn Fn(&ServerCommand, &MeterPlan, &TrialSettings) -> Result<Measurement>;

impl Samples {
    /// Runs `blocks` more blocks, in the order [`block_order`] gives, each
    /// arm's sample taken by `trial`.
    #[allow(clippy::too_many_arguments)]
    pub fn run_blocks(
        &mut self,
        arms: &[Arm],
        sample_count: usize,
        seed: u64,
        plan: &MeterPlan,
        settings: &TrialSettings,
        trial: Trial<'_>,
        on_step: &mut dyn FnMut(Step<'_>),
    ) -> Result<()> {
        let first = self.count();
        let total_blocks = first + sample_count;
        let mut done = 0;
        for b in first..total_blocks {
            let order = block_order(arms.len(), b, seed);
            let mut block = vec![None; arms.len()];
            for &i in &order {
                on_step(Step {
                    block: b + 1,
                    sample_count: total_blocks,
                    arm: &arms[i].label,
                    done,
                    so_far: self,
                });
                verify(&arms[i])?;
                block[i] = Some(match self.dropped(i) {
                    Some(dropped) => dropped.measurement(),
                    None => {
                        let mut alone = settings.clone();
                        alone.ration = self.regime.as_ref().and_then(|r| r.allotment_of(i));
                        trial(&arms[i].command, plan, &alone)?
                    }
                });
                done += 1;
            }
            self.orders.push(order);
            for (i, m) in block.into_iter().enumerate() {
                self.trials[i].push(m.expect("every arm ran in the block"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_orders_are_permutations_balanced_over_positions() {
        for arms in 1..5 {
            let mut seen = vec![vec![0; arms]; arms];
            for b in 0..arms * 4 {
                let order = block_order(arms, b, 7);
                let mut sorted = order.clone();
                sorted.sort();
                assert_eq!(sorted, (0..arms).collect::<Vec<_>>());
                for (pos, arm) in order.iter().enumerate() {
                    seen[*arm][pos] += 1;
                }
            }
            for row in &seen {
                assert!(row.iter().all(|&n| n == 4), "{arms} arms: {seen:?}");
            }
        }
        assert_eq!(block_order(3, 5, 1), block_order(3, 5, 1));
    }
}
