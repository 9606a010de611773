//! The referee: statistics over measured samples, the comparison of two arms,
//! the verdict, the keep rule, and the one judging sequence that both the
//! loop and replay run. It reads the bench's numbers and records nothing.

pub mod compare;
pub mod config;
pub mod cross_checks;
pub mod figures;
pub mod format;
pub mod judge;
pub mod keep;
#[cfg(test)]
mod planted_tests;
pub mod posterior;
pub mod report;
pub mod screen;
pub mod stats;
pub mod verdict;
