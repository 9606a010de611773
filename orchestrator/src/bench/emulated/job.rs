//! One guest's share of a measurement: its image (busybox, ratchet, the
//! arms' programs and the plan), its boot and run, and, when it goes down,
//! which arm is to blame. A guest that hangs or never boots while an arm
//! runs in it fails that arm; a panic must happen twice, because under
//! MTTCG a guest kernel was seen to trip over its own code patching (an
//! `int3` oops in `__schedule`, in ratchet's task, while the vanilla
//! treatment ran). The other arms are then measured again in a fresh
//! guest without the one blamed.

use anyhow::{bail, Context, Result};
use std::path::Path;

use super::guest::{self, GuestPlan, GuestSettings};
use super::image::Image;
use super::measure::{guest_samples, name_profiles, programs_of};
use super::vm::{self, Ending};
use crate::bench::host::trial::failed_start;
use crate::bench::meters::emulator::Emulator;
use crate::bench::regime::RegimeRecord;
use crate::bench::samples::Samples;
use crate::bench::servers::arm::Arm;

/// One guest's share of a measurement.
pub(super) struct Job<'a> {
    pub e: &'a Emulator,
    pub arms: &'a [Arm],
    pub samples: usize,
    pub seed: u64,
    pub settings: GuestSettings,
    pub regime: Option<RegimeRecord>,
}

impl Job<'_> {
    /// Measures every arm in a guest; an arm that brings the guest down is
    /// failed and the rest measured again in a fresh guest without it. A
    /// panic must happen twice to blame the arm: under MTTCG a guest kernel
    /// was seen to trip over its own code patching (an `int3` oops in
    /// `__schedule`, in ratchet's task, while the vanilla treatment ran).
    pub fn run(&self, dir: &Path) -> Result<Samples> {
        let mut out = Samples::new(self.arms.len());
        let mut live: Vec<usize> = (0..self.arms.len()).collect();
        let mut downed_once: Vec<usize> = Vec::new();
        for attempt in 0.. {
            let dir = dir.join(format!("attempt-{attempt}"));
            std::fs::create_dir_all(&dir)?;
            let payload = self.payload(&live)?;
            let run = vm::run(self.e, &dir, &payload, self.seed, vm::Markers::OffTheServer)?;
            tracing::info!(
                "guest {}: {} samples of {} arms, {} in {:.1} s",
                dir.display(),
                self.samples,
                live.len(),
                run.ending.describe(self.e),
                run.wall.as_secs_f64()
            );
            if run.ending == Ending::PoweredOff {
                let mut got = guest_samples(&run.channel, &run.marks, &run.marks_path, self.e)?;
                name_profiles(&mut got, &run.channel, &dir, self.e)?;
                for (j, trials) in got.trials.into_iter().enumerate() {
                    out.trials[live[j]] = trials;
                }
                out.orders = got
                    .orders
                    .iter()
                    .map(|o| {
                        let mut order: Vec<usize> = o.iter().map(|&j| live[j]).collect();
                        order.extend((0..self.arms.len()).filter(|i| !live.contains(i)));
                        order
                    })
                    .collect();
                return Ok(out);
            }
            let why = run.ending.describe(self.e);
            let Some(culprit) = running_arm(&run.channel, self.arms) else {
                bail!(
                    "{why}, while no arm of {} was running (console: {})",
                    self.arms
                        .iter()
                        .map(|a| a.label.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    dir.join("console.log").display()
                );
            };
            if !blamed(&run.ending, culprit, &mut downed_once) {
                tracing::warn!(
                    "{why} while {} ran in it ({}): measuring again in a fresh guest before blaming it",
                    self.arms[culprit].label,
                    oops(&dir.join("console.log"))
                );
                continue;
            }
            out.trials[culprit] = vec![
                failed_start(
                    format!(
                        "{why} while {} ran in it (console: {})",
                        self.arms[culprit].label,
                        dir.join("console.log").display()
                    ),
                    &self.settings.gate,
                );
                self.samples
            ];
            live.retain(|&i| i != culprit);
            if live.is_empty() {
                out.orders = vec![(0..self.arms.len()).collect(); self.samples];
                return Ok(out);
            }
        }
        unreachable!("the loop returns")
    }

    /// What this guest gets beside its snapshot: the live arms' programs
    /// and the plan.
    fn payload(&self, live: &[usize]) -> Result<Image> {
        let mut img = Image::default();
        for &i in live {
            for p in programs_of(&self.arms[i]) {
                img.program(&p)
                    .with_context(|| format!("putting arm {} in the guest", self.arms[i].label))?;
            }
        }
        let plan = GuestPlan {
            arms: live
                .iter()
                .map(|&i| (self.arms[i].label.clone(), self.arms[i].command.clone()))
                .collect(),
            samples: self.samples,
            seed: self.seed,
            regime: self.regime.clone(),
            settings: self.settings.clone(),
            calibrate: None,
            attribute: None,
        };
        img.bytes(
            Path::new(guest::PLAN_PATH),
            serde_json::to_vec(&plan)?,
            0o644,
        );
        Ok(img)
    }
}

/// The arm the guest announced last: the one running when it went down.
fn running_arm(channel: &[String], arms: &[Arm]) -> Option<usize> {
    let label = channel.iter().rev().find_map(|l| {
        let rest = l.strip_prefix("STEP ")?;
        Some(rest.split_once(' ')?.1.to_string())
    })?;
    arms.iter().position(|a| a.label == label)
}

/// Where a guest's oops happened and in which task, from its console:
/// the guest's files are removed when every trial passes, so the warning
/// carries what a reader needs to tell the emulator from the server.
fn oops(console: &Path) -> String {
    let text = std::fs::read_to_string(console).unwrap_or_default();
    let first = |key: &str| {
        text.lines()
            .find(|l| l.contains(key))
            .map(|l| l.split_once("] ").map_or(l, |(_, r)| r).trim().to_string())
    };
    [first("Oops"), first("CPU: "), first("RIP: 0010")]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether `culprit`, running when its guest ended as `ending`, is to
/// blame: a hang or a guest that never booted at once, a panic the second
/// time (`downed_once` remembers the first).
fn blamed(ending: &Ending, culprit: usize, downed_once: &mut Vec<usize>) -> bool {
    if !matches!(ending, Ending::Panicked(_)) || downed_once.contains(&culprit) {
        return true;
    }
    downed_once.push(culprit);
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_blamed_on_its_arm_the_second_time_a_hang_at_once() {
        let mut once = Vec::new();
        let panic = Ending::Panicked("Kernel panic".into());
        assert!(!blamed(&panic, 1, &mut once));
        assert!(!blamed(&panic, 0, &mut once));
        assert!(blamed(&panic, 1, &mut once));
        assert!(blamed(&Ending::Hung, 2, &mut once));
        assert!(blamed(&Ending::NoBoot, 3, &mut once));
    }

    #[test]
    fn an_oops_is_named_by_its_place_and_task() {
        let dir = tempfile::tempdir().unwrap();
        let console = dir.path().join("console.log");
        std::fs::write(
            &console,
            "[   11.871913] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n[   11.872825] CPU: 2 UID: 0 PID: 161 Comm: ratchet Not tainted\n[   11.873308] RIP: 0010:__schedule+0x419/0xc00\n[   11.878157] RIP: 0033:0x7fa59890638f\n",
        )
        .unwrap();
        assert_eq!(
            oops(&console),
            "Oops: int3: 0000 [#1] PREEMPT SMP NOPTI; CPU: 2 UID: 0 PID: 161 Comm: ratchet Not tainted; RIP: 0010:__schedule+0x419/0xc00"
        );
        assert_eq!(oops(&dir.path().join("none")), "");
    }

    #[test]
    fn the_arm_announced_last_is_the_one_blamed() {
        let arm = |l: &str| Arm {
            label: l.into(),
            command: crate::bench::servers::launch::ServerCommand::new(
                "/x".into(),
                vec![],
                &Default::default(),
            ),
            source_hash: None,
            binary_hash: None,
        };
        let arms = [arm("control"), arm("cmd:evil --x")];
        let ch: Vec<String> = ["UP 6.1", "STEP 0 control", "STEP 0 cmd:evil --x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(running_arm(&ch, &arms), Some(1));
        assert_eq!(running_arm(&ch[..1], &arms), None);
    }
}
