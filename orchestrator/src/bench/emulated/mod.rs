//! The emulated measuring host: exact instruction counts where no PMU
//! exists. A guest machine runs under QEMU's TCG with `-icount shift=0,
//! sleep=off` (one emulated instruction is one nanosecond of guest time, so
//! the guest is deterministic and its counts do not move with the host's
//! load), and a TCG plugin counts every instruction each vCPU executes, user
//! and kernel, snapshotting the counts at markers the guest executes around
//! every measured window.
//!
//! Inside the guest, `ratchet guest` runs the very trial, gate, load
//! generator and saturation probe the host runs (blocks schedule, rationed
//! servers), with the server pinned to the last vCPU and the generator on the
//! others; the host reads the server vCPU's instructions per window from the
//! plugin and puts them in place of the guest's time. See
//! `docs/emulated-meter.md` for why the server's vCPU and not its process,
//! and for the measurements behind the defaults.

pub mod assets;
pub mod calibrate;
pub mod guest;
pub mod image;
pub mod marks;
pub mod measure;
pub mod vm;

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

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
    /// Connections in flight at each server in the guest: the study's 512.
    /// The backlog is what lets a rationed server's quota be long (fewer
    /// throttled periods per connection, each of which the count
    /// includes); it must outlast a quota of the cheapest server.
    pub connections: usize,
    /// The CPU time a rationed server may run at a stretch (guest us).
    pub quota_us: u64,
    /// Guest vCPUs: the last holds the server, the others the generator.
    pub vcpus: usize,
    pub memory_mb: u64,
    /// Unscored load before each window (guest ms).
    pub warmup_ms: u64,
    /// The measured window of each trial (guest ms).
    pub window_ms: u64,
    /// Connections a window needs to be scored: counts are exact and a
    /// drained window has no connection straddling its ends, so a window
    /// needs far fewer than a timed one (gate.min_completed) does.
    pub min_completed: u64,
    /// The share of its vCPU every server is rationed to: small enough that
    /// the generator, six or more times costlier per connection, keeps
    /// every server's backlog full (see docs/emulated-meter.md). Rationed
    /// time is idle and costs the host nothing.
    pub server_share: f64,
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
            connections: 256,
            quota_us: 2000,
            vcpus: 2,
            memory_mb: 512,
            warmup_ms: 200,
            window_ms: 1200,
            min_completed: 200,
            server_share: 0.05,
            guests: 0,
            boot_timeout_s: 120,
            timeout_s: 1200,
        }
    }
}
