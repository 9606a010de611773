//! The screen: every arm of a host measurement alone, for a few dozen
//! connections, before the probe sizes anything. An arm that does not serve
//! them by the contract is dropped: it is neither probed nor measured, and
//! each of its samples carries the screen's gate verdict.
//!
//! Why before the probe: the probe loads every arm at once and reads how
//! much the generator did for the connections that completed. An arm that
//! refuses connections keeps its clients spinning; one that never closes
//! holds them until they time out. Beside eight such arms the probe read a
//! generator capacity of 12-27 conn/s (normally 15,000-40,000), sized an
//! allotment that starved every arm, and the honest one failed its gate.
//! Alone, a broken arm can fail nothing but itself.

use anyhow::Result;
use std::time::{Duration, Instant};

use crate::bench::host::trial::{failed_start, TrialSettings};
use crate::bench::load::gate::GateConfig;
use crate::bench::load::gate::{self, GateEvidence, GateResult};
use crate::bench::load::loadgen::LoadGen;
use crate::bench::meters::meter::MeterPlan;
use crate::bench::samples::{Dropped, Stage};
use crate::bench::servers::arm::Arm;
use crate::bench::servers::launch::{RunningServer, CLOSE_WAIT};
use crate::bench::servers::port::free_port;
use crate::interrupt;

/// Connections an arm must serve to pass: enough that a server broken on
/// every connection fails at once, few enough that screening nine arms
/// costs well under a second when they are honest. A server broken on one
/// connection in a few hundred passes it; the probe or the gate catch it.
const SCREEN_CONNECTIONS: u64 = 64;
/// Clients at once: several, so a server that serves one connection at a
/// time while holding the others is seen.
const SCREEN_CLIENTS: usize = 8;

/// Screens every arm of `arms`, one at a time: `Some` for each that failed.
pub fn screen(arms: &[Arm], plan: &MeterPlan, s: &TrialSettings) -> Result<Vec<Option<Dropped>>> {
    arms.iter()
        .map(|arm| {
            let verdict = screen_one(arm, plan, s)?;
            Ok((!verdict.passed).then_some(Dropped {
                stage: Stage::Screen,
                gate: verdict,
            }))
        })
        .collect()
}

/// The gate's verdict on `arm` serving [`SCREEN_CONNECTIONS`] connections
/// alone, unrationed, from [`SCREEN_CLIENTS`] clients.
fn screen_one(arm: &Arm, plan: &MeterPlan, s: &TrialSettings) -> Result<GateResult> {
    let rules = GateConfig {
        min_completed: SCREEN_CONNECTIONS,
        ..s.gate.clone()
    };
    let port = free_port()?;
    let mut server = match RunningServer::start(&arm.command, port, plan, None) {
        Ok(r) => r,
        Err(e) => return Ok(failed_start(format!("{e:#}"), &rules).gate),
    };
    if let Err(e) = server.wait_listening(s.ready_timeout) {
        server.stop(s.stop_grace)?;
        return Ok(failed_start(format!("{e:#}"), &rules).gate);
    }
    let mut spec = s.load_spec(&[arm.command.address(port)]);
    spec.connections = SCREEN_CLIENTS;
    let load = LoadGen::start(spec)?;
    let deadline = Instant::now() + s.connection_timeout + Duration::from_secs(1);
    let mut alive = true;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
        if let Err(e) = interrupt::check() {
            load.finish();
            server.stop(s.stop_grace)?;
            return Err(e);
        }
        let now = load.snapshot(0);
        alive &= server.alive();
        let failed = now.failures.iter().sum::<u64>() > 0;
        if now.completed >= SCREEN_CONNECTIONS || failed || !alive {
            break;
        }
    }
    let totals = load.finish();
    let mut evidence = GateEvidence::from_totals(&totals[0], alive && server.alive());
    evidence.held_connections = server.held_connections(CLOSE_WAIT);
    server.stop(s.stop_grace)?;
    Ok(gate::check(&evidence, &rules))
}
