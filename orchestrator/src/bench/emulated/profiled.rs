//! The champion's profile under the emulated meter: one trial of it in the
//! live regime, with an unscored window after the scored one counted by
//! code address on the server's vCPU and named by function. The live
//! regime because only there is that vCPU the server's alone; the backlog
//! regime's vCPU split is not the server's (docs/emulated-meter.md).

use anyhow::{Context, Result};

use super::measure::measure;
use crate::bench::host::trial::TrialSettings;
use crate::bench::meters::emulator::{Emulator, WorkloadRegime};
use crate::bench::meters::profile::Profile;
use crate::bench::samples::Samples;
use crate::bench::servers::arm::Arm;

/// Profiles `arm` over `emulator.profile_connections` connections, or as
/// many as a scored window holds where that is 0.
pub fn profile(arm: &Arm, e: &Emulator, settings: &TrialSettings, seed: u64) -> Result<Profile> {
    let mut live = e.clone();
    let c = &mut live.config;
    if c.workload() != WorkloadRegime::Live {
        c.regime = WorkloadRegime::Live;
        c.vcpus = 0;
    }
    if c.profile_connections == 0 {
        c.profile_connections = c.window_connections;
    }
    let mut samples = Samples::new(1);
    measure(
        &mut samples,
        std::slice::from_ref(arm),
        1,
        seed,
        &live,
        settings,
        &mut |_| {},
    )?;
    let trial = samples.trials[0]
        .first()
        .context("the profiled trial returned nothing")?;
    if !trial.gate.passed {
        anyhow::bail!(
            "the profiled trial failed its gate: {:?}",
            trial.gate.detail
        );
    }
    trial
        .profile
        .clone()
        .context("the profiled trial's window was cut short: no profile")
}
