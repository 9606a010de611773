//! The meter's calibration: a guest runs a loop of a known number of
//! instructions between two markers, and the plugin must count exactly
//! that. It also times the guest, for `doctor`.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::time::Duration;

use super::guest::{GuestPlan, CALIBRATION_REPEATS, PLAN_PATH};
use super::image::Image;
use super::measure::guest_settings;
use super::vm::{self, Ending};
use crate::bench::host::trial::TrialSettings;
use crate::bench::meters::emulator::Emulator;

pub struct Calibration {
    /// What the loop executes: `2 * turns + 1` instructions.
    pub expected: u64,
    /// What the plugin counted on the loop's vCPU, per repeat.
    pub counted: Vec<u64>,
    /// Boot, loop and power-off, on the host.
    pub wall: Duration,
    /// Every instruction the guest executed, all vCPUs.
    pub guest_instructions: u64,
}

impl Calibration {
    /// Exact when the least repeat (the one no interrupt landed in) is
    /// the loop to the instruction, and no repeat counted less.
    pub fn exact(&self) -> bool {
        self.counted.iter().min() == Some(&self.expected)
    }

    /// Emulated instructions per host second.
    pub fn speed(&self) -> f64 {
        self.guest_instructions as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Boots a guest that runs the calibration loop of `turns` turns.
pub fn calibrate(e: &Emulator, turns: u64, dir: &Path) -> Result<Calibration> {
    let mut img = Image::default();
    let settings = TrialSettings::defaults(vec![0]);
    let plan = GuestPlan {
        arms: vec![],
        samples: 0,
        seed: 1,
        regime: None,
        settings: guest_settings(e, &settings),
        calibrate: Some(turns),
        attribute: None,
    };
    img.bytes(Path::new(PLAN_PATH), serde_json::to_vec(&plan)?, 0o644);
    std::fs::create_dir_all(dir)?;
    let run = vm::run(e, dir, &img, 1, vm::Markers::OffTheServer)?;
    if run.ending != Ending::PoweredOff {
        bail!("the calibration guest: {}", run.ending.describe(e));
    }
    let mut counted = Vec::new();
    for line in run
        .channel
        .iter()
        .filter_map(|l| l.strip_prefix("CALIBRATE "))
    {
        let (b, end) = line
            .split_once(' ')
            .context("a CALIBRATE line without two markers")?;
        let w = run
            .marks
            .window(b.parse()?, end.parse()?)
            .with_context(|| format!("{}", run.marks_path.display()))?;
        counted.push(w.per_vcpu[w.marked_on]);
    }
    if counted.len() != CALIBRATION_REPEATS {
        bail!(
            "the calibration guest reported {} loops, not {CALIBRATION_REPEATS} (channel: {:?})",
            counted.len(),
            run.channel
        );
    }
    let last = run.marks.snapshots.last().context("no snapshot")?;
    Ok(Calibration {
        expected: 2 * turns + 1,
        counted,
        wall: run.wall,
        guest_instructions: last.counts.iter().sum(),
    })
}
