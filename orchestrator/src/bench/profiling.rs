//! An arm's profile, by the means of the meter that scores it: perf
//! cpu-clock samples on the host, or emulated instructions by function
//! where the emulator meters.

use anyhow::Result;

use crate::bench::emulated::profiled;
use crate::bench::host::perf_profile;
use crate::bench::host::trial::TrialSettings;
use crate::bench::meters::meter::MeterPlan;
use crate::bench::meters::profile::Profile;
use crate::bench::servers::arm::Arm;

/// Profiles `arm` in an extra window that no verdict scores.
pub fn profile(
    arm: &Arm,
    plan: &MeterPlan,
    settings: &TrialSettings,
    seed: u64,
) -> Result<Profile> {
    match &plan.emulator {
        Some(e) => profiled::profile(arm, e, settings, seed),
        None => perf_profile::record(arm, plan, settings, settings.window),
    }
}
