//! An arm's profile, by the means of the meter that scores it: perf
//! cpu-clock samples on the host, or emulated instructions by function
//! where the emulator meters.

use anyhow::Result;

use crate::bench::arm::Arm;
use crate::bench::emulated::profiled;
use crate::bench::meter::MeterPlan;
use crate::bench::perf_profile;
use crate::bench::profile::Profile;
use crate::bench::trial::TrialSettings;

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
