//! One trial: a fresh server process pinned to the SUT core, a warm-up, one
//! measured window, and a stop. CPU counters and the load generator's counters
//! are read back to back at both ends of the window, so the cost per
//! connection is one counter delta over the connections completed in exactly
//! that window.

use anyhow::Result;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bench::config::Schedule;
use crate::bench::config::{DuetLoad, TrialSections};
use crate::bench::host::ballast::{self, Ballast};
use crate::bench::host::ration;
use crate::bench::load::contract::Contract;
use crate::bench::load::gate::GateConfig;
use crate::bench::load::gate::{self, GateEvidence};
use crate::bench::load::loadgen::{LoadGen, LoadSnapshot, LoadSpec};
pub use crate::bench::measurement::{
    BatchEvidence, EmulatedCounts, Latency, Measurement, OutsideWindows, ProfileWindow,
};
use crate::bench::meters::meter::{MeterPlan, MeterReading};
use crate::bench::regime::SaturationConfig;
use crate::bench::servers::cgroup::Allotment;
use crate::bench::servers::cgroup::RationGroup;
use crate::bench::servers::launch::{RunningServer, ServerCommand, CLOSE_WAIT};
use crate::bench::servers::port::free_port;
use crate::bench::servers::procfs;
use crate::interrupt;

#[derive(Clone, Debug)]
pub struct TrialSettings {
    pub warmup: Duration,
    pub window: Duration,
    pub ready_timeout: Duration,
    pub stop_grace: Duration,
    pub connections: usize,
    pub connection_timeout: Duration,
    pub load_cores: Vec<usize>,
    pub gate: GateConfig,
    pub contract: Arc<Contract>,
    pub schedule: Schedule,
    pub duet: DuetSettings,
    pub saturation: SaturationConfig,
    /// Every server's CPU allotment in the saturated regime, once sized
    /// (see [`crate::bench::host::ration`]); None: not rationed.
    pub ration: Option<Allotment>,
    /// Drain the load at both ends of the window, so that the window's
    /// connections are exactly those it started and every one of them
    /// completed in it. In the emulated guest, where counts are exact,
    /// the connections straddling an undrained boundary were most of what
    /// moved between windows; on the host a drain would idle the server
    /// in the window it measures.
    pub drain_windows: bool,
}

/// How the duet schedule slices its windows (see [`crate::bench::host::duet`]).
#[derive(Clone, Debug)]
pub struct DuetSettings {
    pub window: Duration,
    pub slice: Duration,
    pub windows_per_epoch: usize,
    /// Every arm loaded at once instead of in slices.
    pub shared: bool,
}

impl TrialSettings {
    /// The load the generator puts on servers listening at `targets`:
    /// `connections` in flight at each of them, so a server holds the same
    /// backlog whether it is measured alone or beside others. What a
    /// connection costs grows with how many a server holds (see the
    /// docs/referee.md, "Connections in flight").
    pub fn load_spec(&self, targets: &[SocketAddr]) -> LoadSpec {
        LoadSpec {
            targets: targets.to_vec(),
            connections: self.connections * targets.len().max(1),
            timeout: self.connection_timeout,
            cores: self.load_cores.clone(),
            contract: self.contract.clone(),
        }
    }

    pub fn from_sections(c: &TrialSections, load_cores: Vec<usize>) -> Self {
        Self {
            warmup: Duration::from_millis(c.trial.warmup_ms),
            window: Duration::from_millis(c.trial.window_ms),
            ready_timeout: Duration::from_millis(c.trial.ready_timeout_ms),
            stop_grace: Duration::from_millis(c.trial.stop_grace_ms),
            connections: c.load.connections,
            connection_timeout: Duration::from_millis(c.load.timeout_ms),
            load_cores,
            gate: c.gate.clone(),
            contract: Arc::new(c.contract.contract()),
            schedule: c.schedule,
            duet: DuetSettings {
                window: Duration::from_millis(c.duet.window_ms),
                slice: Duration::from_millis(c.duet.slice_ms),
                windows_per_epoch: c.duet.windows_per_epoch,
                shared: c.duet.load == DuetLoad::Shared,
            },
            saturation: c.saturation.clone(),
            ration: None,
            drain_windows: false,
        }
    }

    /// The built-in defaults, for tests and for the emulator's calibration,
    /// which measures no arm.
    pub fn defaults(load_cores: Vec<usize>) -> Self {
        Self::from_sections(&TrialSections::default(), load_cores)
    }
}

/// A short gated trial before a candidate is measured: a server that fails
/// it would fail the gate anyway, and costs no blocks. Returns why it failed.
pub fn smoke(
    server: &ServerCommand,
    plan: &MeterPlan,
    s: &TrialSettings,
    window: Duration,
) -> Result<Option<String>> {
    let mut smoke = s.clone();
    smoke.window = window;
    smoke.warmup = Duration::from_millis(200);
    smoke.gate.min_completed = smoke.gate.min_completed.min(100);
    let m = run_trial(server, plan, &smoke)?;
    Ok((!m.gate.passed).then(|| {
        format!(
            "smoke run failed the gate: {} {}",
            gate::fmt_reasons(&m.gate.reasons),
            m.gate.detail.join("; ")
        )
    }))
}

impl Measurement {
    /// Records what `meter` over `elapsed` says of the arm's saturation.
    pub fn with_saturation(
        mut self,
        meter: &MeterReading,
        elapsed: Duration,
        s: &TrialSettings,
    ) -> Self {
        let used = ration::WindowUse {
            on_sut_ns: meter.on_sut_ns(),
            context_switches_per_connection: self.context_switches_per_connection,
            throttling: meter.throttling,
            elapsed,
        };
        let sat = ration::saturation(&used, s.ration, &s.saturation);
        self.allotment_used = sat.allotment_used;
        self.throttled_share = sat.throttled_share;
        self.saturated = sat.saturated;
        self
    }
}

/// Length of one slice of the measured window (see `slice_costs`).
const SLICE: Duration = Duration::from_millis(250);

/// The share of the SUT core's busy time over `elapsed` that the arms' own
/// SUT time (`on_sut_ns`, summed) does not cover; None when the core's idle
/// time cannot be read or the core was never busy.
pub fn unaccounted(elapsed: Duration, idle_us: Option<u64>, on_sut_ns: u64) -> Option<f64> {
    let busy_ns = (elapsed.as_nanos() as f64 - idle_us? as f64 * 1e3).max(0.0);
    (busy_ns > 0.0).then(|| ((busy_ns - on_sut_ns as f64) / busy_ns).clamp(0.0, 1.0))
}

/// CPU time this process has used, user + system.
pub fn own_cpu() -> Duration {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Sleeps for `d` while watching the server; returns false if it exited.
/// An interrupt ends the trial at once (the server is killed on drop).
fn watch(server: &mut RunningServer, d: Duration) -> Result<bool> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        interrupt::check()?;
        if !server.alive() {
            return Ok(false);
        }
        std::thread::sleep(
            Duration::from_millis(20).min(end.saturating_duration_since(Instant::now())),
        );
    }
    Ok(server.alive())
}

pub fn failed_start(message: String, gate: &GateConfig) -> Measurement {
    let evidence = GateEvidence {
        start_error: Some(message),
        ..Default::default()
    };
    Measurement {
        gate: gate::check(&evidence, gate),
        ..Default::default()
    }
}

/// A trial's measured window, read in slices.
struct Window<'a> {
    running: &'a mut RunningServer,
    load: &'a LoadGen,
    alive: &'a mut bool,
}

impl Window<'_> {
    /// Watches the server through the window from `t0`, reading its counters
    /// and the load at each slice's end (the last after `drain`): the
    /// readings at the end, and the cost per connection of each slice.
    fn slices(
        &mut self,
        s: &TrialSettings,
        t0: Instant,
        start: (MeterReading, LoadSnapshot),
        drain: &dyn Fn(&LoadGen),
    ) -> Result<(MeterReading, LoadSnapshot, Vec<f64>)> {
        let slices = (s.window.as_millis() / SLICE.as_millis()).max(1) as u32;
        let mut slice_costs = Vec::with_capacity(slices as usize);
        let (mut mp, mut lp) = start;
        for k in 1..=slices {
            let until = s.window * k / slices;
            *self.alive &= watch(self.running, until.saturating_sub(t0.elapsed()))?;
            if k == slices {
                drain(self.load);
            }
            let (m1, l1) = (self.running.read()?, self.load.snapshot(0));
            let done = l1.completed - lp.completed;
            if done > 0 {
                slice_costs.push((m1.primary - mp.primary) as f64 / done as f64);
            }
            (mp, lp) = (m1, l1);
        }
        Ok((mp, lp, slice_costs))
    }
}

pub fn run_trial(
    server: &ServerCommand,
    plan: &MeterPlan,
    s: &TrialSettings,
) -> Result<Measurement> {
    let port = free_port()?;
    let group = s.ration.map(|a| RationGroup::create(a, 1)).transpose()?;
    let ballast = Ballast::start_if(s.ration.is_some() && s.saturation.ballast, plan.sut_core)?;
    let ballast_ns = || ballast::used_ns(&ballast);
    let mut running = match RunningServer::start(server, port, plan, group.as_ref()) {
        Ok(r) => r,
        Err(e) => return Ok(failed_start(format!("{e:#}"), &s.gate)),
    };
    if let Err(e) = running.wait_listening(s.ready_timeout) {
        running.stop(s.stop_grace)?;
        return Ok(failed_start(format!("{e:#}"), &s.gate));
    }
    let load = LoadGen::start(s.load_spec(&[server.address(port)]))?;
    let mut alive = watch(&mut running, s.warmup)?;

    let drain = |load: &LoadGen| {
        if s.drain_windows {
            load.quiesce(s.connection_timeout);
        }
    };
    drain(&load);
    load.set_measuring(true);
    let cpu0 = own_cpu();
    let idle0 = procfs::cpu_idle_us(plan.sut_core);
    let ballast0 = ballast_ns();
    let t0 = Instant::now();
    let m0 = running.read()?;
    let l0 = load.snapshot(0);
    load.resume();
    let (m1, l1, slice_costs) = {
        let mut window = Window {
            running: &mut running,
            load: &load,
            alive: &mut alive,
        };
        window.slices(s, t0, (m0, l0), &drain)?
    };
    let elapsed = t0.elapsed();
    let cpu1 = own_cpu();
    let idle1 = procfs::cpu_idle_us(plan.sut_core);
    let ballast_in_window = ballast_ns().saturating_sub(ballast0);
    load.set_measuring(false);

    let totals = load.finish().remove(0);
    alive &= running.alive();
    let held_connections = running.held_connections(CLOSE_WAIT);
    running.stop(s.stop_grace)?;

    let meter = m1.delta(&m0);
    let window = l1.delta(&l0);
    // A connection still hanging after the drain deadline never completed:
    // `from_totals` counts it a timeout.
    let evidence = GateEvidence {
        window_completed: window.completed,
        // Off-core work anywhere in the trial, warm-up included.
        off_core_ns: m1.off_core_ns,
        held_connections,
        ..GateEvidence::from_totals(&totals, alive)
    };
    let gate = gate::check(&evidence, &s.gate);
    let per_conn = |x: u64| (window.completed > 0).then(|| x as f64 / window.completed as f64);
    let window_s = elapsed.as_secs_f64();
    let h = &totals.latency_us;
    let load_cores = s.load_cores.len().max(1) as f64;
    Ok(Measurement {
        cost_per_connection: if gate.passed {
            per_conn(meter.primary)
        } else {
            None
        },
        gate,
        window_completed: window.completed,
        window_s,
        throughput_cps: window.completed as f64 / window_s,
        latency_us: Some(Latency::of(h)),
        syscalls_per_connection: meter.syscalls.and_then(per_conn),
        context_switches_per_connection: per_conn(meter.context_switches),
        sut_busy: meter.task_clock_ns as f64 / elapsed.as_nanos() as f64,
        generator_busy: Some((cpu1 - cpu0).as_secs_f64() / window_s / load_cores),
        sut_unaccounted: unaccounted(
            elapsed,
            idle1.zip(idle0).map(|(b, a)| b.saturating_sub(a)),
            meter.on_sut_ns() + ballast_in_window,
        ),
        meter_delta: meter,
        slice_costs,
        ..Default::default()
    }
    .with_saturation(&meter, elapsed, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unaccounted_share_is_busy_time_no_arm_ran() {
        // 1 s window, 400 ms idle: 600 ms busy, of which arms ran 450 ms.
        let s = unaccounted(Duration::from_secs(1), Some(400_000), 450_000_000).unwrap();
        assert!((s - 0.25).abs() < 1e-9, "{s}");
        assert_eq!(unaccounted(Duration::from_secs(1), None, 1), None);
        assert_eq!(
            unaccounted(Duration::from_secs(1), Some(1_000_000), 0),
            None
        );
    }
}
