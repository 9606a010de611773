//! The bench: everything that turns a server into a measured number. Arms are
//! built and launched here, loaded by the generator, metered, gated and run
//! on a schedule; nothing here judges or records.
//!
//! By job, from the bottom floor up (`orchestrator/tests/layout.rs` ranks
//! them): `meters/`, `servers/` (arms, builds, launching, containment),
//! `load/` (the generator, the contract, the gate), what a trial is and the
//! regime it ran in (`config.rs`, `regime.rs`, `measurement.rs`), the seam
//! (`samples.rs`, `measuring/`), the two measuring hosts, `host/` (this
//! machine's regimes and schedules) and `emulated/`, and `choice.rs`, which
//! picks one.

pub mod choice;
pub mod config;
pub mod emulated;
pub mod environment;
pub mod host;
pub mod load;
pub mod meaning;
pub mod measurement;
pub mod measuring;
pub mod meters;
pub mod profiling;
pub mod regime;
pub mod samples;
pub mod servers;
