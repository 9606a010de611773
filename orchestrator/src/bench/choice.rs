//! Which measuring host a measurement uses: the emulator when the meter
//! plan has one, this machine otherwise. The one place that knows both.

use crate::bench::emulated::measure::Emulated;
use crate::bench::host::trial::TrialSettings;
use crate::bench::host::Host;
use crate::bench::measuring::MeasuringHost;
use crate::bench::meters::meter::MeterPlan;

pub fn host_for<'a>(
    plan: &'a MeterPlan,
    settings: &'a TrialSettings,
) -> Box<dyn MeasuringHost + 'a> {
    match &plan.emulator {
        Some(emulator) => Box::new(Emulated { emulator, settings }),
        None => Box::new(Host { plan, settings }),
    }
}
