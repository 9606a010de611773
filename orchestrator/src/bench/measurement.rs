//! What one trial measured, in the terms of the meter that measured it:
//! the record every sample keeps, from the host's trials, the duet's
//! windows and the emulated guests alike.

use serde::{Deserialize, Serialize};

use crate::bench::load::gate::GateResult;
use crate::bench::meters::meter::MeterReading;
use crate::bench::servers::{mappings, procfs};

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
}

impl Latency {
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> Self {
        Self {
            p50: h.value_at_quantile(0.5) as f64,
            p99: h.value_at_quantile(0.99) as f64,
            p999: h.value_at_quantile(0.999) as f64,
        }
    }
}

/// What one trial measured. `cost_per_connection` is in the meter's unit and
/// is `None` when the gate failed: a failed trial has no score.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Measurement {
    pub gate: GateResult,
    pub cost_per_connection: Option<f64>,
    pub window_completed: u64,
    pub window_s: f64,
    pub throughput_cps: f64,
    /// None where no client timed its connections (an emulated backlog is
    /// queued while the server is stopped: its waits are the queue's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<Latency>,
    pub syscalls_per_connection: Option<f64>,
    pub context_switches_per_connection: Option<f64>,
    /// Fraction of the window the server was on the CPU (task-clock / wall).
    pub sut_busy: f64,
    /// Fraction of the load cores ratchet itself used during the window: near
    /// 1.0 means the generator, not the server, was the limit. None where
    /// no generator ran beside the server (an emulated backlog).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator_busy: Option<f64>,
    pub meter_delta: MeterReading,
    /// The share of the SUT core's busy time in the window that no arm's
    /// counters account for (kernel threads, interrupts, other processes):
    /// what the per-arm costs leave out.
    #[serde(default)]
    pub sut_unaccounted: Option<f64>,
    /// Cost per connection in consecutive slices of the window: shows whether
    /// a trial's cost was steady or moved within the window.
    #[serde(default)]
    pub slice_costs: Vec<f64>,
    /// In the saturated regime: the arm's CPU time on the SUT core over
    /// what its allotment allowed in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allotment_used: Option<f64>,
    /// The share of its bandwidth periods in which it spent its whole quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled_share: Option<f64>,
    /// Whether it had work the whole window (None: the idle regime, where
    /// nothing is claimed). An unsaturated window is not scored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturated: Option<bool>,
    /// Inside the emulated guest: the sequence numbers of the markers that
    /// opened and closed each measured window (see [`crate::bench::meters::marker`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<[u64; 2]>,
    /// In an emulated measurement: the window's instructions by where they
    /// ran (the cost is the server's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulated: Option<EmulatedCounts>,
    /// Where measured (the emulated live regime): interrupts and softirqs
    /// on the server's core per connection in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_events: Option<procfs::CoreEvents>,
    /// Where measured (the emulated live regime) and the server holds an
    /// io_uring: completions its rings posted in the window per connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions_per_connection: Option<f64>,
    /// Inside the emulated guest: the markers around an unscored window
    /// the meter plugin profiled, and the connections completed in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_window: Option<ProfileWindow>,
    /// That window's profile by function, named on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<crate::bench::meters::profile::Profile>,
    /// In the emulated meter's batches: how often the server's CPU time
    /// had stood still while one of its threads was runnable, preempted on
    /// its own vCPU, so that its window did not close yet.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub preempted_when_still: u64,
    /// In the emulated meter's batches: each batch's evidence, warm-up
    /// included, so that a failed gate can be understood afterwards.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batches: Vec<BatchEvidence>,
    /// ...and the server's CPU time between its scored windows, where the
    /// `deferred_work` gate looks, whether or not it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub between_windows_ns: Option<u64>,
}

/// What one emulated batch saw (guest time throughout).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct BatchEvidence {
    pub scored: bool,
    pub attempts: u64,
    pub completed: u64,
    /// Windows it took to answer every client (more than one: the server
    /// went still before it had).
    pub windows: u64,
    /// The server's CPU time in its windows, and their span up to its
    /// going still.
    pub busy_ns: u64,
    pub span_ns: u64,
    /// Looks at which it stood still while runnable.
    pub preempted: u64,
    #[serde(default)]
    pub outside: OutsideWindows,
}

/// The server's CPU time (ns) in one batch outside its windows, by where:
/// taking its stop, while its clients queued (stopped, it should have
/// none), between the windows of one batch, and while its answers were
/// judged after the last. What falls between batches (a reading of the
/// counters) is the rest of the trial's `between_windows_ns`.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct OutsideWindows {
    pub stopping: u64,
    pub queueing: u64,
    pub between: u64,
    pub judging: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProfileWindow {
    pub marks: [u64; 2],
    pub connections: u64,
    /// The server's executable mappings while it was profiled, by which
    /// its user-space addresses are named.
    #[serde(default)]
    pub maps: Vec<mappings::Mapping>,
    /// The path of the server's own program among them.
    #[serde(default)]
    pub exe: String,
}

/// Instructions executed in the guest during a trial's windows, user and
/// kernel.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct EmulatedCounts {
    /// On the server's vCPU (under icount, the backlog regime's, QEMU
    /// counts a block on the vCPU that translated it, so this split is not
    /// the server's there; live it is: docs/emulated-meter.md)...
    pub server: u64,
    /// ...and on the others: ratchet's looks at the server, and the part
    /// of the server's work the guest kernel did there.
    pub generator: u64,
    /// The whole guest: the cost.
    pub guest: u64,
}
