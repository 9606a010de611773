//! Whether the plugin counts each instruction on the vCPU that ran it: a
//! guest runs known loads (a loop of known length, system calls, vDSO
//! calls) on each vCPU in turn, between markers that vCPU executes, and
//! the host reads where the counts landed. The live regime's cost is one
//! vCPU's count, so it is only as good as this.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::Path;

use super::guest::{GuestPlan, PLAN_PATH};
use super::image::Image;
use super::measure::guest_settings;
use super::vm::{self, Ending, Markers};
use crate::bench::host::trial::TrialSettings;
use crate::bench::meters::emulator::Emulator;
use crate::bench::meters::marker::Load;

/// One known load on one vCPU: every vCPU's instructions between its
/// markers, the repeat that counted least on its own vCPU (the one no
/// interrupt landed in).
#[derive(Clone, Debug, Serialize)]
pub struct Placed {
    pub vcpu: usize,
    pub load: Load,
    /// The vCPU the plugin was told executed the load's markers.
    pub marked_on: usize,
    pub per_vcpu: Vec<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Attribution {
    pub turns: u64,
    pub placed: Vec<Placed>,
}

impl Attribution {
    /// Every loop of known length counted exactly on its own vCPU.
    pub fn loops_exact(&self) -> bool {
        self.placed
            .iter()
            .filter(|p| p.load == Load::Loop)
            .all(|p| p.per_vcpu[p.vcpu] == 2 * self.turns + 1)
    }

    /// Every load's markers reached the plugin from the vCPU the guest ran
    /// them on.
    pub fn markers_placed(&self) -> bool {
        self.placed.iter().all(|p| p.marked_on == p.vcpu)
    }

    /// How far apart the same load's count on its own vCPU lies across
    /// the vCPUs, as the least over the greatest (1: equal), for the
    /// system-call and vDSO loads: their instructions land on the vCPU
    /// that ran them, whichever it is. Other vCPUs' counts in the same
    /// window are what those vCPUs did meanwhile (timers, kernel threads),
    /// which grows with the window's length in host time, so it is no
    /// criterion.
    pub fn own_counts_agree(&self) -> f64 {
        [Load::Syscalls, Load::Vdso]
            .iter()
            .map(|&load| {
                let own = self
                    .placed
                    .iter()
                    .filter(|p| p.load == load)
                    .map(|p| p.per_vcpu[p.vcpu] as f64);
                let (lo, hi) = own.fold((f64::MAX, 0.0f64), |(l, h), x| (l.min(x), h.max(x)));
                if hi > 0.0 {
                    lo / hi
                } else {
                    0.0
                }
            })
            .fold(1.0, f64::min)
    }
}

/// Boots a guest of the configured regime's vCPUs that runs every known
/// load of `turns` turns on each vCPU, markers honoured on all of them.
pub fn attribute(e: &Emulator, turns: u64, dir: &Path) -> Result<Attribution> {
    let mut img = Image::default();
    let plan = GuestPlan {
        arms: vec![],
        samples: 0,
        seed: 1,
        regime: None,
        settings: guest_settings(e, &TrialSettings::defaults(vec![0])),
        calibrate: None,
        attribute: Some(turns),
    };
    img.bytes(Path::new(PLAN_PATH), serde_json::to_vec(&plan)?, 0o644);
    std::fs::create_dir_all(dir)?;
    let run = vm::run(e, dir, &img, 1, Markers::Everywhere)?;
    if run.ending != Ending::PoweredOff {
        bail!("the attribution guest: {}", run.ending.describe(e));
    }
    let mut placed: Vec<Placed> = Vec::new();
    for line in run
        .channel
        .iter()
        .filter_map(|l| l.strip_prefix("ATTRIBUTE "))
    {
        let w: Vec<&str> = line.split_whitespace().collect();
        let [vcpu, load, b, end, before, after] = w[..] else {
            bail!("a malformed ATTRIBUTE line {line:?}");
        };
        let vcpu: usize = vcpu.parse()?;
        if before != vcpu.to_string() || after != vcpu.to_string() {
            bail!("a load pinned on vCPU {vcpu} ran on the guest's CPU {before} to {after}");
        }
        let load: Load = serde_json::from_str(load)?;
        let window = run
            .marks
            .window(b.parse()?, end.parse()?)
            .with_context(|| format!("{}", run.marks_path.display()))?;
        match placed.iter_mut().find(|p| p.vcpu == vcpu && p.load == load) {
            Some(p) if window.per_vcpu[vcpu] < p.per_vcpu[vcpu] => p.per_vcpu = window.per_vcpu,
            Some(_) => {}
            None => placed.push(Placed {
                vcpu,
                load,
                marked_on: window.marked_on,
                per_vcpu: window.per_vcpu,
            }),
        }
    }
    if placed.len() != 3 * e.config.guest_vcpus() {
        bail!(
            "the attribution guest reported {} loads, not 3 on each of {} vCPUs (channel: {:?})",
            placed.len(),
            e.config.guest_vcpus(),
            run.channel
        );
    }
    Ok(Attribution { turns, placed })
}
