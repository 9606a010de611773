//! Endurance: one server process serves `gate.endurance_connections` on
//! the host at full speed, unmeasured and gated, before any arm is kept and
//! in `ratchet check`.
//!
//! A trial starts a fresh server and serves it a few thousand connections
//! (an emulated trial 1,280), so a server that aborts at its 3,000th, or
//! leaks a descriptor or a heap block with every connection, passes every
//! trial: the leak never gets to hurt. Here the load stops at checkpoints
//! (every connection under way completes, the server's closes land), and
//! what the server holds is read: its anonymous memory, its descriptors,
//! its sockets. The gate reads their growth, not the failure it would end
//! in, so a leak is caught long before it would exhaust anything.

use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

use crate::bench::host::trial::{self, TrialSettings};
use crate::bench::load::gate::{self, GateEvidence, GateReason, GateResult, Growth};
use crate::bench::load::loadgen::LoadGen;
use crate::bench::meters::meter::MeterPlan;
use crate::bench::servers::holdings;
use crate::bench::servers::launch::{RunningServer, ServerCommand, CLOSE_WAIT};
use crate::bench::servers::port::free_port;
use crate::interrupt;

/// Readings after the start: the first two are past the server's warm-up
/// (its pools and caches filled), the rest show whether it keeps growing.
const CHECKPOINTS: u64 = 10;

/// Growth is judged from the first checkpoint at this share of the run...
const SETTLED_SHARE: f64 = 0.2;
/// ...and only steady growth fails: the checkpoints after it in thirds,
/// the least of each third at least this much above the one before (a
/// pool that grew once is not a leak). 384 KiB between thirds 30,000
/// connections apart: 14 bytes a connection or more is caught.
const MIN_MEMORY_RISE_KIB: i64 = 384;
const MIN_HELD_RISE: i64 = 4;
/// Descriptors and sockets together past this share of the server's limit
/// on open files have run out, whatever the checkpoints say: a leak of
/// one per connection reaches a limit of 1,024 before the first checkpoint.
const NEAR_LIMIT: f64 = 0.9;

/// What the server held at one checkpoint, every connection before it
/// completed and none under way.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Footprint {
    /// Connections completed before it.
    pub connections: u64,
    pub anon_kib: u64,
    /// Open descriptors other than sockets.
    pub descriptors: u64,
    /// Sockets other than its listeners, io_uring direct descriptors
    /// included.
    pub sockets: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub descriptor_limit: Option<u64>,
}

/// An endurance run's record.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Endurance {
    /// Connections asked for, and completed.
    pub connections: u64,
    pub completed: u64,
    pub seconds: f64,
    pub footprints: Vec<Footprint>,
    pub gate: GateResult,
}

/// Serves `server` `s.gate.endurance_connections` connections in one
/// process; None when that is 0 (off).
pub fn run(
    server: &ServerCommand,
    plan: &MeterPlan,
    s: &TrialSettings,
) -> Result<Option<Endurance>> {
    let asked = s.gate.endurance_connections;
    if asked == 0 {
        return Ok(None);
    }
    let t0 = Instant::now();
    let port = free_port()?;
    let mut gate_cfg = s.gate.clone();
    gate_cfg.min_completed = asked;
    let failed_start = |message: String| Endurance {
        connections: asked,
        gate: trial::failed_start(message, &gate_cfg).gate,
        ..Default::default()
    };
    let mut running = match RunningServer::start(server, port, plan, None) {
        Ok(r) => r,
        Err(e) => return Ok(Some(failed_start(format!("{e:#}")))),
    };
    if let Err(e) = running.wait_listening(s.ready_timeout) {
        running.stop(s.stop_grace)?;
        return Ok(Some(failed_start(format!("{e:#}"))));
    }
    let mut footprints: Vec<Footprint> = footprint(&running, 0).into_iter().collect();
    let load = LoadGen::start(s.load_spec(&[server.address(port)]))?;
    let deadline = t0 + Duration::from_secs(s.gate.endurance_seconds);
    let allowed_failures = (s.gate.max_failure_rate * asked as f64) as u64;
    let mut alive = true;
    for k in 1..=CHECKPOINTS {
        let target = asked * k / CHECKPOINTS;
        let reached = loop {
            interrupt::check()?;
            let now = load.snapshot(0);
            if now.completed >= target {
                break true;
            }
            alive = running.alive();
            let failures: u64 = now.failures.iter().sum();
            if !alive || failures > allowed_failures || Instant::now() >= deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        load.quiesce(s.connection_timeout);
        running.held_connections(CLOSE_WAIT);
        footprints.extend(footprint(&running, load.snapshot(0).completed));
        if !reached {
            break;
        }
        load.resume();
    }
    let totals = load.finish().remove(0);
    alive &= running.alive();
    running.stop(s.stop_grace)?;
    let mut evidence = GateEvidence::from_totals(&totals, alive);
    evidence.growth = growth(&footprints);
    let mut gate = gate::check(&evidence, &gate_cfg);
    if !alive {
        gate.detail.push(format!(
            "it exited after {} of {asked} connections in one process",
            totals.snapshot.completed
        ));
    }
    Ok(Some(Endurance {
        connections: asked,
        completed: totals.snapshot.completed,
        seconds: t0.elapsed().as_secs_f64(),
        footprints,
        gate,
    }))
}

/// What `running` holds, summed over its processes, after `connections`.
fn footprint(running: &RunningServer, connections: u64) -> Option<Footprint> {
    let held: Vec<_> = running
        .processes()
        .into_iter()
        .filter_map(holdings::holdings)
        .collect();
    if held.is_empty() {
        return None;
    }
    Some(Footprint {
        connections,
        anon_kib: held.iter().map(|h| h.anon_kib).sum(),
        descriptors: held.iter().map(|h| h.descriptors).sum(),
        sockets: running.connection_sockets(),
        descriptor_limit: held.iter().filter_map(|h| h.descriptor_limit).min(),
    })
}

/// The leaks `footprints` show: anything near the limit on descriptors,
/// and steady growth past the server's warm-up.
pub fn growth(footprints: &[Footprint]) -> Vec<Growth> {
    let mut found = Vec::new();
    if let Some(f) = footprints.iter().find(|f| near_limit(f)) {
        let reason = if f.sockets > f.descriptors {
            GateReason::SocketGrowth
        } else {
            GateReason::DescriptorGrowth
        };
        found.push(Growth {
            reason,
            amount: f.descriptors + f.sockets,
            detail: format!(
                "after {} connections it held {} descriptors ({} of them sockets) of its limit of {}: they leak",
                f.connections,
                f.descriptors + f.sockets,
                f.sockets,
                f.descriptor_limit.unwrap_or_default()
            ),
        });
        return found;
    }
    let Some(last) = footprints.last() else {
        return found;
    };
    let settled_from = SETTLED_SHARE * last.connections as f64;
    let settled: Vec<&Footprint> = footprints
        .iter()
        .filter(|f| f.connections > 0 && f.connections as f64 >= settled_from)
        .collect();
    let n = settled.len();
    if n < 3 {
        return found;
    }
    let thirds = [
        &settled[..n / 3],
        &settled[n / 3..2 * n / 3],
        &settled[2 * n / 3..],
    ];
    // The least of each third: a leak raises it, a collector's sawtooth
    // (the Go control's heap swings by a megabyte between checkpoints)
    // does not.
    let steady = |read: fn(&Footprint) -> u64, floor: i64| {
        let low: Vec<i64> = thirds
            .iter()
            .map(|t| t.iter().map(|f| read(f) as i64).min().unwrap_or(0))
            .collect();
        (low[1] - low[0] >= floor && low[2] - low[1] >= floor).then(|| (low[2] - low[0]) as u64)
    };
    let span = format!(
        "from {} to {} connections",
        settled[0].connections, last.connections
    );
    if let Some(kib) = steady(|f| f.anon_kib, MIN_MEMORY_RISE_KIB) {
        let per = (slope(&settled, |f| f.anon_kib) * 1024.0).round() as u64;
        found.push(Growth {
            reason: GateReason::MemoryGrowth,
            amount: per,
            detail: format!(
                "its anonymous memory grew {span}, the least of each third {kib} KiB higher at the end: {per} bytes a connection (least squares), a leak"
            ),
        });
    }
    for (reason, read, what) in [
        (
            GateReason::DescriptorGrowth,
            (|f: &Footprint| f.descriptors) as fn(&Footprint) -> u64,
            "descriptors other than sockets",
        ),
        (
            GateReason::SocketGrowth,
            |f: &Footprint| f.sockets,
            "sockets",
        ),
    ] {
        if let Some(more) = steady(read, MIN_HELD_RISE) {
            found.push(Growth {
                reason,
                amount: more,
                detail: format!(
                    "it held {more} more {what} {span}, every connection closed: they leak"
                ),
            });
        }
    }
    found
}

/// The least-squares slope of `read` against connections.
fn slope(points: &[&Footprint], read: fn(&Footprint) -> u64) -> f64 {
    let n = points.len() as f64;
    let mx = points.iter().map(|f| f.connections as f64).sum::<f64>() / n;
    let my = points.iter().map(|f| read(f) as f64).sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for f in points {
        let dx = f.connections as f64 - mx;
        sxy += dx * (read(f) as f64 - my);
        sxx += dx * dx;
    }
    if sxx > 0.0 {
        sxy / sxx
    } else {
        0.0
    }
}

fn near_limit(f: &Footprint) -> bool {
    f.descriptor_limit
        .is_some_and(|l| (f.descriptors + f.sockets) as f64 >= NEAR_LIMIT * l as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(connections: u64, anon_kib: u64, descriptors: u64, sockets: u64) -> Footprint {
        Footprint {
            connections,
            anon_kib,
            descriptors,
            sockets,
            descriptor_limit: Some(1024),
        }
    }

    fn reasons(g: &[Growth]) -> Vec<GateReason> {
        g.iter().map(|g| g.reason).collect()
    }

    /// Ten checkpoints of 10,000 connections, each read by `f`.
    fn run_of(f: impl Fn(u64) -> Footprint) -> Vec<Footprint> {
        (1..=10).map(|k| f(k * 10_000)).collect()
    }

    #[test]
    fn a_server_that_settles_after_its_warm_up_grows_nothing() {
        // Pools filled by the second checkpoint, then flat but for noise.
        let honest = run_of(|n| at(n, if n < 20_000 { 900 } else { 2_000 + n % 3 }, 5, 0));
        assert!(growth(&honest).is_empty(), "{:?}", growth(&honest));
        // A pool that doubled once, late, is not a leak either.
        let step = run_of(|n| at(n, if n < 60_000 { 2_000 } else { 6_000 }, 5, 0));
        assert!(growth(&step).is_empty());
        // The Go control's heap, read at its checkpoints (KiB): a sawtooth.
        let go = [5064, 6016, 5120, 5120, 5824, 6020, 6024, 6024, 5128, 5496];
        let sawtooth = run_of(|n| at(n, go[(n / 10_000 - 1) as usize], 8, 0));
        assert!(growth(&sawtooth).is_empty(), "{:?}", growth(&sawtooth));
    }

    #[test]
    fn steady_growth_is_a_leak_named_by_what_grows() {
        let heap = run_of(|n| at(n, 2_000 + n * 16, 5, 0));
        let g = growth(&heap);
        assert_eq!(reasons(&g), [GateReason::MemoryGrowth]);
        assert_eq!(g[0].amount, 16 * 1024, "{}", g[0].detail);
        // 14 bytes a connection is the least caught over 100,000.
        let small = run_of(|n| at(n, 2_000 + n * 14 / 1024, 5, 0));
        assert_eq!(reasons(&growth(&small)), [GateReason::MemoryGrowth]);
        let smaller = run_of(|n| at(n, 2_000 + n * 10 / 1024, 5, 0));
        assert!(growth(&smaller).is_empty());
        let files = run_of(|n| at(n, 2_000, 5 + n / 1_000, 0));
        assert_eq!(reasons(&growth(&files)), [GateReason::DescriptorGrowth]);
        let sockets = run_of(|n| at(n, 2_000, 5, n / 2_000));
        assert_eq!(reasons(&growth(&sockets)), [GateReason::SocketGrowth]);
    }

    #[test]
    fn descriptors_at_their_limit_leak_however_few_the_checkpoints() {
        // One a connection reaches 1,024 before the first checkpoint.
        let g = growth(&[at(0, 500, 4, 0), at(1_019, 500, 1_023, 0)]);
        assert_eq!(reasons(&g), [GateReason::DescriptorGrowth]);
        assert!(g[0].detail.contains("limit of 1024"), "{}", g[0].detail);
        let g = growth(&[at(0, 500, 4, 0), at(1_019, 500, 4, 1_000)]);
        assert_eq!(reasons(&g), [GateReason::SocketGrowth]);
        // Too few checkpoints to see a trend, and far from the limit.
        assert!(growth(&[at(0, 500, 4, 0), at(900, 900, 40, 0)]).is_empty());
    }
}
