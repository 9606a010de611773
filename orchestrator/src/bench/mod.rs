//! The bench: everything that turns a server into a measured number. Arms are
//! built and launched here, loaded by the generator, metered, gated and run
//! on a schedule; nothing here judges or records.

pub mod arm;
pub mod ballast;
pub mod build;
pub mod cgroup;
pub mod config;
pub mod contract;
pub mod duet;
pub mod emulated;
pub mod endurance;
pub mod environment;
pub mod gate;
pub mod holdings;
pub mod host;
pub mod launch;
pub mod loadgen;
pub mod lock;
pub mod mappings;
pub mod marker;
pub mod meaning;
pub mod measurement;
pub mod measuring;
pub mod meter;
pub mod perf_profile;
pub mod placement;
pub mod privilege;
pub mod probe;
pub mod procfs;
pub mod profile;
pub mod profiling;
pub mod ration;
pub mod samples;
pub mod schedule;
pub mod screen;
pub mod secrets;
pub mod source;
pub mod target;
pub mod trial;
pub mod uring;
