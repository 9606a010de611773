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

use crate::bench::host::ballast::{self, Ballast};
use crate::bench::host::trial::{own_cpu, Measurement, TrialSettings};
use crate::bench::load::loadgen::{LoadGen, LoadSnapshot, EVERY_TARGET};
use crate::bench::meters::meter::{MeterPlan, MeterReading};
use crate::bench::samples::Dropped;
use crate::bench::samples::{verify, Samples, Step};
use crate::bench::servers::arm::Arm;
use crate::bench::servers::cgroup::RationGroup;
use crate::bench::servers::launch::{RunningServer, CLOSE_WAIT};
use crate::bench::servers::procfs;
use crate::interrupt;

mod servers;
mod window;

use servers::{
    await_listening, live_arms, note_deaths, start_arms, started, takes_clients, unmeasured, Live,
};
use window::{window_evidence, window_meter, Mark, Tally, Window};

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
    // Declared before the servers, so it is removed after them.
    // One allotment per arm that runs: a dropped arm's would go to the rest.
    let running = dropped.iter().filter(|d| d.is_none()).count();
    let group = s
        .ration
        .map(|a| RationGroup::create(a, running))
        .transpose()?;
    let ballast = Ballast::start_if(s.ration.is_some() && s.saturation.ballast, plan.sut_core)?;
    let (mut lives, ports) = start_arms(arms, dropped, epoch, plan, group.as_ref())?;
    await_listening(&mut lives, s)?;
    let live = live_arms(&started(&lives));
    if live.is_empty() {
        let trials = (0..arms.len())
            .map(|i| vec![unmeasured(dropped[i].as_ref(), &lives[i], &s.gate); windows])
            .collect();
        return Ok((trials, vec![vec![]; windows]));
    }
    let mut e = Epoch {
        load: LoadGen::start(s.load_spec(&addresses(arms, &ports)).for_live(live.len()))?,
        alive: vec![true; lives.len()],
        lives,
        live,
        dropped,
        ballast: &ballast,
        plan,
        s,
        seed,
        epoch,
    };
    e.deal_clients();
    e.warm_up()?;
    let mut tally = Tally::new(arms.len(), windows);
    let mut from = e.first_mark()?;
    for w in 0..windows {
        e.load.resume();
        on_window(w);
        from = e.window(w, w + 1 == windows, &from, &mut tally)?;
    }
    e.drain(&mut tally)?;
    Ok((tally.trials, tally.orders))
}

/// Where the load reaches each arm's server.
fn addresses(arms: &[Arm], ports: &[u16]) -> Vec<std::net::SocketAddr> {
    arms.iter()
        .zip(ports)
        .map(|(a, &p)| a.command.address(p))
        .collect()
}

/// How many slices of `slice` fill `length`: at least one.
fn slices_in(length: Duration, slice: Duration) -> usize {
    (length.as_nanos() / slice.as_nanos().max(1)).max(1) as usize
}

/// An epoch whose servers are up, with its generator.
struct Epoch<'a> {
    /// Before `lives`, so the generator is dropped before the servers.
    load: LoadGen,
    lives: Vec<Live>,
    /// By arm: whether its server has lived all the epoch so far.
    alive: Vec<bool>,
    /// The arms whose server listened: those the load moves between.
    live: Vec<usize>,
    dropped: &'a [Option<Dropped>],
    ballast: &'a Option<Ballast>,
    plan: &'a MeterPlan,
    s: &'a TrialSettings,
    seed: u64,
    epoch: usize,
}

impl Epoch<'_> {
    fn deal_clients(&self) {
        let to = takes_clients(&started(&self.lives), &self.alive);
        self.load.set_live(&to);
    }

    /// Every live arm takes the load in turn, nothing is scored; then the
    /// generator drains, so no warm-up connection reaches into window 0.
    fn warm_up(&mut self) -> Result<()> {
        let s = self.s;
        let slices = slices_in(s.warmup, s.duet.slice);
        let order = slice_sequence(&self.live, self.seed, self.epoch, usize::MAX, slices);
        self.drive(&order, s.warmup)?;
        self.load.quiesce(self.quiet());
        self.load.set_measuring(true);
        Ok(())
    }

    /// How long a drain may take: a connection's timeout, and a second.
    fn quiet(&self) -> Duration {
        self.s.connection_timeout + Duration::from_secs(1)
    }

    fn first_mark(&mut self) -> Result<Mark> {
        Ok(Mark {
            meters: self.read_meters()?,
            load: self.snapshots(),
            cpu: own_cpu(),
            idle: self.core_idle(),
            ballast_ns: ballast::used_ns(self.ballast),
        })
    }

    /// At a window's end the clocks are read first, nearest the elapsed
    /// time they share.
    fn end_mark(&mut self) -> Result<Mark> {
        Ok(Mark {
            cpu: own_cpu(),
            idle: self.core_idle(),
            ballast_ns: ballast::used_ns(self.ballast),
            meters: self.read_meters()?,
            load: self.snapshots(),
        })
    }

    fn read_meters(&mut self) -> Result<Vec<Option<MeterReading>>> {
        self.lives.iter_mut().map(Live::read).collect()
    }

    fn snapshots(&self) -> Vec<LoadSnapshot> {
        (0..self.lives.len())
            .map(|i| self.load.snapshot(i))
            .collect()
    }

    fn core_idle(&self) -> (Instant, Option<u64>) {
        (Instant::now(), procfs::cpu_idle_us(self.plan.sut_core))
    }

    /// Connections each server still holds: read once every client is
    /// done, they are teardown it deferred out of the window.
    fn held(&self) -> Vec<u64> {
        let held = |l: &Live| {
            l.server
                .as_ref()
                .map_or(0, |s| s.held_connections(CLOSE_WAIT))
        };
        self.lives.iter().map(held).collect()
    }

    /// Runs window `w` and scores every arm's sample of it into `tally`;
    /// returns the mark it ended at, where the next window starts.
    fn window(&mut self, w: usize, last: bool, from: &Mark, tally: &mut Tally) -> Result<Mark> {
        let s = self.s;
        let slices = slices_in(s.duet.window, s.duet.slice);
        let order = slice_sequence(&self.live, self.seed, self.epoch, w, slices);
        let t0 = Instant::now();
        self.drive(&order, s.duet.window)?;
        // Nothing straddles the boundary: every connection of the window
        // finishes in it, and the drain's idle time is part of the window.
        self.load.quiesce(self.quiet());
        let held = self.held();
        let elapsed = t0.elapsed();
        let to = self.end_mark()?;
        if last {
            self.load.set_measuring(false);
        }
        let window = Window::between(from, &to, elapsed, self.live.len(), s.duet.shared);
        for (i, &held) in held.iter().enumerate() {
            let Some(meter) = window_meter(&from.meters[i], &to.meters[i]) else {
                let sample = unmeasured(self.dropped[i].as_ref(), &self.lives[i], &s.gate);
                tally.trials[i].push(sample);
                continue;
            };
            let (start, end) = (&from.load[i], &to.load[i]);
            let e = window_evidence(&tally.gate_from[i], start, end, self.alive[i], &meter, held);
            tally.trials[i].push(window.measurement(meter, &e, s));
            tally.evidence[i] = e;
        }
        tally.orders.push(order);
        tally.gate_from = to.load.clone();
        Ok(to)
    }

    /// Moves the load between the arms of `order` in slices for `length`,
    /// watching every live server; an interrupt ends the epoch (the
    /// servers are killed on drop).
    fn drive(&mut self, order: &[usize], length: Duration) -> Result<()> {
        let slice = self.s.duet.slice;
        let t0 = Instant::now();
        let mut k = 0;
        while t0.elapsed() < length {
            interrupt::check()?;
            self.load.set_active(if self.s.duet.shared {
                EVERY_TARGET
            } else {
                order[k % order.len()]
            });
            let until = (slice * (k as u32 + 1)).min(length);
            std::thread::sleep(until.saturating_sub(t0.elapsed()));
            let now: Vec<Option<bool>> = self
                .lives
                .iter_mut()
                .map(|l| l.server.as_mut().map(RunningServer::alive))
                .collect();
            if note_deaths(&mut self.alive, &now) {
                self.deal_clients();
            }
            k += 1;
        }
        Ok(())
    }

    /// The drain: every connection started is judged, and counts against
    /// the last window's gate of its arm. Then the servers are stopped.
    fn drain(self, tally: &mut Tally) -> Result<()> {
        let Epoch {
            load,
            mut lives,
            mut alive,
            s,
            ..
        } = self;
        let totals = load.finish();
        for (i, live) in lives.iter_mut().enumerate() {
            let Some(server) = live.server.as_mut() else {
                continue;
            };
            alive[i] &= server.alive();
            tally.close(i, &totals[i], alive[i], &s.gate);
        }
        for live in lives.iter_mut() {
            if let Some(server) = &mut live.server {
                server.stop(s.stop_grace)?;
            }
        }
        Ok(())
    }
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
    fn a_length_holds_whole_slices_and_at_least_one() {
        let ms = Duration::from_millis;
        assert_eq!(slices_in(ms(1000), ms(25)), 40);
        assert_eq!(slices_in(ms(1010), ms(25)), 40);
        assert_eq!(slices_in(ms(10), ms(25)), 1);
        assert_eq!(slices_in(ms(10), Duration::ZERO), 10_000_000);
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
