//! Load and contract: the generator that drives short-lived connections,
//! the contract every response is judged by, the gate a trial must pass,
//! and endurance before a keep.

pub mod contract;
pub mod endurance;
pub mod gate;
pub mod loadgen;
