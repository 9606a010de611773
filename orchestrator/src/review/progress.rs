//! Measuring with a progress bar: the commands that measure samples under a
//! schedule (compare, replay, ablate, sweep) show where they are the same way.

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};

use crate::bench::choice;
use crate::bench::host::trial::TrialSettings;
use crate::bench::samples::Samples;
use crate::bench::servers::arm::Arm;
use crate::referee::compare::ratio_so_far;
use crate::session::Session;

fn bar(total: usize) -> ProgressBar {
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .expect("valid progress template"),
    );
    bar
}

/// Runs `blocks` more blocks of `arms` into `samples`, showing progress
/// under `label`.
pub fn measure(
    session: &Session,
    settings: &TrialSettings,
    arms: &[Arm],
    sample_count: usize,
    seed: u64,
    samples: &mut Samples,
    label: &str,
) -> Result<()> {
    let bar = bar(sample_count * arms.len());
    let result = choice::host_for(&session.plan, settings).measure(
        samples,
        arms,
        sample_count,
        seed,
        &mut |s| {
            bar.set_position(s.done as u64);
            let ratio = ratio_so_far(s.so_far)
                .map_or(String::new(), |r| format!(" | arm 2 / arm 1 so far {r:.3}"));
            bar.set_message(format!(
                "{label}block {}/{} {}{ratio}",
                s.block, s.sample_count, s.arm
            ));
        },
    );
    bar.finish_and_clear();
    result
}
