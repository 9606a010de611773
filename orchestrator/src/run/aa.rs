//! The A/A check before a run's first attempt: the champion against a twin
//! of itself, beside the control. It measures the spread this machine gives,
//! sizes every later measurement from it, and refuses to run a lottery when
//! the threshold cannot be resolved within `run.max_blocks`.

use anyhow::Result;

use super::{say, Loop};
use crate::bench::arm::Arm;
use crate::bench::schedule::Samples;
use crate::record::journal::AaCheck;
use crate::referee::judge::{CANDIDATE, CHAMPION, CONTROL};

/// Blocks needed so the 95% interval of the median block ratio is about as
/// narrow as the threshold, given the A/A coefficient of variation.
pub fn blocks_needed(cv: f64, threshold: f64) -> usize {
    let half_width_per_block = 1.96 * 1.2533 * cv;
    ((half_width_per_block / threshold).powi(2)).ceil().max(1.0) as usize
}

impl Loop<'_> {
    /// Returns the refusal, when the run cannot go on.
    pub(super) fn aa_check(&mut self) -> Result<Option<String>> {
        let blocks = self.config().compare.blocks;
        let threshold = self.config().compare.threshold;
        let mut samples = Samples::new(3);
        let twin = Arm {
            label: "champion (A/A twin)".into(),
            ..self.champion_arm.clone()
        };
        let arms = [self.champion_arm.clone(), twin, self.control.clone()];
        self.measure(&arms, blocks, &mut samples, "A/A check of the champion")?;
        let aa = samples.compare(CANDIDATE, CHAMPION, threshold);
        if !samples.gate(CHAMPION).passed || !samples.gate(CONTROL).passed {
            return Ok(Some(format!(
                "the starting champion or the control fails the gate: {:?} / {:?}",
                samples.gate(CHAMPION).detail,
                samples.gate(CONTROL).detail
            )));
        }
        let cv = aa.ratio_cv.unwrap_or(0.0);
        let needed = blocks_needed(cv, threshold).max(blocks);
        let champ = samples.arm_summary(CHAMPION, "champion");
        let control = samples.arm_summary(CONTROL, "control");
        self.run.aa = Some(AaCheck {
            block_ratios: aa.block_ratios.clone(),
            cv,
            ci95: aa.ratio_ci95.unwrap_or([1.0, 1.0]),
            blocks_needed: needed,
        });
        self.run.baseline_cost = Some(champ.cost_per_connection.median);
        self.run.control_start_cost = Some(control.cost_per_connection.median);
        self.champion.cost_per_connection = Some(champ.cost_per_connection.median);
        self.champion.vs_control = samples.compare(CHAMPION, CONTROL, threshold).ratio_median;
        let max_blocks = self.config().run.max_blocks;
        let message = format!(
            "A/A check: spread (cv of block ratios) {:.1}%; resolving a {:.1}% change needs about {needed} blocks",
            cv * 100.0,
            threshold * 100.0
        );
        say(&self.bar, &message);
        if needed > max_blocks {
            return Ok(Some(format!(
                "{message}, more than run.max_blocks = {max_blocks}. This machine cannot resolve the threshold: \
                 raise run.max_blocks, lengthen trial.window_ms, or raise compare.threshold. Not running a lottery."
            )));
        }
        if needed > blocks {
            say(
                &self.bar,
                format!("raising blocks per measurement from {blocks} to {needed}"),
            );
        }
        self.run.blocks = needed;
        Ok(None)
    }
}
