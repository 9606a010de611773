//! Load and contract: the generator that drives short-lived connections,
//! the contract every response is judged by, and the gate a trial must
//! pass (with the leaks an endurance run reads; the run itself is the
//! host's, `bench/host/endurance.rs`).

pub mod contract;
pub mod gate;
pub mod loadgen;
