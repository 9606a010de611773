//! The A/A check before a run's first attempt: the champion against a twin
//! of itself, beside the control, under the run's schedule. It measures the
//! spread this machine gives, sizes every later measurement from an upper
//! confidence bound on it, and refuses to run a lottery when the threshold
//! cannot be resolved within `run.max_blocks`.
//!
//! One noisy burst on a shared host should not refuse a run, and twelve
//! samples bound a spread loosely (at 1.79 times their estimate at the
//! confidence below, twenty-four at 1.45). So an A/A that would refuse, or
//! would raise the samples per measurement, is measured once more, afresh.
//! The second look bounds the spread twice, from its own samples (a burst
//! in the first look then counts for nothing: a CI host measured 11.9% and
//! then 4.9%) and from both looks' samples pooled (a steady spread then
//! asks for about a third fewer samples of every measurement: 3.7% and
//! 4.0% on a CI host), and the smaller bound sizes the run. At most three
//! bounds are taken, each at [`SPREAD_CONFIDENCE`] = 1 - 5%/3, so the
//! chance that a machine too noisy for the threshold gets through any of
//! them stays at most 5% (a union bound), as with one look at 95%.

use anyhow::Result;
use std::time::Duration;

use super::{say, Loop};
use crate::bench::choice;
use crate::bench::host::probe;
use crate::bench::host::trial::TrialSettings;
use crate::bench::samples::Samples;
use crate::bench::servers::arm::{with_control, Arm};
use crate::record::journal::AaCheck;
use crate::referee::judge::{CANDIDATE, CHAMPION, CONTROL, DECISION_LEVEL};
use crate::referee::stats;

/// The power every measurement is sized for, against a true gain of exactly
/// the threshold.
pub const POWER: f64 = 0.8;

/// How sure each upper bound on the spread is (at most [`BOUNDS`] of them):
/// sizing from a bound, not from the estimate, keeps a lucky A/A from
/// under-sizing the whole run.
pub const SPREAD_CONFIDENCE: f64 = 1.0 - 0.05 / BOUNDS as f64;

/// Upper bounds on the spread a check takes at most: the first look's, the
/// second look's own and the two looks' pooled.
pub const BOUNDS: usize = 3;

/// How long the first look waits at most for the machine to settle
/// ([`probe::settle`]) before it measures anyway.
const SETTLE_WITHIN: Duration = Duration::from_secs(120);

/// A/A measurements at most before a refusal.
pub const LOOKS: usize = 2;

/// Samples needed for [`POWER`] against a gain of `threshold`, from the A/A
/// ratios: the spread is that of their logarithms (ratios multiply), bounded
/// above at [`SPREAD_CONFIDENCE`].
pub fn samples_needed(ratios: &[f64], threshold: f64) -> (f64, usize) {
    let logs: Vec<f64> = ratios.iter().map(|r| r.ln()).collect();
    let bound = stats::std_dev_upper_bound(&logs, SPREAD_CONFIDENCE);
    (
        bound,
        stats::samples_needed(bound, threshold, DECISION_LEVEL, POWER),
    )
}

/// The bound on the spread that sizes the run, the samples it asks for,
/// and whether it is the pooled one: from a look's `ratios` alone, or, on a
/// second look, the smaller of their own bound and the bound of `earlier`
/// and `ratios` pooled.
pub fn size(ratios: &[f64], earlier: &[f64], threshold: f64) -> (f64, usize, bool) {
    let (own, n) = samples_needed(ratios, threshold);
    if earlier.is_empty() {
        return (own, n, false);
    }
    let pooled: Vec<f64> = earlier.iter().chain(ratios).copied().collect();
    let (both, m) = samples_needed(&pooled, threshold);
    if both < own {
        (both, m, true)
    } else {
        (own, n, false)
    }
}

/// The smallest change a meter whose ratios move by `drift` between
/// measurements resolves, at the decision level with [`POWER`], however
/// many samples one measurement takes: its intervals never get narrower
/// than the drift (see `referee::stats::with_drift`).
pub fn resolvable_under_drift(drift: f64) -> f64 {
    let z = stats::normal_quantile(0.5 + DECISION_LEVEL / 2.0) + stats::normal_quantile(POWER);
    1.0 - (-z * drift).exp()
}

/// Why a run at `threshold` would be a lottery before anything is
/// measured: the meter's drift alone puts the threshold out of reach.
pub fn drift_refusal(drift: f64, threshold: f64) -> Option<String> {
    let smallest = resolvable_under_drift(drift);
    (drift > 0.0 && smallest > threshold).then(|| {
        format!(
            "this meter's ratios move between measurements by {:.1}% (meter.task_clock_drift, measured with \
             benchmarks/drift.sh), which no number of samples in one measurement narrows: no change smaller than \
             about {:.1}% is resolved ({:.1}% intervals, {:.0}% power), and the threshold is {:.1}%. Measure in \
             instructions (meter.event = \"emulated\" once scripts/setup.sh has set the emulator up, or a machine \
             with a PMU), or raise compare.threshold to {:.1}%. Not running a lottery.",
            drift * 100.0,
            smallest * 100.0,
            DECISION_LEVEL * 100.0,
            POWER * 100.0,
            threshold * 100.0,
            smallest * 100.0
        )
    })
}

impl Loop<'_> {
    /// Returns the refusal, when the run cannot go on.
    pub(super) fn aa_check(&mut self) -> Result<Option<String>> {
        let threshold = self.config().compare.threshold;
        if let Some(refusal) = drift_refusal(self.session.plan.drift, threshold) {
            return Ok(Some(refusal));
        }
        let mut earlier: Option<(AaCheck, String)> = None;
        for look in 1..=LOOKS {
            let earlier_ratios = earlier.as_ref().map(|(c, _)| c.block_ratios.as_slice());
            let (check, message, refusal) =
                match self.aa_look(earlier_ratios.unwrap_or_default())? {
                    Look::Gate(refusal) => return Ok(Some(refusal)),
                    Look::Sized(c, m, r) => (c, m, r),
                };
            let samples_needed = check.samples_needed;
            let recorded = AaCheck {
                remeasured: earlier.as_ref().map(|(c, _)| Box::new(c.clone())),
                ..check.clone()
            };
            self.run.aa = Some(recorded);
            let sample_count = self.config().compare.samples;
            match next(look, samples_needed, sample_count, refusal) {
                Next::Run => {
                    if samples_needed > sample_count {
                        say(
                            &self.bar,
                            format!(
                                "raising samples per measurement from {sample_count} to {samples_needed}"
                            ),
                        );
                    }
                    self.run.sample_count = samples_needed;
                    return Ok(None);
                }
                Next::Refuse(r) => {
                    let first = earlier.map_or(String::new(), |(_, m)| {
                        format!(" It was measured twice; the first time: {m}.")
                    });
                    return Ok(Some(format!("{r}{first}")));
                }
                Next::LookAgain(why) => {
                    say(&self.bar, why);
                    earlier = Some((check, message));
                }
            }
        }
        unreachable!("the last look returns")
    }

    /// Before the first look: screens the arms and probes until the
    /// generator's capacity is steady, recording the regime it found.
    fn settle(
        &mut self,
        arms: &[Arm],
        samples: &mut Samples,
        settings: &TrialSettings,
    ) -> Result<()> {
        self.bar
            .set_message("probing until the generator's capacity is steady");
        let capacities =
            choice::host_for(&self.session.plan, settings).settle(samples, arms, SETTLE_WITHIN)?;
        if capacities.len() > probe::SETTLED_AT_ONCE {
            let read: Vec<String> = capacities.iter().map(|c| format!("{c:.0}")).collect();
            say(
                &self.bar,
                format!(
                    "the generator's capacity took {} probes to steady (conn/s: {})",
                    capacities.len(),
                    read.join(", ")
                ),
            );
        }
        Ok(())
    }

    /// One A/A measurement: the gate refusal, or the spread, the samples
    /// it asks for (bounded from its ratios with `earlier` ones), and the
    /// refusal it would give.
    fn aa_look(&mut self, earlier: &[f64]) -> Result<Look> {
        let sample_count = self.config().compare.samples;
        let threshold = self.config().compare.threshold;
        let twin = Arm {
            label: "champion (A/A twin)".into(),
            ..self.champion_arm.clone()
        };
        let arms = with_control([self.champion_arm.clone(), twin], self.control.as_ref());
        let mut samples = Samples::new(arms.len());
        let settings = self.settings();
        if earlier.is_empty() {
            self.settle(&arms, &mut samples, &settings)?;
        }
        self.measure(
            &arms,
            sample_count,
            &mut samples,
            "A/A check of the champion",
            &settings,
        )?;
        let failing: Vec<String> = [
            (CHAMPION, "champion"),
            (CANDIDATE, "its twin"),
            (CONTROL, "control"),
        ][..arms.len()]
            .iter()
            .filter(|(i, _)| !samples.gate(*i).passed)
            .map(|(i, name)| format!("{name}: {:?}", samples.gate(*i).detail))
            .collect();
        if !failing.is_empty() {
            return Ok(Look::Gate(format!(
                "the starting champion, its twin or the control fails the gate: {}",
                failing.join("; ")
            )));
        }
        if let Some(r) = &samples.regime {
            say(&self.bar, format!("regime: {}", r.describe()));
            if let Some(w) = &r.warning {
                say(&self.bar, format!("warning: regime: {w}"));
            }
        }
        let aa = samples.compare(CANDIDATE, CHAMPION, threshold);
        let cv = aa.ratio_cv.unwrap_or(0.0);
        let (bound, sized, pooled_bound) = size(&aa.block_ratios, earlier, threshold);
        let needed = sized.max(sample_count);
        let champ = samples.arm_summary(CHAMPION, "champion");
        let control = (arms.len() > CONTROL).then(|| samples.arm_summary(CONTROL, "control"));
        let check = AaCheck {
            block_ratios: aa.block_ratios.clone(),
            cv,
            interval: aa.ratio_interval.unwrap_or([1.0, 1.0]),
            samples_needed: needed,
            spread_upper_bound: Some(bound),
            remeasured: None,
        };
        self.run.baseline_cost = Some(champ.cost_per_connection.median);
        self.run.control_start_cost = control.map(|c| c.cost_per_connection.median);
        self.champion.cost_per_connection = Some(champ.cost_per_connection.median);
        self.champion.vs_control = (arms.len() > CONTROL)
            .then(|| samples.compare(CHAMPION, CONTROL, threshold).ratio_median)
            .flatten();
        let max_samples = self.config().run.max_samples;
        let schedule = samples.schedule.unwrap_or(settings.schedule).name();
        let message = format!(
            "A/A check ({schedule}, {} samples): spread (cv of sample ratios) {:.1}%{}, at most {:.1}% with {:.1}% confidence; \
             {:.0}% power against a {:.1}% gain needs {needed} samples per measurement",
            aa.block_ratios.len(),
            cv * 100.0,
            with_earlier(earlier, &aa.block_ratios, pooled_bound),
            bound * 100.0,
            SPREAD_CONFIDENCE * 100.0,
            POWER * 100.0,
            threshold * 100.0
        );
        say(&self.bar, &message);
        if let Some(note) = unscored(samples.trials[CHAMPION].len(), aa.block_ratios.len()) {
            say(&self.bar, note);
        }
        let refusal = (needed > max_samples).then(|| {
            format!(
                "{message}, more than run.max_samples = {max_samples}. This machine cannot resolve the threshold: \
                 raise run.max_samples, lengthen the windows, or raise compare.threshold. Not running a lottery."
            )
        });
        Ok(Look::Sized(check, message, refusal))
    }
}

/// What a second look adds to the message: the spread of both looks'
/// ratios, and which bound sizes the run.
fn with_earlier(earlier: &[f64], ratios: &[f64], pooled_bound: bool) -> String {
    if earlier.is_empty() {
        return String::new();
    }
    format!(
        "; with the first look's {} samples, {:.1}% (the {} bound sizes the run)",
        earlier.len(),
        stats::coefficient_of_variation(&[earlier, ratios].concat()) * 100.0,
        if pooled_bound {
            "pooled"
        } else {
            "second look's own"
        }
    )
}

/// Why an A/A look scored fewer samples than it measured: an arm that runs
/// out of work is not scored, and a closed loop with too few connections in
/// flight for a many-request contract runs out every few windows.
fn unscored(measured: usize, scored: usize) -> Option<String> {
    (scored < measured).then(|| {
        format!(
            "{} of {measured} A/A samples not scored: an arm ran out of work (see saturation.*); \
             if this recurs, hold more of load.connections in flight",
            measured - scored
        )
    })
}

/// What the A/A check does after one look.
#[derive(Debug, PartialEq)]
enum Next {
    /// Size every measurement from this look.
    Run,
    Refuse(String),
    /// Measure once more, for the reason given.
    LookAgain(String),
}

/// After look `look` (1-based), which asks for `needed` samples against
/// `compare.blocks` = `blocks` and would give `refusal`: a look that asks
/// for no more than `blocks` runs, the last look decides, and any other
/// look is taken again, to refuse only after two or to size from both.
fn next(look: usize, needed: usize, sample_count: usize, refusal: Option<String>) -> Next {
    match refusal {
        Some(r) if look >= LOOKS => Next::Refuse(r),
        Some(_) => Next::LookAgain(
            "the A/A spread is too wide for the threshold: measuring it once more before refusing".into(),
        ),
        None if look >= LOOKS || needed <= sample_count => Next::Run,
        None => Next::LookAgain(format!(
            "measuring the A/A once more, to size every measurement from both looks rather than {needed} samples from one"
        )),
    }
}

/// What one A/A measurement found.
enum Look {
    /// A server failed its gate: no second look helps.
    Gate(String),
    /// The check, its message, and the refusal it would give.
    Sized(AaCheck, String, Option<String>),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Task-clock here (2.5% between measurements) resolves about 7% at
    /// best: a 3% line is refused before anything is measured, a 10% one
    /// is not, and a meter without drift is never refused for it.
    #[test]
    fn a_threshold_inside_the_drift_is_refused_before_measuring() {
        let smallest = resolvable_under_drift(0.025);
        assert!((0.07..0.08).contains(&smallest), "{smallest}");
        let why = drift_refusal(0.025, 0.03).expect("refused");
        assert!(why.contains("meter.task_clock_drift") && why.contains("Not running a lottery"));
        assert_eq!(drift_refusal(0.025, 0.1), None);
        assert_eq!(drift_refusal(0.0, 0.0001), None);
    }

    #[test]
    fn a_look_that_scored_fewer_samples_than_it_measured_says_so() {
        assert_eq!(unscored(6, 6), None);
        let note = unscored(6, 1).expect("a note");
        assert!(note.starts_with("5 of 6 A/A samples not scored"), "{note}");
        assert!(note.contains("load.connections"), "{note}");
    }

    #[test]
    fn a_look_that_would_raise_the_samples_or_refuse_is_taken_again_once() {
        let refusal = || Some("too noisy".to_string());
        assert_eq!(next(1, 12, 12, None), Next::Run);
        assert!(matches!(next(1, 34, 12, None), Next::LookAgain(_)));
        assert!(matches!(next(1, 90, 12, refusal()), Next::LookAgain(_)));
        assert_eq!(next(2, 34, 12, None), Next::Run);
        assert_eq!(next(2, 90, 12, refusal()), Next::Refuse("too noisy".into()));
    }

    #[test]
    fn a_second_look_sizes_from_its_own_samples_after_a_burst_and_pools_a_steady_spread() {
        let steady: Vec<f64> = (0..12)
            .map(|i| 1.0 + 0.03 * ((i % 5) as f64 - 2.0) / 2.0)
            .collect();
        let burst: Vec<f64> = steady.iter().map(|r| 1.0 + (r - 1.0) * 4.0).collect();
        let (alone, n_alone) = samples_needed(&steady, 0.03);
        // After a burst, its own samples bound the spread tighter.
        let (b, n, pooled) = size(&steady, &burst, 0.03);
        assert!(!pooled && b == alone && n == n_alone, "{b} {n}");
        // After a steady first look, the pooled bound is tighter.
        let (b, n, pooled) = size(&steady, &steady, 0.03);
        assert!(
            pooled && b < alone && n < n_alone,
            "{b} {n} against {alone} {n_alone}"
        );
        // A first look sizes from its own samples.
        assert_eq!(size(&steady, &[], 0.03), (alone, n_alone, false));
    }

    #[test]
    fn a_wider_spread_needs_more_samples() {
        let tight = [0.99, 1.01, 1.0, 0.995, 1.005, 1.0, 0.99, 1.01, 1.0, 1.0];
        let loose: Vec<f64> = tight.iter().map(|r| 1.0 + (r - 1.0) * 4.0).collect();
        let (b1, n1) = samples_needed(&tight, 0.03);
        let (b2, n2) = samples_needed(&loose, 0.03);
        assert!(b2 > b1 && n2 > n1, "{n1} {n2}");
        assert_eq!(n1, stats::min_samples(DECISION_LEVEL));
    }
}
