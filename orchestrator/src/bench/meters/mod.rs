//! Meters: the counters on a server process (PMU, task-clock, or
//! emulated instructions by plan), the emulated window markers, and
//! profiles of where a server spends what they count.

pub mod marker;
pub mod meter;
pub mod perf_profile;
pub mod profile;
pub mod profiling;
