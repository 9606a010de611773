//! The duet schedule: every arm of a measurement is a live server on the SUT
//! core, each on its own port, for the whole of an epoch. The load generator
//! moves its whole load between them in short slices (a few tens of ms, well
//! under the ~250 ms period of a VM's speed drift), in an order reversed every
//! round (A B C C B A ...), so every arm sees the same machine. Each window
//! reads every arm's counters and the generator's per-arm counts at the same
//! instants, and gives one sample per arm.
//!
//! At each window boundary the generator lets every connection under way
//! finish before the counters are read, so no connection's work straddles two
//! windows (the 256 connections a server holds at an unquiesced boundary
//! would be a few percent of its sample in a 1 s window).
//!
//! One arm is loaded at a time, so each server runs as it would alone on its
//! core (with the whole load, its own receive work in its own slices), while
//! the drift of the machine lands on every arm alike. Servers are started
//! afresh every epoch, in a rotated order, so a process's luck at start-up is
//! spread over windows instead of fixed for the whole measurement.

use anyhow::Result;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::time::{Duration, Instant};

use crate::bench::arm::Arm;
use crate::bench::ballast::{self, Ballast};
use crate::bench::cgroup::RationGroup;
use crate::bench::contract::Failure;
use crate::bench::gate::{self, GateEvidence};
use crate::bench::launch::{free_port, RunningServer, CLOSE_WAIT};
use crate::bench::loadgen::{LoadGen, LoadSnapshot, EVERY_TARGET};
use crate::bench::meter::{MeterPlan, MeterReading};
use crate::bench::procfs;
use crate::bench::samples::{verify, Samples, Step};
use crate::bench::screen::Dropped;
use crate::bench::trial::{
    failed_start, own_cpu, unaccounted, Latency, Measurement, TrialSettings,
};
use crate::interrupt;

/// The arm holding the load in each of `slices` slices of window `w`. Rounds
/// come in pairs: a seeded permutation of the live arms, then the same
/// backwards (A B C C B A), so a linear drift within a pair weighs every arm
/// alike; every pair draws a new permutation, so no arm always follows the
/// same neighbour (a neighbour's cache footprint then lands on every arm
/// alike, not on whichever arm a fixed order put after it).
pub fn slice_sequence(
    live: &[usize],
    seed: u64,
    epoch: usize,
    w: usize,
    slices: usize,
) -> Vec<usize> {
    let mut rng = StdRng::seed_from_u64(
        seed ^ (epoch as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (w as u64).rotate_left(32),
    );
    let mut out = Vec::with_capacity(slices + 2 * live.len());
    while out.len() < slices {
        let mut p = live.to_vec();
        p.shuffle(&mut rng);
        out.extend(p.iter().copied());
        out.extend(p.iter().rev().copied());
    }
    out.truncate(slices);
    out
}

/// One arm's server during an epoch.
struct Live {
    server: Option<RunningServer>,
    start_error: Option<String>,
    alive: bool,
}

impl Live {
    fn read(&mut self) -> Result<Option<MeterReading>> {
        match &mut self.server {
            Some(s) => Ok(Some(s.read()?)),
            None => Ok(None),
        }
    }
}

/// Runs `windows` more windows of `arms` into `samples`, in epochs of
/// `settings.duet.windows_per_epoch`.
pub fn run_windows(
    samples: &mut Samples,
    arms: &[Arm],
    windows: usize,
    seed: u64,
    plan: &MeterPlan,
    s: &TrialSettings,
    on_step: &mut dyn FnMut(Step<'_>),
) -> Result<()> {
    let first = samples.count();
    let total = first + windows;
    let per_epoch = s.duet.windows_per_epoch.max(1);
    let mut w = first;
    while w < total {
        let n = per_epoch.min(total - w);
        for arm in arms {
            verify(arm)?;
        }
        let epoch = w / per_epoch;
        let dropped: Vec<Option<Dropped>> = (0..arms.len())
            .map(|i| samples.dropped(i).cloned())
            .collect();
        let (trials, orders) = run_epoch(arms, &dropped, n, seed, epoch, plan, s, &mut |k| {
            on_step(Step {
                block: w + k + 1,
                sample_count: total,
                arm: "all arms",
                done: (w - first + k) * arms.len(),
                so_far: samples,
            })
        })?;
        for (i, t) in trials.into_iter().enumerate() {
            samples.trials[i].extend(t);
        }
        samples.orders.extend(orders);
        w += n;
    }
    Ok(())
}

/// Starts every arm (in an order rotated by epoch), warms them all up, and
/// measures `windows` windows. Returns `trials[arm][window]` and each
/// window's arm order.
#[allow(clippy::type_complexity)]
#[allow(clippy::too_many_arguments)]
fn run_epoch(
    arms: &[Arm],
    dropped: &[Option<Dropped>],
    windows: usize,
    seed: u64,
    epoch: usize,
    plan: &MeterPlan,
    s: &TrialSettings,
    on_window: &mut dyn FnMut(usize),
) -> Result<(Vec<Vec<Measurement>>, Vec<Vec<usize>>)> {
    let n = arms.len();
    // Declared before the servers, so it is removed after them.
    // One allotment per arm that runs: a dropped arm's would go to the rest.
    let running = dropped.iter().filter(|d| d.is_none()).count();
    let group = s
        .ration
        .map(|a| RationGroup::create(a, running))
        .transpose()?;
    let ballast = Ballast::start_if(s.ration.is_some() && s.saturation.ballast, plan.sut_core)?;
    let ballast_ns = || ballast::used_ns(&ballast);
    let mut lives: Vec<Live> = (0..n)
        .map(|_| Live {
            server: None,
            start_error: None,
            alive: true,
        })
        .collect();
    let mut ports = vec![0u16; n];
    for k in 0..n {
        let i = (k + epoch) % n;
        ports[i] = free_port()?;
        if dropped[i].is_some() {
            continue;
        }
        match RunningServer::start(&arms[i].command, ports[i], plan, group.as_ref()) {
            Ok(r) => lives[i].server = Some(r),
            Err(e) => lives[i].start_error = Some(format!("{e:#}")),
        }
    }
    for live in lives.iter_mut() {
        if let Some(server) = &mut live.server {
            if let Err(e) = server.wait_listening(s.ready_timeout) {
                live.start_error = Some(format!("{e:#}"));
                server.stop(s.stop_grace)?;
                live.server = None;
            }
        }
    }
    let live: Vec<usize> = (0..n).filter(|&i| lives[i].server.is_some()).collect();
    let failed = |i: usize, lives: &[Live]| {
        if let Some(d) = &dropped[i] {
            return d.measurement();
        }
        failed_start(
            lives[i]
                .start_error
                .clone()
                .unwrap_or_else(|| "the server did not start".into()),
            &s.gate,
        )
    };
    if live.is_empty() {
        let trials = (0..n)
            .map(|i| (0..windows).map(|_| failed(i, &lives)).collect())
            .collect();
        return Ok((trials, vec![vec![]; windows]));
    }

    let load = LoadGen::start(s.load_spec(&ports).for_live(live.len()))?;
    load.set_live(&lives.iter().map(|l| l.server.is_some()).collect::<Vec<_>>());
    let slice = s.duet.slice;
    // Warm-up: every live arm takes the load in turn, nothing is scored.
    let slices_in =
        |length: Duration| (length.as_nanos() / slice.as_nanos().max(1)).max(1) as usize;
    let warm_order = slice_sequence(&live, seed, epoch, usize::MAX, slices_in(s.warmup));
    drive(
        s.duet.shared,
        &load,
        &warm_order,
        slice,
        s.warmup,
        &mut lives,
    )?;
    let quiet = s.connection_timeout + Duration::from_secs(1);
    load.quiesce(quiet);
    load.set_measuring(true);

    let mut trials: Vec<Vec<Measurement>> = vec![Vec::with_capacity(windows); n];
    let mut evidence: Vec<GateEvidence> = vec![GateEvidence::default(); n];
    let mut orders = Vec::with_capacity(windows);
    let mut m0: Vec<Option<MeterReading>> =
        lives.iter_mut().map(Live::read).collect::<Result<_>>()?;
    // Window 0's gate counts from the epoch's start: warm-up failures count.
    let mut gate_from: Vec<LoadSnapshot> = vec![LoadSnapshot::default(); n];
    let mut l0: Vec<LoadSnapshot> = (0..n).map(|i| load.snapshot(i)).collect();
    let mut cpu0 = own_cpu();
    // The core's idle time is read with the instant it covers up to.
    let mut idle0 = (Instant::now(), procfs::cpu_idle_us(plan.sut_core));
    let mut ballast0 = ballast_ns();
    for w in 0..windows {
        load.resume();
        on_window(w);
        let order = slice_sequence(&live, seed, epoch, w, slices_in(s.duet.window));
        let t0 = Instant::now();
        drive(
            s.duet.shared,
            &load,
            &order,
            slice,
            s.duet.window,
            &mut lives,
        )?;
        // Nothing straddles the boundary: every connection of the window
        // finishes in it, and the drain's idle time is part of the window.
        load.quiesce(quiet);
        // Every client is done: a server still holding connections now
        // deferred their teardown out of the window.
        let held: Vec<u64> = lives
            .iter()
            .map(|l| {
                l.server
                    .as_ref()
                    .map_or(0, |s| s.held_connections(CLOSE_WAIT))
            })
            .collect();
        let elapsed = t0.elapsed();
        let cpu1 = own_cpu();
        let idle1 = (Instant::now(), procfs::cpu_idle_us(plan.sut_core));
        let ballast1 = ballast_ns();
        let m1: Vec<Option<MeterReading>> =
            lives.iter_mut().map(Live::read).collect::<Result<_>>()?;
        let on_sut: u64 = m0
            .iter()
            .zip(&m1)
            .filter_map(|(a, b)| Some(b.as_ref()?.delta(a.as_ref()?)))
            .map(|d| d.on_sut_ns())
            .sum::<u64>()
            + ballast1.saturating_sub(ballast0);
        let l1: Vec<LoadSnapshot> = (0..n).map(|i| load.snapshot(i)).collect();
        if w + 1 == windows {
            load.set_measuring(false);
        }
        let window = Window {
            elapsed,
            generator_cpu_s: (cpu1 - cpu0).as_secs_f64(),
            live_arms: live.len(),
            shared: s.duet.shared,
            sut_unaccounted: unaccounted(
                idle1.0 - idle0.0,
                idle1.1.zip(idle0.1).map(|(b, a)| b.saturating_sub(a)),
                on_sut,
            ),
        };
        for i in 0..n {
            let (Some(a), Some(b)) = (&m0[i], &m1[i]) else {
                trials[i].push(failed(i, &lives));
                continue;
            };
            let meter = b.delta(a);
            let spanned = l1[i].delta(&gate_from[i]);
            evidence[i] = GateEvidence {
                attempts: spanned.attempts,
                completed: spanned.completed,
                failures: spanned.failures,
                window_completed: l1[i].completed - l0[i].completed,
                alive: lives[i].alive,
                off_core_ns: meter.off_core_ns,
                held_connections: held[i],
                ..Default::default()
            };
            trials[i].push(window.measurement(meter, &evidence[i], s));
        }
        orders.push(order);
        m0 = m1;
        gate_from = l1.clone();
        l0 = l1;
        cpu0 = cpu1;
        idle0 = idle1;
        ballast0 = ballast1;
    }
    // The drain: every connection started is judged, and counts against the
    // last window's gate of its arm. Latency is per epoch.
    let totals = load.finish();
    for i in 0..n {
        let Some(server) = lives[i].server.as_mut() else {
            continue;
        };
        lives[i].alive &= server.alive();
        let t = &totals[i];
        let drained = t.snapshot.delta(&gate_from[i]);
        let e = &mut evidence[i];
        e.attempts += drained.attempts;
        e.completed += drained.completed;
        for (f, d) in e.failures.iter_mut().zip(drained.failures) {
            *f += d;
        }
        e.failures[Failure::Timeout.index()] += t.stuck_clients as u64;
        e.alive = lives[i].alive;
        let last = trials[i].last_mut().expect("at least one window");
        last.gate = gate::check(e, &s.gate);
        if !last.gate.passed {
            last.cost_per_connection = None;
        }
        let latency = Latency::of(&t.latency_us);
        for m in trials[i].iter_mut() {
            m.latency_us = latency;
        }
    }
    for live in lives.iter_mut() {
        if let Some(server) = &mut live.server {
            server.stop(s.stop_grace)?;
        }
    }
    Ok((trials, orders))
}

/// What every arm's measurement of one window shares.
struct Window {
    elapsed: Duration,
    generator_cpu_s: f64,
    live_arms: usize,
    /// Every arm held its share of the clients all the window.
    shared: bool,
    sut_unaccounted: Option<f64>,
}

impl Window {
    fn measurement(&self, meter: MeterReading, e: &GateEvidence, s: &TrialSettings) -> Measurement {
        let gate = gate::check(e, &s.gate);
        let done = e.window_completed;
        let per_conn = |x: u64| (done > 0).then(|| x as f64 / done as f64);
        let window_s = self.elapsed.as_secs_f64();
        // In slices, each arm held the load for its share of the window;
        // shared, every arm held its share of the clients all the window.
        let active_s = if self.shared {
            window_s
        } else {
            window_s / self.live_arms.max(1) as f64
        };
        let load_cores = s.load_cores.len().max(1) as f64;
        Measurement {
            cost_per_connection: if gate.passed {
                per_conn(meter.primary)
            } else {
                None
            },
            gate,
            window_completed: done,
            window_s,
            throughput_cps: done as f64 / active_s,
            latency_us: Latency::default(),
            syscalls_per_connection: meter.syscalls.and_then(per_conn),
            context_switches_per_connection: per_conn(meter.context_switches),
            sut_busy: meter.task_clock_ns as f64 / (active_s * 1e9),
            generator_busy: self.generator_cpu_s / window_s / load_cores,
            sut_unaccounted: self.sut_unaccounted,
            meter_delta: meter,
            slice_costs: vec![],
            ..Default::default()
        }
        .with_saturation(&meter, self.elapsed, s)
    }
}

/// Moves the load between the arms of `order` in slices of `slice` for
/// `length`, watching every live server; an interrupt ends the epoch (the
/// servers are killed on drop).
fn drive(
    shared: bool,
    load: &LoadGen,
    order: &[usize],
    slice: Duration,
    length: Duration,
    lives: &mut [Live],
) -> Result<()> {
    let t0 = Instant::now();
    let mut k = 0;
    while t0.elapsed() < length {
        interrupt::check()?;
        load.set_active(if shared {
            EVERY_TARGET
        } else {
            order[k % order.len()]
        });
        let until = (slice * (k as u32 + 1)).min(length);
        std::thread::sleep(until.saturating_sub(t0.elapsed()));
        let mut died = false;
        for live in lives.iter_mut() {
            if let Some(server) = &mut live.server {
                died |= live.alive && !server.alive();
                live.alive &= server.alive();
            }
        }
        if died {
            // Its clients would spin on refused connections: they serve
            // the living arms instead.
            load.set_live(
                &lives
                    .iter()
                    .map(|l| l.server.is_some() && l.alive)
                    .collect::<Vec<_>>(),
            );
        }
        k += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_pair_runs_forwards_then_backwards() {
        let seq = slice_sequence(&[0, 1, 2], 7, 0, 0, 12);
        assert_eq!(seq.len(), 12);
        for pair in seq.chunks(6) {
            let (a, b) = pair.split_at(3);
            let back: Vec<usize> = b.iter().rev().copied().collect();
            assert_eq!(a, &back[..]);
            let mut sorted = a.to_vec();
            sorted.sort();
            assert_eq!(sorted, vec![0, 1, 2]);
        }
    }

    #[test]
    fn predecessors_are_balanced_over_a_window() {
        // Over a 1 s window of 25 ms slices with three arms, no arm follows
        // another much more often than the others do.
        let seq = slice_sequence(&[0, 1, 2], 3, 1, 2, 4000);
        let mut follows = [[0usize; 3]; 3];
        for w in seq.windows(2) {
            if w[0] != w[1] {
                follows[w[1]][w[0]] += 1;
            }
        }
        let counts: Vec<usize> = follows
            .iter()
            .flatten()
            .copied()
            .filter(|&c| c > 0)
            .collect();
        let (lo, hi) = (*counts.iter().min().unwrap(), *counts.iter().max().unwrap());
        assert_eq!(counts.len(), 6);
        assert!((hi as f64) < 1.15 * lo as f64, "{follows:?}");
    }

    #[test]
    fn sequences_are_seeded_over_the_live_arms() {
        let live = [0, 2, 3];
        let o = slice_sequence(&live, 7, 1, 4, 30);
        assert!(o.iter().all(|a| live.contains(a)));
        assert_eq!(o, slice_sequence(&live, 7, 1, 4, 30));
        assert_ne!(o, slice_sequence(&live, 7, 1, 5, 30));
    }
}
