//! Review: the commands that read a recorded run back (`log`, `report`) or
//! measure it again (`replay`, `ablate`), serve it to a browser (`serve`),
//! and `sweep`.

pub mod ablate;
pub mod charts;
pub mod functions;
pub mod log;
pub mod progress;
pub mod replay;
pub mod report;
pub mod serve;
pub mod svg;
pub mod sweep;
pub mod tree;
