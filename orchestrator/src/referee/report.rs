//! The document `ratchet compare` and `ratchet check` print: every arm's
//! summary, every comparison with the first arm, the meter and regime they
//! were measured in, and every trial's raw measurement, so a reader can
//! redo the referee's arithmetic from it.

use serde::{Deserialize, Serialize};

use crate::bench::config::Schedule;
use crate::bench::environment::Fingerprint;
use crate::bench::host::trial::Measurement;
use crate::bench::meters::meter::{MeterEvent, MeterPlan, MeterSource};
use crate::bench::regime::RegimeRecord;
use crate::bench::samples::Dropped;
use crate::bench::samples::Samples;
use crate::referee::compare::{ArmSummary, Comparison};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MeterInfo {
    pub event: MeterEvent,
    pub unit: String,
    /// Where the count came from: the host's PMU, an emulated guest, or
    /// the operating system's clock. Records older than the emulated meter
    /// have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<MeterSource>,
}

/// The document `ratchet compare --json` prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CompareReport {
    pub meter: MeterInfo,
    /// duet or blocks: how the arms shared the SUT core.
    pub schedule: Schedule,
    /// Run order per sample, so the schedule can be audited.
    pub orders: Vec<Vec<usize>>,
    pub threshold: f64,
    #[serde(alias = "blocks")]
    pub sample_count: usize,
    pub arms: Vec<ArmSummary>,
    pub comparisons: Vec<Comparison>,
    pub environment: Fingerprint,
    /// The regime of every sample: saturated (rationed, with its
    /// allotment) or idle (with the reason).
    #[serde(default)]
    pub regime: RegimeRecord,
    /// Every trial's raw measurement, `trials[arm][block]`.
    pub trials: Vec<Vec<Measurement>>,
    /// Per arm, whether it was dropped unmeasured (alone before the probe,
    /// or in the probe) and the gate verdict that dropped it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<Option<Dropped>>,
}

pub fn report(
    labels: &[String],
    samples: &Samples,
    threshold: f64,
    plan: &MeterPlan,
    environment: Fingerprint,
) -> CompareReport {
    CompareReport {
        meter: MeterInfo {
            event: plan.event,
            unit: plan.event.unit().into(),
            source: Some(plan.source),
        },
        threshold,
        schedule: samples.schedule.unwrap_or(Schedule::Blocks),
        orders: samples.orders.clone(),
        sample_count: samples.count(),
        arms: labels
            .iter()
            .enumerate()
            .map(|(i, l)| samples.arm_summary(i, l))
            .collect(),
        comparisons: (1..labels.len())
            .map(|i| samples.compare(i, 0, threshold))
            .collect(),
        environment,
        regime: samples.regime.clone().unwrap_or_else(|| {
            RegimeRecord::idle("recorded before ratchet rationed servers".into())
        }),
        trials: samples.trials.clone(),
        dropped: samples.dropped.clone(),
    }
}
