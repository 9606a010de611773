//! The emulated measuring host: exact instruction counts where no PMU
//! exists. A guest machine runs under QEMU's TCG with `-icount shift=0,
//! sleep=off` (one emulated instruction is one nanosecond of guest time, so
//! the guest is deterministic and its counts do not move with the host's
//! load), and a TCG plugin counts every instruction each vCPU executes, user
//! and kernel, snapshotting the counts at markers the guest executes around
//! every measured window.
//!
//! Inside the guest, `ratchet guest` runs the host's blocks schedule, server
//! launch, contract and gate, with the server pinned to the last vCPU and
//! the clients on the others; each trial is a series of batches, backlogs
//! the server serves alone (`batch.rs`). The host reads the server vCPU's
//! instructions over the batches from the plugin and puts them in place of
//! the guest's time. See `docs/emulated-meter.md` for why the server's vCPU
//! and not its process, and for the measurements behind the defaults.

pub mod assets;
pub mod attribution;
pub mod batch;
pub mod calibrate;
pub mod clients;
mod clock;
pub mod count;
pub mod functions;
pub mod guest;
pub mod image;
mod job;
pub mod live;
pub mod marks;
pub mod measure;
pub mod profiled;
pub mod start;
pub mod symbols;
pub mod vm;

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use crate::check::range;

pub use assets::Emulator;

/// `[emulator]` in harness.toml. Times marked "guest" are guest time: one
/// guest second is 10^9 emulated instructions, about 10 s on the host.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmulatorConfig {
    /// QEMU 9.2 or newer (7.2 hangs a 2-vCPU guest under icount).
    pub qemu: PathBuf,
    /// An x86_64 kernel image (scripts/setup.sh unpacks Debian's 6.12 from
    /// bookworm-backports).
    pub kernel: PathBuf,
    /// A static busybox: the guest's shell and tools.
    pub busybox: PathBuf,
    /// What a server serves while it is counted: live clients beside it,
    /// or backlogs queued while it was stopped (see [`WorkloadRegime`]).
    pub regime: WorkloadRegime,
    /// Guest vCPUs: the last holds the server, the others the generator;
    /// 0: the regime's own (2 for backlogs, [`LIVE_VCPUS`] live).
    pub vcpus: usize,
    pub memory_mb: u64,
    /// Live: connections each trial completes before its window, unscored
    /// (the server's pools and the kernel's caches fill)...
    pub warmup_connections: u64,
    /// ...and in its window, scored.
    pub window_connections: u64,
    /// Live: after the scored window, an unscored one of this many
    /// connections profiled by code address (0: none; profiling slows the
    /// emulator, not the guest).
    pub profile_connections: u64,
    /// Live: stop the scheduler tick on the server's vCPU while the server
    /// runs alone there (`nohz_full`). The guest's tick keeps the host's
    /// time while the vCPU's speed follows the host's load, so the ticks a
    /// connection pays move with the host; this takes them out, and moves
    /// that vCPU's RCU callbacks to the clients' vCPUs, where they are not
    /// counted.
    pub nohz_full: bool,
    /// Connections queued for a stopped server before each batch (see
    /// `bench/emulated/batch.rs`); within the server's listen backlog.
    pub backlog: usize,
    /// Scored batches per trial.
    pub batches: usize,
    /// Unscored batches at the start of every trial.
    pub warmup_batches: usize,
    /// A batch the server has not served by then is over, and what it has
    /// not answered timed out (guest ms).
    pub batch_timeout_ms: u64,
    /// Guests run at once; 0: one per host core. Emulated counts do not
    /// depend on the host's load, so guests share the host freely.
    pub guests: usize,
    /// A guest that has not started ratchet by then did not boot (host s).
    pub boot_timeout_s: u64,
    /// A guest still running then is stopped as hung (host s).
    pub timeout_s: u64,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        Self {
            qemu: "qemu-system-x86_64".into(),
            kernel: "/var/cache/ratchet/emulator/vmlinuz".into(),
            busybox: "/bin/busybox".into(),
            regime: WorkloadRegime::Auto,
            vcpus: 0,
            warmup_connections: 1024,
            window_connections: 3072,
            profile_connections: 0,
            nohz_full: false,
            memory_mb: 512,
            backlog: 256,
            batches: 4,
            warmup_batches: 1,
            batch_timeout_ms: 5000,
            guests: 0,
            boot_timeout_s: 120,
            timeout_s: 1200,
        }
    }
}

/// What a server serves in the emulated guest while it is counted.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadRegime {
    /// The regime that agrees with a real client: backlog, until the live
    /// regime is shown to agree better (docs/emulated-meter.md, "The live
    /// regime").
    #[default]
    Auto,
    /// Closed-loop clients on their own vCPUs hold `load.connections` in
    /// flight while the server runs alone on an isolated vCPU; the cost is
    /// that vCPU's instructions, as `perf stat -C` counts a core
    /// (`bench/emulated/live.rs`).
    Live,
    /// Clients queued while the server is stopped, served alone; the cost
    /// is the whole guest's instructions (`bench/emulated/batch.rs`).
    Backlog,
}

/// Guest vCPUs in the live regime: the server's, and five for clients,
/// which spend three to four times the server's instructions on a
/// connection (docs/emulated-meter.md, "The live regime").
pub const LIVE_VCPUS: usize = 6;

impl WorkloadRegime {
    /// The name `harness.toml` gives it.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadRegime::Auto => "auto",
            WorkloadRegime::Live => "live",
            WorkloadRegime::Backlog => "backlog",
        }
    }

    /// `auto` resolved.
    pub fn resolved(self) -> Self {
        match self {
            WorkloadRegime::Auto => WorkloadRegime::Backlog,
            r => r,
        }
    }
}

impl EmulatorConfig {
    /// The regime this configuration measures in, `auto` resolved.
    pub fn workload(&self) -> WorkloadRegime {
        self.regime.resolved()
    }

    /// Guest vCPUs, the regime's own where not configured.
    pub fn guest_vcpus(&self) -> usize {
        match (self.vcpus, self.workload()) {
            (0, WorkloadRegime::Live) => LIVE_VCPUS,
            (0, _) => 2,
            (n, _) => n,
        }
    }

    /// The server's vCPU: the last.
    pub fn sut_vcpu(&self) -> usize {
        self.guest_vcpus() - 1
    }

    /// The bounds QEMU, the guest kernel and the generator set.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.vcpus != 0 {
            range("emulator.vcpus", self.vcpus as f64, 2.0, 64.0)?;
        }
        range(
            "emulator.warmup_connections",
            self.warmup_connections as f64,
            0.0,
            10_000_000.0,
        )?;
        range(
            "emulator.window_connections",
            self.window_connections as f64,
            100.0,
            10_000_000.0,
        )?;
        range("emulator.memory_mb", self.memory_mb as f64, 256.0, 65536.0)?;
        range("emulator.backlog", self.backlog as f64, 1.0, 4096.0)?;
        range("emulator.batches", self.batches as f64, 1.0, 1000.0)?;
        range(
            "emulator.warmup_batches",
            self.warmup_batches as f64,
            0.0,
            1000.0,
        )?;
        range(
            "emulator.batch_timeout_ms",
            self.batch_timeout_ms as f64,
            10.0,
            600_000.0,
        )?;
        range(
            "emulator.boot_timeout_s",
            self.boot_timeout_s as f64,
            1.0,
            86_400.0,
        )?;
        range("emulator.timeout_s", self.timeout_s as f64, 1.0, 86_400.0)
    }
}
