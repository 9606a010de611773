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
mod qmp;
mod snapshot;
pub mod start;
pub mod symbols;
pub mod vm;
pub mod window;
