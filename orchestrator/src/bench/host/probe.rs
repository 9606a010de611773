//! The probe that sizes the saturated regime's allotment (see
//! [`crate::bench::host::ration`]): every arm at once, each rationed to the small
//! [`ration::PROBE`] allotment and holding its share of the clients, for a
//! fraction of a second. It reads each arm's busy cost per connection and
//! how busy the generator was for the connections it drove.

use anyhow::Result;
use std::time::{Duration, Instant};

use crate::bench::config::Schedule;
use crate::bench::host::ballast::Ballast;
use crate::bench::host::ration;
use crate::bench::host::trial::{failed_start, own_cpu, TrialSettings};
use crate::bench::load::contract::Failure;
use crate::bench::load::gate::GateConfig;
use crate::bench::load::gate::{self, GateEvidence, GateResult};
use crate::bench::load::loadgen::{LoadGen, EVERY_TARGET};
use crate::bench::meters::meter::MeterPlan;
use crate::bench::regime::{Regime, RegimeRecord};
use crate::bench::samples::{Dropped, Stage};
use crate::bench::servers::arm::Arm;
use crate::bench::servers::cgroup::Allotment;
use crate::bench::servers::cgroup::{containment, RationGroup};
use crate::bench::servers::launch::RunningServer;
use crate::bench::servers::port::free_port;
use crate::interrupt;

/// The regime `arms` will be measured in under `s`: the idle regime where
/// it is asked for or rationing cannot be set up (with the reason), else
/// the saturated regime with the allotment the probe sized. Arms already
/// `dropped` are left out; an arm that breaks the contract in the probe is
/// dropped too, and the rest probed again without it, so the allotment is
/// sized as if it had never been there.
pub fn regime(
    arms: &[Arm],
    dropped: &mut [Option<Dropped>],
    plan: &MeterPlan,
    s: &TrialSettings,
) -> Result<RegimeRecord> {
    if s.saturation.regime == Regime::Idle {
        return Ok(RegimeRecord::idle(
            "idle regime chosen (saturation.regime = \"idle\")".into(),
        ));
    }
    if let Some(why) = containment().cannot_ration() {
        return Ok(RegimeRecord::idle(format!(
            "measured in the idle regime: {why}"
        )));
    }
    loop {
        let probe = probe_once(arms, dropped, plan, s)?;
        let mut more = false;
        for (i, verdict) in probe.verdicts.iter().enumerate() {
            if let Some(gate) = verdict.as_ref().filter(|g| !g.passed) {
                dropped[i] = Some(Dropped {
                    stage: Stage::Probe,
                    gate: gate.clone(),
                });
                more = true;
            }
        }
        if !more {
            return Ok(probe.record(s));
        }
    }
}

/// What one probe read.
struct Probe {
    /// Busy ns per connection of each arm; None for an arm that served
    /// nothing in the reading (or was not probed).
    costs: Vec<Option<f64>>,
    /// Connections completed over the reading, by every arm.
    total: u64,
    elapsed: f64,
    generator_busy: f64,
    warmup: Duration,
    turned_over: bool,
    /// The gate's verdict on each probed arm over the whole probe (no
    /// least count of connections); None for an arm not probed.
    verdicts: Vec<Option<GateResult>>,
}

/// Probes every arm not `dropped`, all at once at the [`ration::PROBE`]
/// allotment.
fn probe_once(
    arms: &[Arm],
    dropped: &[Option<Dropped>],
    plan: &MeterPlan,
    s: &TrialSettings,
) -> Result<Probe> {
    // One allotment per arm that runs: a dropped arm's would go to the rest.
    let probed = (0..arms.len())
        .filter(|&i| dropped.get(i).is_none_or(Option::is_none))
        .count();
    let group = RationGroup::create(ration::PROBE, probed)?;
    let _ballast = Ballast::start_if(s.saturation.ballast, plan.sut_core)?;
    let rules = GateConfig {
        min_completed: 0,
        ..s.gate.clone()
    };
    let mut servers: Vec<Option<RunningServer>> = Vec::with_capacity(arms.len());
    let mut verdicts: Vec<Option<GateResult>> = vec![None; arms.len()];
    let mut ports = Vec::with_capacity(arms.len());
    for (i, arm) in arms.iter().enumerate() {
        let port = free_port()?;
        ports.push(arm.command.address(port));
        if dropped.get(i).is_some_and(Option::is_some) {
            servers.push(None);
            continue;
        }
        let started = RunningServer::start(&arm.command, port, plan, Some(&group))
            .and_then(|mut r| r.wait_listening(s.ready_timeout).map(|_| r));
        match started {
            Ok(r) => servers.push(Some(r)),
            Err(e) => {
                verdicts[i] = Some(failed_start(format!("{e:#}"), &rules).gate);
                servers.push(None);
            }
        }
    }
    let live: Vec<bool> = servers.iter().map(Option::is_some).collect();
    let live_arms = live.iter().filter(|&&l| l).count();
    let load = LoadGen::start(s.load_spec(&ports).for_live(live_arms))?;
    load.set_live(&live);
    load.set_active(EVERY_TARGET);
    let mut alive = live.clone();
    let warm = Instant::now();
    let turned_over = loop {
        std::thread::sleep(Duration::from_millis(20));
        interrupt::check()?;
        watch(&mut servers, &mut alive, &load);
        let completed: Vec<Option<u64>> = (0..arms.len())
            .map(|i| servers[i].as_ref().map(|_| load.snapshot(i).completed))
            .collect();
        if let Some(turned_over) = warmed(&completed, s.connections as u64, warm.elapsed()) {
            break turned_over;
        }
    };
    let warmup = warm.elapsed();
    let read = |servers: &mut Vec<Option<RunningServer>>| -> Vec<Option<u64>> {
        servers
            .iter_mut()
            .map(|r| Some(r.as_mut()?.read().ok()?.on_sut_ns()))
            .collect()
    };
    let (t0, cpu0, m0) = (Instant::now(), own_cpu(), read(&mut servers));
    let l0: Vec<u64> = (0..arms.len())
        .map(|i| load.snapshot(i).completed)
        .collect();
    std::thread::sleep(Duration::from_millis(s.saturation.probe_ms));
    watch(&mut servers, &mut alive, &load);
    let (m1, cpu1) = (read(&mut servers), own_cpu());
    let l1: Vec<u64> = (0..arms.len())
        .map(|i| load.snapshot(i).completed)
        .collect();
    let elapsed = t0.elapsed().as_secs_f64();
    let totals = load.finish();
    for (i, server) in servers.iter_mut().enumerate() {
        let Some(server) = server else { continue };
        let evidence = GateEvidence::from_totals(&totals[i], alive[i] && server.alive());
        verdicts[i] = Some(gate::check(&unhurried(evidence), &rules));
        server.stop(s.stop_grace)?;
    }
    interrupt::check()?;
    let done: Vec<u64> = l1.iter().zip(&l0).map(|(b, a)| b - a).collect();
    Ok(Probe {
        costs: (0..arms.len())
            .map(|i| {
                let cpu = m1[i]? - m0[i]?;
                (done[i] > 0).then(|| cpu as f64 / done[i] as f64)
            })
            .collect(),
        total: done.iter().sum(),
        elapsed,
        generator_busy: (cpu1 - cpu0).as_secs_f64() / elapsed / s.load_cores.len().max(1) as f64,
        warmup,
        turned_over,
        verdicts,
    })
}

/// The probe's evidence without its timeouts. The probe starves every arm
/// by design (a twentieth of the core, 256 clients each), so an honest
/// server of long connections keeps its clients waiting past their
/// deadline: one of 500 us a connection served 198 of 915 in a probe, the
/// rest timed out, and a keep-alive server of eight requests a connection
/// was dropped on a host whose probe ran slow (CI, 2026-12-07). A server
/// that never answers is still caught: the trials, at the allotment the
/// probe sizes, judge every connection and its timeouts.
fn unhurried(mut evidence: GateEvidence) -> GateEvidence {
    evidence.failures[Failure::Timeout.index()] = 0;
    evidence
}

/// Notes which probed servers have exited since the last look, and sends
/// their clients to the living ones.
fn watch(servers: &mut [Option<RunningServer>], alive: &mut [bool], load: &LoadGen) {
    let mut died = false;
    for (a, server) in alive.iter_mut().zip(servers.iter_mut()) {
        if let Some(server) = server {
            died |= *a && !server.alive();
            *a &= server.alive();
        }
    }
    if died {
        load.set_live(alive);
    }
}

impl Probe {
    /// The saturated regime this probe sizes.
    fn record(self, s: &TrialSettings) -> RegimeRecord {
        let warmup_ms = Some(self.warmup.as_millis() as u64);
        if self.costs.iter().all(Option::is_none) || self.total == 0 || self.generator_busy <= 0.0 {
            return RegimeRecord {
                regime: Regime::Saturated,
                allotment: Some(ration::PROBE),
                alone: Vec::new(),
                probe_costs: self.costs,
                generator_capacity_cps: None,
                probe_warmup_ms: warmup_ms,
                backlog: None,
                live: None,
                warning: Some(
                    "the probe served no connection: every arm keeps the probe's own allotment"
                        .into(),
                ),
            };
        }
        let capacity = self.total as f64 / self.elapsed / self.generator_busy;
        let window = match s.schedule {
            Schedule::Duet => s.duet.window,
            Schedule::Blocks => s.window,
        };
        let (allotment, warning, alone) = allot(&self.costs, capacity, window, s);
        let start_up = (!self.turned_over).then(|| {
            format!(
                "after {:.1} s of probing an arm had not yet served its {} connections {WARM_TURNOVERS} times over: \
                 the probe may have read its start-up, not its steady cost",
                self.warmup.as_secs_f64(),
                s.connections
            )
        });
        RegimeRecord {
            regime: Regime::Saturated,
            allotment: Some(allotment),
            alone,
            probe_costs: self.costs,
            generator_capacity_cps: Some(capacity),
            probe_warmup_ms: warmup_ms,
            backlog: None,
            live: None,
            warning: match (start_up, warning) {
                (Some(a), Some(b)) => Some(format!("{a}; {b}")),
                (a, b) => a.or(b),
            },
        }
    }
}

/// The least the probe warms up before it reads, and the most it waits for
/// every arm to have turned its backlog over.
const PROBE_WARMUP: Duration = Duration::from_millis(300);
const PROBE_WARMUP_MAX: Duration = Duration::from_secs(5);
/// How many times over each arm serves its backlog before the probe reads.
/// A server's first connections cost many times its steady ones (its first
/// burst of arrivals, its per-connection state allocated and faulted in),
/// and on the probe's small allotment they last: with 512 connections at
/// each of three servers a fixed 300 ms warm-up read costs 5 to 12 times
/// the steady ones and a generator capacity of 207-315 conn/s against
/// 43,000, so the measurement was sized far too large and ran unsaturated
/// (0.5-0.8 context switches per connection). Twice over still read the Go
/// control at up to 1.8 times its steady cost and sized one measurement in
/// five with the generator 48% busy against its 65% target; four times
/// over, 0.59-0.62 in three, for about 0.15 s more per probe at 256.
const WARM_TURNOVERS: u64 = 4;

/// Whether the probe may start reading, after `waited`, with each arm's
/// connections completed so far (None: an arm whose server did not start)
/// and `backlog` connections at each: `Some(true)` once every arm has served
/// its backlog [`WARM_TURNOVERS`] times over, `Some(false)` when
/// [`PROBE_WARMUP_MAX`] passed first.
fn warmed(completed: &[Option<u64>], backlog: u64, waited: Duration) -> Option<bool> {
    let turned_over = completed
        .iter()
        .flatten()
        .all(|&c| c >= WARM_TURNOVERS * backlog);
    match (
        turned_over && waited >= PROBE_WARMUP,
        waited >= PROBE_WARMUP_MAX,
    ) {
        (true, _) => Some(true),
        (false, true) => Some(false),
        (false, false) => None,
    }
}

/// How far apart in time the probes are that [`settle`] compares.
const SETTLE_SPAN: Duration = Duration::from_secs(10);
/// Probes of [`settle`] per span, after the first.
const SETTLE_PROBES: u32 = 2;
/// Probes [`settle`] takes on a machine already settled: one at each end
/// of the span and those between.
pub const SETTLED_AT_ONCE: usize = SETTLE_PROBES as usize + 1;
/// How much the generator's capacity may grow over the span for the
/// machine to count as settled: two probes of a settled machine differ by
/// up to about 15% (23-36k conn/s across one run's attempts).
const SETTLE_GROWTH: f64 = 0.2;

/// Whether `readings` (when, capacity in conn/s, whether the probe had to
/// raise the share for the gate) show a settled machine: the last probe
/// needed no raise, and over the last [`SETTLE_SPAN`] the capacity grew by
/// at most [`SETTLE_GROWTH`]. A recovering machine climbs slowly (213,
/// 11,967 and 16,292 conn/s twenty seconds apart, here, after a 1.2 GB
/// copy), so two probes in a row agree long before it has recovered; a
/// span catches most of the climb.
pub fn settled(readings: &[(Duration, f64, bool)]) -> bool {
    let Some(&(last_at, last, raised)) = readings.last() else {
        return false;
    };
    let earlier = readings
        .iter()
        .rev()
        .find(|(at, _, _)| last_at.saturating_sub(*at) >= SETTLE_SPAN);
    match earlier {
        Some(&(_, first, _)) => !raised && last <= first * (1.0 + SETTLE_GROWTH),
        None => false,
    }
}

/// Probes `arms` until the generator's capacity has stopped climbing
/// ([`settled`]), for at most `within`, and returns the last probe's regime
/// with every capacity read. A busy spell of the host (a large file copy
/// here: a build writing its target directory, say) leaves the loopback
/// path slow for a minute or two; an A/A check measured in it saw its
/// gates fail and its spread doubled, and the run refused.
pub fn settle(
    arms: &[Arm],
    dropped: &mut [Option<Dropped>],
    plan: &MeterPlan,
    s: &TrialSettings,
    within: Duration,
) -> Result<(RegimeRecord, Vec<f64>)> {
    let start = Instant::now();
    let mut readings: Vec<(Duration, f64, bool)> = Vec::new();
    loop {
        let record = regime(arms, dropped, plan, s)?;
        let Some(capacity) = record.generator_capacity_cps else {
            return Ok((record, Vec::new()));
        };
        readings.push((start.elapsed(), capacity, record.warning.is_some()));
        if settled(&readings) || start.elapsed() >= within {
            return Ok((record, readings.iter().map(|r| r.1).collect()));
        }
        std::thread::sleep(SETTLE_SPAN / SETTLE_PROBES);
        interrupt::check()?;
    }
}

/// The allotment the arms of busy costs `costs` (None: an arm that served
/// nothing in the probe) share in a duet, why it may not saturate them, and
/// under the blocks schedule each arm's own.
///
/// Alone, each arm gets the share at which it by itself drives its part of
/// the generator's target: the rate it is served at in a duet of the same
/// arms. Not equal shares: a costlier arm would then run beside an idler
/// generator and pay more to wake it (sending the response wakes the
/// client). Nor the whole target: served at n times its duet rate, an arm's
/// cost moved with the rate, the Go control's most (docs/referee.md, "The
/// schedules").
fn allot(
    costs: &[Option<f64>],
    capacity: f64,
    window: Duration,
    s: &TrialSettings,
) -> (Allotment, Option<String>, Vec<Allotment>) {
    let target = s.saturation.generator_target;
    let known: Vec<f64> = costs.iter().flatten().copied().collect();
    let (allotment, warning) = fit(&known, capacity, target, window, s);
    let alone = match s.schedule {
        Schedule::Duet => Vec::new(),
        Schedule::Blocks => {
            let part = target / costs.len() as f64;
            costs
                .iter()
                .map(|c| c.map_or(allotment, |c| fit(&[c], capacity, part, window, s).0))
                .collect()
        }
    };
    (allotment, warning, alone)
}

/// The allotment that keeps arms of busy costs `costs` (rationed alike, in
/// the same windows) saturated under a generator of `capacity` conn/s that
/// they drive to `target` of it, and gives the gate its connections per
/// `window` from the costliest of them.
/// A probe that still reads a tiny capacity (a host in a slow spell, see
/// [`settle`]) would size a share too small for the gate; the share is then
/// raised to what the gate needs, and that is said.
fn fit(
    costs: &[f64],
    capacity: f64,
    target: f64,
    window: Duration,
    s: &TrialSettings,
) -> (Allotment, Option<String>) {
    let (allotment, warning) = ration::size(costs, capacity, s.connections as f64, target);
    let costliest = costs.iter().copied().fold(0.0, f64::max);
    let needed = 1.5 * s.gate.min_completed as f64 * costliest / window.as_nanos() as f64;
    if allotment.share() >= needed {
        return (allotment, warning);
    }
    let raised = ration::with_share(allotment, needed.min(0.9 / costs.len().max(1) as f64));
    let why = format!(
        "the probe sized {:.2}% of the core per arm (generator capacity {capacity:.0} conn/s), too little for \
         gate.min_completed = {} from the costliest arm in a window; raised to {:.2}%: the generator may now be the limit",
        allotment.share() * 100.0,
        s.gate.min_completed,
        raised.share() * 100.0
    );
    (raised, Some(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_counts_as_settled_once_its_generator_stops_climbing() {
        let at = |s: u64, c: f64| (Duration::from_secs(s), c, false);
        // One probe, or probes closer than a span: not yet.
        assert!(!settled(&[at(0, 30_000.0)]));
        assert!(!settled(&[at(0, 30_000.0), at(5, 30_000.0)]));
        // Steady within the noise of a probe over a span.
        assert!(settled(&[
            at(0, 30_000.0),
            at(5, 26_000.0),
            at(10, 33_000.0)
        ]));
        // The climb measured after a large copy: 213, then about 12k and
        // 16k twenty seconds apart.
        assert!(!settled(&[at(0, 213.0), at(5, 6_000.0), at(10, 12_000.0)]));
        assert!(!settled(&[
            at(0, 9_000.0),
            at(5, 10_500.0),
            at(10, 12_000.0)
        ]));
        // A probe that had to raise the share for the gate is not settled.
        let mut raised = vec![at(0, 30_000.0), at(10, 30_000.0)];
        raised[1].2 = true;
        assert!(!settled(&raised));
    }

    #[test]
    fn the_probe_reads_once_every_live_arm_has_served_its_backlog_four_times_over() {
        let ms = Duration::from_millis;
        // Never before the least warm-up, however fast the arms.
        assert_eq!(warmed(&[Some(5_000), Some(5_000)], 512, ms(100)), None);
        // One arm still in its start-up: wait.
        assert_eq!(warmed(&[Some(5_000), Some(1_100)], 512, ms(800)), None);
        assert_eq!(
            warmed(&[Some(5_000), Some(2_048)], 512, ms(800)),
            Some(true)
        );
        // An arm whose server never started does not hold the probe up.
        assert_eq!(warmed(&[Some(2_048), None], 512, ms(300)), Some(true));
        // Nor does one that never turns over, past the bound: said.
        assert_eq!(warmed(&[Some(2_048), Some(3)], 512, ms(5_000)), Some(false));
    }

    #[test]
    fn alone_each_arm_drives_its_part_of_the_target_as_it_would_in_a_duet() {
        let mut s = TrialSettings::defaults(vec![0]);
        let capacity = 30_000.0;
        let drives = |a: Allotment, cost: f64| a.share() * 1e9 / cost / capacity;
        let costs = [Some(7_000.0), Some(20_000.0), Some(12_000.0)];
        // Together, the same share for every arm: the arms drive the target.
        let (duet, _, alone) = allot(&costs, capacity, s.duet.window, &s);
        assert!(alone.is_empty());
        let together: f64 = costs.iter().flatten().map(|&c| drives(duet, c)).sum();
        assert!((together - 0.65).abs() < 0.01, "{duet:?}");
        // Alone, each drives a third of it, costly or cheap.
        s.schedule = Schedule::Blocks;
        let (_, _, alone) = allot(&costs, capacity, s.window, &s);
        for (a, c) in alone.iter().zip(costs.iter().flatten()) {
            assert!((drives(*a, *c) - 0.65 / 3.0).abs() < 0.005, "{c}: {a:?}");
        }
        // An arm the probe could not cost keeps the shared allotment.
        let (shared, _, alone) = allot(&[Some(7_000.0), None], capacity, s.window, &s);
        assert_eq!(alone[1], shared);
        assert!((drives(alone[0], 7_000.0) - 0.65 / 2.0).abs() < 0.005);
    }
}
