//! Servers under test: arms and their builds, launching one pinned and
//! contained, as whom it runs, the secrets it never sees, and what /proc
//! says about it while it runs.

pub mod arm;
pub mod build;
pub mod cgroup;
pub mod holdings;
pub mod launch;
pub mod mappings;
pub mod placement;
pub mod port;
pub mod privilege;
pub mod procfs;
pub mod secrets;
pub mod source;
pub mod target;
pub mod uring;
