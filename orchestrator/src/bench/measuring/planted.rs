//! A measuring host with a known truth, for the referee's unit tests: each
//! arm costs what was planted, times a per-sample drift every arm shares and
//! noise of its own, both seeded. So a rule of the referee is checked
//! against the answer it should reach, with no server and no machine.

use super::MeasuringHost;
use anyhow::Result;
use std::time::Duration;

use crate::bench::load::gate::GateResult;
use crate::bench::measurement::Measurement;
use crate::bench::samples::{Samples, Step};
use crate::bench::servers::arm::Arm;
use rand::{Rng, SeedableRng};

pub struct Planted {
    /// Each arm's true cost per connection.
    pub costs: Vec<f64>,
    /// The spread (sd, relative) of each trial around its arm's cost.
    pub noise: f64,
    /// The spread of the drift all arms of a sample share.
    pub drift: f64,
}

/// A standard normal draw (the sum of twelve uniforms, less six).
fn normal(rng: &mut impl Rng) -> f64 {
    (0..12).map(|_| rng.gen::<f64>()).sum::<f64>() - 6.0
}

impl MeasuringHost for Planted {
    fn settle(&self, _: &mut Samples, _: &[Arm], _: Duration) -> Result<Vec<f64>> {
        Ok(Vec::new())
    }

    fn measure(
        &self,
        samples: &mut Samples,
        arms: &[Arm],
        count: usize,
        seed: u64,
        _: &mut dyn FnMut(Step<'_>),
    ) -> Result<()> {
        assert_eq!(arms.len(), self.costs.len(), "a cost planted per arm");
        samples.trials.resize(arms.len(), Vec::new());
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ samples.count() as u64);
        for _ in 0..count {
            let drift = 1.0 + self.drift * normal(&mut rng);
            for (arm, cost) in self.costs.iter().enumerate() {
                let cost = cost * drift * (1.0 + self.noise * normal(&mut rng));
                samples.trials[arm].push(Measurement {
                    gate: GateResult {
                        passed: true,
                        attempts: 1000,
                        completed: 1000,
                        ..Default::default()
                    },
                    cost_per_connection: Some(cost),
                    ..Default::default()
                });
            }
            samples.orders.push((0..arms.len()).collect());
        }
        Ok(())
    }
}
