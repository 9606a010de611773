//! The bench: everything that turns a server into a measured number. Arms are
//! built and launched here, loaded by the generator, metered, gated and run
//! on a schedule; nothing here judges or records.
//!
//! By job: `servers/` (arms, builds, launching, containment), `load/` (the
//! generator, the contract, the gate, endurance), `meters/`, and the two
//! measuring hosts, `host/` (this machine's regimes and schedules) and
//! `emulated/`, behind the seam in `measuring/`. What crosses the seam:
//! `samples.rs` and `measurement.rs`.

pub mod config;
pub mod emulated;
pub mod environment;
pub mod host;
pub mod load;
pub mod meaning;
pub mod measurement;
pub mod measuring;
pub mod meters;
pub mod samples;
pub mod servers;
