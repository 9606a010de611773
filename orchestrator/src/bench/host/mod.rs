//! This machine as a measuring host: its PMU or task-clock on the SUT
//! core, the arms screened, the regime probed (rationed or idle), and the
//! samples taken as windows of a duet or blocks of sequential trials; and
//! what else runs a server here unscored: the endurance run before a keep
//! and the champion's profile.

pub mod ballast;
pub mod duet;
pub mod endurance;
pub mod lock;
pub mod perf_profile;
pub mod probe;
pub mod ration;
pub mod schedule;
pub mod screen;
pub mod trial;

use anyhow::Result;
use std::time::Duration;

use crate::bench::config::Schedule;
use crate::bench::host::trial::{run_trial, TrialSettings};
use crate::bench::measuring::MeasuringHost;
use crate::bench::meters::meter::MeterPlan;
use crate::bench::samples::{Samples, Step};
use crate::bench::servers::arm::Arm;

pub struct Host<'a> {
    pub plan: &'a MeterPlan,
    pub settings: &'a TrialSettings,
}

impl MeasuringHost for Host<'_> {
    /// A busy spell of the host leaves loopback slow for a minute or two:
    /// the probe waits for the generator's capacity to steady.
    fn settle(&self, samples: &mut Samples, arms: &[Arm], within: Duration) -> Result<Vec<f64>> {
        samples.dropped = screen::screen(arms, self.plan, self.settings)?;
        let (record, capacities) =
            probe::settle(arms, &mut samples.dropped, self.plan, self.settings, within)?;
        samples.regime = Some(record);
        Ok(capacities)
    }

    /// The arms are screened and the regime probed before the first sample,
    /// and both kept for every extension.
    fn measure(
        &self,
        samples: &mut Samples,
        arms: &[Arm],
        count: usize,
        seed: u64,
        on_step: &mut dyn FnMut(Step<'_>),
    ) -> Result<()> {
        let (plan, settings) = (self.plan, self.settings);
        samples.schedule = Some(settings.schedule);
        samples.drift = (plan.drift > 0.0).then_some(plan.drift);
        if samples.dropped.is_empty() {
            samples.dropped = screen::screen(arms, plan, settings)?;
        }
        if samples.regime.is_none() {
            samples.regime = Some(probe::regime(arms, &mut samples.dropped, plan, settings)?);
        }
        let settings = &regime_settings(samples, settings);
        match settings.schedule {
            Schedule::Duet => {
                duet::run_windows(samples, arms, count, seed, plan, settings, on_step)
            }
            Schedule::Blocks => {
                samples.run_blocks(arms, count, seed, plan, settings, &run_trial, on_step)
            }
        }
    }
}

/// `settings` in the measurement's regime: rationed servers, and a duet
/// that loads every arm at once. Slices would not do: a rationed arm that
/// loses the load still holds its backlog, and drains it in the next arm's
/// slice.
fn regime_settings(samples: &Samples, settings: &TrialSettings) -> TrialSettings {
    let mut s = settings.clone();
    s.ration = samples.regime.as_ref().and_then(|r| r.allotment);
    if s.ration.is_some() {
        s.duet.shared = true;
    }
    s
}
