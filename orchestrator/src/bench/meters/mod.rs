//! Meters: the counters on a server process (PMU, task-clock, or
//! emulated instructions by plan), the emulated meter's instruments and
//! its window markers, and the profiles of where a server spends what they
//! count. The bench's lowest floor: a meter knows nothing of the servers it
//! counts or the hosts that run them.

pub mod emulator;
pub mod marker;
pub mod meter;
pub mod profile;
