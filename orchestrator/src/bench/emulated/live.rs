//! The emulated meter's live regime: the study's workload. Closed-loop
//! clients on their own vCPUs hold `load.connections` in flight the whole
//! time, while the server runs alone on an isolated vCPU (the guest kernel's
//! `isolcpus`, and a cpuset that confines every thread it makes, io-wq
//! workers included). Clients and server run at once, so the costs a
//! backlog never has are paid here: wake-ups and task work sent across
//! vCPUs, interrupts between them, arrivals while the server waits.
//!
//! A trial is one server process: `warmup` connections unscored, then one
//! window of `window` connections between two markers. The cost is the
//! server vCPU's instructions over the window, user and kernel, the
//! softirqs and interrupts served there included (what `perf stat -C`
//! counts on an isolated core), per connection the clients completed in
//! it. Both lengths are jittered per trial from the seed, so a server that
//! counts connections cannot tell where a window ends.

use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

use crate::bench::emulated::clients::Clients;
use crate::bench::emulated::start::listening;
use crate::bench::host::trial::{own_cpu, Measurement, ProfileWindow, TrialSettings};
use crate::bench::load::gate::{self, GateEvidence};
use crate::bench::load::loadgen::LoadSnapshot;
use crate::bench::meters::marker::{self, Mark};
use crate::bench::meters::meter::MeterPlan;
use crate::bench::servers::launch::{RunningServer, ServerCommand, CLOSE_WAIT};
use crate::bench::servers::procfs;
use crate::bench::servers::uring;

/// How a live trial is sized (connections; guest time for the limits).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LiveSettings {
    pub warmup_connections: u64,
    pub window_connections: u64,
    /// A window in which no connection completes for this long is over:
    /// the server stopped serving.
    pub stall: Duration,
    /// After the scored window, an unscored one of this many connections
    /// the plugin profiles by code address (0: none).
    #[serde(default)]
    pub profile_connections: u64,
}

/// The least share of a window the server must be on its CPU for the
/// window to count as saturated: the study's server was CPU-bound.
pub const MIN_BUSY: f64 = 0.9;

/// How often ratchet looks at the clients' count while a window runs: on
/// a client vCPU, so never in the count.
const LOOK_EVERY: Duration = Duration::from_millis(1);

/// Runs `server` under live clients and measures one window.
pub fn run_trial(
    server: &ServerCommand,
    plan: &MeterPlan,
    s: &TrialSettings,
    l: &LiveSettings,
) -> Result<Measurement> {
    let mut running = match listening(server, plan, s)? {
        Ok(r) => r,
        Err(failed) => return Ok(failed),
    };
    let load = Clients::start(
        running.address(),
        s.connections,
        &s.load_cores,
        s.contract.clone(),
        s.connection_timeout,
    )?;
    let mut alive = until_completed(&load, &mut running, l.warmup_connections, l.stall)?;
    let sut = plan.sut_core;
    let events0 = procfs::core_events(sut);
    let cpu0 = own_cpu();
    let begin = marker::mark(Mark::WindowBegin);
    let l0 = load.snapshot();
    let cq0 = running.uring_completions();
    let m0 = running.read()?;
    let t0 = Instant::now();
    if alive {
        alive = until_completed(&load, &mut running, l.window_connections, l.stall)?;
    }
    let m1 = running.read()?;
    let cq1 = running.uring_completions();
    let l1 = load.snapshot();
    let end = marker::mark(Mark::WindowEnd);
    let elapsed = t0.elapsed();
    let cpu1 = own_cpu();
    let events1 = procfs::core_events(sut);
    let profile = if alive && l.profile_connections > 0 {
        let b = marker::mark(Mark::ProfileBegin);
        let p0 = load.snapshot().completed;
        alive = until_completed(&load, &mut running, l.profile_connections, l.stall)?;
        let p1 = load.snapshot().completed;
        let e = marker::mark(Mark::ProfileEnd);
        b.zip(e).map(|(b, e)| ProfileWindow {
            marks: [b, e],
            connections: p1 - p0,
            maps: running.executable_mappings(),
            exe: std::fs::read_link(format!("/proc/{}/exe", running.pid))
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        })
    } else {
        None
    };

    let totals = load.finish();
    alive &= running.alive();
    let held_connections = running.held_connections(CLOSE_WAIT);
    running.stop(s.stop_grace)?;

    let meter = m1.delta(&m0);
    let window: LoadSnapshot = l1.delta(&l0);
    let mut evidence = GateEvidence::from_totals(&totals, alive);
    evidence.window_completed = window.completed;
    evidence.off_core_ns = m1.off_core_ns;
    evidence.held_connections = held_connections;
    let per_conn = |x: u64| (window.completed > 0).then(|| x as f64 / window.completed as f64);
    let sut_busy = meter.task_clock_ns as f64 / elapsed.as_nanos().max(1) as f64;
    let clients = s.load_cores.len().max(1) as f64;
    Ok(Measurement {
        gate: gate::check(&evidence, &s.gate),
        window_completed: window.completed,
        window_s: elapsed.as_secs_f64(),
        throughput_cps: window.completed as f64 / elapsed.as_secs_f64().max(1e-9),
        latency_us: Some(crate::bench::host::trial::Latency::of(&totals.latency_us)),
        context_switches_per_connection: per_conn(meter.context_switches),
        sut_busy,
        generator_busy: Some((cpu1 - cpu0).as_secs_f64() / elapsed.as_secs_f64() / clients),
        saturated: Some(sut_busy >= MIN_BUSY),
        completions_per_connection: cq0
            .zip(cq1)
            .and_then(|(a, b)| per_conn(uring::posted(a, b))),
        core_events: events0
            .zip(events1)
            .filter(|_| window.completed > 0)
            .map(|(a, b)| b.minus(&a).per(window.completed)),
        meter_delta: meter,
        windows: begin
            .zip(end)
            .map(|(b, e)| vec![[b, e]])
            .unwrap_or_default(),
        profile_window: profile,
        ..Default::default()
    })
}

/// Waits until the clients have completed `n` more connections. Returns
/// false when the server died, or when none completed for `stall`.
fn until_completed(
    load: &Clients,
    running: &mut RunningServer,
    n: u64,
    stall: Duration,
) -> Result<bool> {
    let goal = load.snapshot().completed + n;
    let mut last = load.snapshot().completed;
    let mut progress = Instant::now();
    loop {
        let done = load.snapshot().completed;
        if done >= goal {
            return Ok(true);
        }
        if done != last {
            (last, progress) = (done, Instant::now());
        } else if progress.elapsed() >= stall || !running.alive() {
            return Ok(false);
        }
        crate::interrupt::check()?;
        std::thread::sleep(LOOK_EVERY);
    }
}

/// `n` jittered by up to a quarter either way, from `seed`: a server that
/// counts connections cannot tell where a window starts or ends.
pub fn jittered(n: u64, seed: u64) -> u64 {
    let mut h = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 29;
    let span = n / 2;
    if span == 0 {
        return n;
    }
    n - n / 4 + h % (span + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_a_quarter_and_moves_with_the_seed() {
        let got: Vec<u64> = (0..200).map(|s| jittered(4000, s)).collect();
        assert!(got.iter().all(|&n| (3000..=5000).contains(&n)), "{got:?}");
        let distinct: std::collections::HashSet<_> = got.iter().collect();
        assert!(distinct.len() > 100, "{} distinct", distinct.len());
        assert_eq!(jittered(4000, 7), jittered(4000, 7));
    }
}
