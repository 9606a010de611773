//! Samples: what a schedule measured, `trials[arm][sample]`, and the checks
//! made before every measurement. The schedules fill them; the referee
//! compares them.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::bench::config::Schedule;
use crate::bench::load::gate::GateResult;
use crate::bench::measurement::Measurement;
use crate::bench::regime::RegimeRecord;
use crate::bench::servers::arm::Arm;

/// Every trial of every arm so far: `trials[arm][block]`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Samples {
    /// `trials[arm][sample]`: sample k of every arm was measured in the same
    /// window (duet) or block (blocks).
    pub trials: Vec<Vec<Measurement>>,
    /// The order the arms ran in, per sample (arm indices): the trial order
    /// of a block, or the slice order of a window.
    #[serde(default)]
    pub orders: Vec<Vec<usize>>,
    /// The schedule that measured them; records older than the duet have
    /// none, and were blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// The regime every sample was measured in, sized once by the probe
    /// before the first sample and kept for every extension; records older
    /// than the saturated regime have none, and were idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regime: Option<RegimeRecord>,
    /// Per arm, whether it was dropped before the probe or in it, and the
    /// gate verdict that dropped it; empty until the arms are screened
    /// (and in records older than the screen, or measured emulated).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<Option<Dropped>>,
    /// The meter's spread between measurements (sd of the log ratio) that
    /// every interval of these samples adds; absent where none was (older
    /// records, instruction counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<f64>,
}

/// A built binary no longer matches the hash it had when it was built: some
/// process (a hostile candidate, an agent) wrote to it. Nothing measured
/// with it can be trusted.
#[derive(Debug)]
pub struct Tampered(pub String);

impl std::fmt::Display for Tampered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a built binary changed on disk since it was built: {}",
            self.0
        )
    }
}

impl std::error::Error for Tampered {}

/// Fails with [`Tampered`] if `arm`'s binary is not the one that was built.
pub fn verify(arm: &Arm) -> Result<()> {
    if let Some(expected) = &arm.binary_hash {
        let actual =
            crate::bench::servers::build::hash_file(&arm.command.program).unwrap_or_default();
        if &actual != expected {
            return Err(
                Tampered(format!("{} ({})", arm.label, arm.command.program.display())).into(),
            );
        }
    }
    Ok(())
}

/// Where a comparison is, for progress displays.
pub struct Step<'a> {
    pub block: usize,
    pub sample_count: usize,
    pub arm: &'a str,
    pub done: usize,
    /// What was measured before this block, for a display of the ratio so far.
    pub so_far: &'a Samples,
}

impl Samples {
    pub fn new(arms: usize) -> Self {
        Self {
            trials: vec![Vec::new(); arms],
            orders: Vec::new(),
            schedule: None,
            regime: None,
            dropped: Vec::new(),
            drift: None,
        }
    }

    /// Why arm `i` was not measured, if it was dropped.
    pub fn dropped(&self, i: usize) -> Option<&Dropped> {
        self.dropped.get(i).and_then(Option::as_ref)
    }

    pub fn count(&self) -> usize {
        self.trials.first().map_or(0, Vec::len)
    }
}
/// Where an arm was found not to serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Alone, before the probe (`bench/host/screen.rs`).
    Screen,
    /// In the probe, beside the other arms that passed the screen.
    Probe,
}

/// An arm that was not measured, and the gate verdict that dropped it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dropped {
    pub stage: Stage,
    pub gate: GateResult,
}

impl Dropped {
    /// The sample a dropped arm gets in every window or block: its gate
    /// failed, and says where.
    pub fn measurement(&self) -> Measurement {
        let mut gate = self.gate.clone();
        let stage = match self.stage {
            Stage::Screen => "alone, before the probe",
            Stage::Probe => "in the probe",
        };
        gate.detail.insert(
            0,
            format!("dropped {stage}: not measured beside the other arms"),
        );
        Measurement {
            gate,
            ..Default::default()
        }
    }
}
