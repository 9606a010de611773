//! How every emulated trial starts its server: on a free port, listening,
//! or a failed trial that says why.

use crate::bench::host::trial::{failed_start, Measurement, TrialSettings};
use crate::bench::meters::meter::MeterPlan;
use crate::bench::servers::launch::{RunningServer, ServerCommand};
use crate::bench::servers::port::free_port;

/// A fresh server listening on a free port; or the failed trial its
/// start or its readiness makes.
pub fn listening(
    server: &ServerCommand,
    plan: &MeterPlan,
    s: &TrialSettings,
) -> anyhow::Result<Result<RunningServer, Measurement>> {
    let mut running = match RunningServer::start(server, free_port()?, plan, None) {
        Ok(r) => r,
        Err(e) => return Ok(Err(failed_start(format!("{e:#}"), &s.gate))),
    };
    if let Err(e) = running.wait_listening(s.ready_timeout) {
        running.stop(s.stop_grace)?;
        return Ok(Err(failed_start(format!("{e:#}"), &s.gate)));
    }
    Ok(Ok(running))
}
