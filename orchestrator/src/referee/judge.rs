//! The judging sequence, once: build -> no-op -> smoke -> measure -> keep
//! rule. `ratchet run` judges every attempt with it, and `ratchet replay
//! --decisions` re-judges recorded attempts with it, so a replayed decision is
//! made by the code that made the original.
//!
//! What differs between the two callers is only where the candidate's source
//! comes from and how progress is shown; both come in through [`Stages`].

use anyhow::Result;
use std::time::{Duration, Instant};

use crate::bench::config::Schedule;
use crate::bench::host::endurance::{self, Endurance};
use crate::bench::host::trial::{self, TrialSettings};
use crate::bench::load::gate;
use crate::bench::meters::meter::MeterPlan;
use crate::bench::samples::{Samples, Tampered};
use crate::bench::servers::arm::{with_control, Arm};
use crate::bench::servers::build::BuildFailure;
use crate::referee::compare::Comparison;
use crate::referee::keep::{self, Step};
use crate::referee::stats;
use crate::referee::verdict::AttemptVerdict;

/// Arms in every judging measurement; the champion is the baseline.
pub const CHAMPION: usize = 0;
pub const CANDIDATE: usize = 1;
pub const CONTROL: usize = 2;
/// The arms whose gates decide a judgement, named for its detail; the
/// confirmation alone measures them at the same indices.
const JUDGED: [(usize, &str); 2] = [(CHAMPION, "champion"), (CANDIDATE, "candidate")];

/// The settings of the keep rule and the smoke run.
#[derive(Clone, Debug)]
pub struct Rules {
    pub threshold: f64,
    pub suspicious_gain: f64,
    pub smoke_window: Duration,
    /// See [`crate::referee::config::CompareConfig::max_p99_factor`].
    pub max_p99_factor: f64,
}

/// The coverage of each look's interval. The keep rule looks at most twice
/// (the measurement, then its extension), so each look spends half of a 5%
/// error rate: a candidate no better than its champion is kept at one of the
/// two looks with probability under 2.5% by the interval alone (and the
/// threshold on the median makes that far rarer).
pub const DECISION_LEVEL: f64 = 0.975;

/// Which measurement of a judgement is running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Measuring,
    /// More samples, because the first ones did not decide.
    Extending,
    /// A keep measured in a duet, measured again with each server alone on
    /// the core (the blocks schedule): champion and candidate only.
    Confirming,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Measuring => "measuring",
            Phase::Extending => "extending",
            Phase::Confirming => "confirming alone",
        }
    }
}

/// The settings and the number of samples of a phase's measurement: the
/// configured schedule and `samples` to measure or extend; for a
/// confirmation, each server alone (blocks) in windows as long as the duet's,
/// the fewest blocks that give an interval, and served at its duet rate:
/// blocks give each arm its part of the generator's target, and the duet
/// that decided had the control, when there is one, as a third arm.
pub fn phase_settings(
    phase: Phase,
    settings: &TrialSettings,
    samples: usize,
    with_control: bool,
) -> (TrialSettings, usize) {
    match phase {
        Phase::Measuring | Phase::Extending => (
            settings.clone(),
            samples.max(stats::min_samples(DECISION_LEVEL)),
        ),
        Phase::Confirming => {
            let mut alone = settings.clone();
            alone.schedule = Schedule::Blocks;
            alone.window = settings.duet.window;
            alone.warmup = settings.warmup.min(Duration::from_millis(500));
            let duet_arms = JUDGED.len() + usize::from(with_control);
            alone.saturation.generator_target *= JUDGED.len() as f64 / duet_arms as f64;
            (alone, stats::MIN_SAMPLES)
        }
    }
}

/// What a caller supplies: the candidate's build, and measuring with its own
/// progress display.
pub trait Stages {
    /// Builds the candidate; a [`BuildFailure`] is a verdict, any other error
    /// ends the command.
    fn build(&mut self) -> Result<Arm>;
    /// Measures more samples of `arms` into `samples`: under the configured
    /// schedule, or under the blocks schedule for [`Phase::Confirming`]. A
    /// [`Tampered`] error ends the attempt with a `scope` verdict.
    fn measure(&mut self, arms: &[Arm], samples: &mut Samples, phase: Phase) -> Result<()>;
}

/// The measured evidence of a judgement.
pub struct Evidence {
    /// `trials[arm]` with the arms in [`CHAMPION`], [`CANDIDATE`], [`CONTROL`]
    /// order (no control when the run has none).
    pub samples: Samples,
    pub vs_champion: Comparison,
    pub vs_control: Option<Comparison>,
    pub champion_vs_control: Option<Comparison>,
    /// Median cost per connection of the candidate and the control, in the meter's unit.
    pub candidate_cost: f64,
    pub control_cost: Option<f64>,
    /// A duet keep measured again alone: candidate against champion.
    pub confirmation: Option<(Comparison, Samples)>,
}

/// How a candidate was judged, with what it took.
pub struct Judgement {
    pub verdict: AttemptVerdict,
    pub detail: Option<String>,
    pub build_ok: Option<bool>,
    pub build_log_tail: Option<String>,
    pub binary_sha256: Option<String>,
    /// The built candidate; on a keep, the new champion.
    pub candidate: Option<Arm>,
    pub evidence: Option<Evidence>,
    pub extended: bool,
    /// A built binary was modified on disk: the caller must rebuild before
    /// it measures again.
    pub tampered: bool,
    pub build_s: f64,
    pub measure_s: f64,
    /// The candidate's endurance run, when it was about to be kept.
    pub endurance: Option<Endurance>,
}

impl Judgement {
    fn ended(verdict: AttemptVerdict, detail: Option<String>) -> Self {
        Self {
            verdict,
            detail,
            build_ok: None,
            build_log_tail: None,
            binary_sha256: None,
            candidate: None,
            evidence: None,
            extended: false,
            tampered: false,
            build_s: 0.0,
            measure_s: 0.0,
            endurance: None,
        }
    }

    /// The comparison with the champion, when the candidate was measured.
    pub fn vs_champion(&self) -> Option<&Comparison> {
        self.evidence.as_ref().map(|e| &e.vs_champion)
    }
}

/// Judges one candidate against `champion`, measured side by side with it
/// and the `control`, if any.
pub fn judge(
    stages: &mut dyn Stages,
    champion: &Arm,
    control: Option<&Arm>,
    rules: &Rules,
    plan: &MeterPlan,
    settings: &TrialSettings,
) -> Result<Judgement> {
    let mut j = measure_and_decide(stages, champion, control, rules, plan, settings)?;
    if j.verdict.is_keep() {
        endure(&mut j, plan, settings)?;
    }
    let keep = j.verdict.is_keep() && settings.schedule == Schedule::Duet;
    let (Some(candidate), Some(e), true) = (j.candidate.clone(), j.evidence.as_mut(), keep) else {
        return Ok(j);
    };
    let t = Instant::now();
    let duet = e.vs_champion.ratio_median.unwrap_or(1.0);
    let arms = [champion.clone(), candidate];
    let (c, alone, refuted) = match confirm(stages, &arms, duet, rules.threshold) {
        Ok(confirmation) => confirmation,
        Err(e) => return tampered(j, e, t),
    };
    if let Some(reason) = refuted {
        j.verdict = AttemptVerdict::Discard;
        j.detail = Some(match alone.gate_failures(&JUDGED) {
            Some(gates) => format!("{reason}: {gates}"),
            None => reason,
        });
    }
    e.confirmation = Some((c, alone));
    j.measure_s += t.elapsed().as_secs_f64();
    Ok(j)
}

/// Serves the candidate about to be kept many connections in one process
/// (`bench/host/endurance.rs`); a leak or a crash there makes it invalid. Only
/// keeps pay for it: a discard leaves nothing behind to leak.
fn endure(j: &mut Judgement, plan: &MeterPlan, settings: &TrialSettings) -> Result<()> {
    let Some(candidate) = j.candidate.as_ref() else {
        return Ok(());
    };
    let t = Instant::now();
    j.endurance = endurance::run(&candidate.command, plan, settings)?;
    j.measure_s += t.elapsed().as_secs_f64();
    if let Some(e) = j.endurance.as_ref().filter(|e| !e.gate.passed) {
        j.verdict = AttemptVerdict::Invalid;
        j.detail = Some(format!(
            "the endurance run ({} of {} connections in one process) failed the gate: {} {}",
            e.completed,
            e.connections,
            gate::fmt_reasons(&e.gate.reasons),
            e.gate.detail.join("; ")
        ));
    }
    Ok(())
}

/// How many times a confirmation measures before it may refute a duet keep.
/// Alone, every arm inherits the drift between blocks, so six blocks give an
/// interval several times the duet's (0.962 [0.895, 1.028] against a duet's
/// 0.892 [0.880, 0.904] once discarded a stack of three real savings): a
/// confirmation that would refute measures as many blocks again, and only
/// the pooled blocks refute. One that confirms at the first look is not
/// measured again, so the extension never makes a keep, it only spares one.
const CONFIRMATION_LOOKS: usize = 2;

/// Measures a duet keep again with each server alone: the comparison, its
/// samples, and why it refutes the duet, if it does.
fn confirm(
    stages: &mut dyn Stages,
    arms: &[Arm; 2],
    duet: f64,
    threshold: f64,
) -> Result<(Comparison, Samples, Option<String>)> {
    let mut alone = Samples::new(arms.len());
    let mut looks = 0;
    loop {
        stages.measure(arms, &mut alone, Phase::Confirming)?;
        looks += 1;
        let c = alone.compare(CANDIDATE, CHAMPION, threshold);
        let refuted = keep::unconfirmed(duet, &c, threshold);
        if refuted.is_none() || looks == CONFIRMATION_LOOKS {
            return Ok((c, alone, refuted));
        }
    }
}

/// Ends a judgement whose measurement found a built binary modified; any
/// other error ends the command.
fn tampered(mut j: Judgement, e: anyhow::Error, t: Instant) -> Result<Judgement> {
    let Some(tampered) = e.downcast_ref::<Tampered>() else {
        return Err(e);
    };
    j.verdict = AttemptVerdict::Scope;
    j.detail = Some(tampered.to_string());
    j.tampered = true;
    j.measure_s += t.elapsed().as_secs_f64();
    Ok(j)
}

/// build -> no-op -> smoke: the candidate, built and fit to measure, with
/// its judgement so far; or the judgement that ended it before measuring.
pub fn admit(
    stages: &mut dyn Stages,
    champion: &Arm,
    rules: &Rules,
    plan: &MeterPlan,
    settings: &TrialSettings,
) -> Result<std::result::Result<(Arm, Judgement), Judgement>> {
    let t = Instant::now();
    let built = stages.build();
    let build_s = t.elapsed().as_secs_f64();
    let candidate = match built {
        Ok(arm) => arm,
        Err(e) => {
            let Some(f) = e.downcast_ref::<BuildFailure>() else {
                return Err(e);
            };
            let mut j = Judgement::ended(AttemptVerdict::BuildFailed, None);
            j.build_ok = Some(false);
            j.build_log_tail = Some(f.log_tail.clone());
            j.build_s = build_s;
            return Ok(Err(j));
        }
    };
    let mut j = Judgement::ended(AttemptVerdict::Discard, None);
    j.build_ok = Some(true);
    j.build_s = build_s;
    j.binary_sha256 = candidate.binary_hash.clone();
    j.candidate = Some(candidate.clone());
    if candidate.binary_hash.is_some() && candidate.binary_hash == champion.binary_hash {
        j.verdict = AttemptVerdict::NoOp;
        j.detail = Some("the built binary is identical to the champion's".into());
        return Ok(Err(j));
    }
    if let Some(failure) = trial::smoke(&candidate.command, plan, settings, rules.smoke_window)? {
        j.verdict = AttemptVerdict::Invalid;
        j.detail = Some(failure);
        return Ok(Err(j));
    }
    Ok(Ok((candidate, j)))
}

/// build -> no-op -> smoke -> measure -> keep rule.
fn measure_and_decide(
    stages: &mut dyn Stages,
    champion: &Arm,
    control: Option<&Arm>,
    rules: &Rules,
    plan: &MeterPlan,
    settings: &TrialSettings,
) -> Result<Judgement> {
    let (candidate, mut j) = match admit(stages, champion, rules, plan, settings)? {
        Ok(admitted) => admitted,
        Err(ended) => return Ok(ended),
    };
    let t = Instant::now();
    let arms = with_control([champion.clone(), candidate], control);
    let mut samples = Samples::new(arms.len());
    let mut phase = Phase::Measuring;
    let step = loop {
        if let Err(e) = stages.measure(&arms, &mut samples, phase) {
            return tampered(j, e, t);
        }
        let c = samples.compare_at(CANDIDATE, CHAMPION, rules.threshold, DECISION_LEVEL);
        match keep::decide(&c, rules.threshold, rules.suspicious_gain, j.extended) {
            Step::Extend => {
                j.extended = true;
                phase = Phase::Extending;
            }
            Step::Decided(v) => break (v, c),
        }
    };
    j.measure_s = t.elapsed().as_secs_f64();
    let (verdict, vs_champion) = step;
    j.verdict = verdict;
    if verdict == AttemptVerdict::Invalid {
        j.detail = Some(match samples.gate_failures(&JUDGED) {
            Some(gates) => format!("a gate failed during measurement: {gates}"),
            None => "too few samples could be scored for an interval".into(),
        });
    }
    if verdict.is_keep() {
        let tail = keep::Tail::of(&samples, CANDIDATE, CHAMPION);
        if let Some(reason) = tail.regression(rules.max_p99_factor) {
            j.verdict = AttemptVerdict::LatencyRegression;
            j.detail = Some(reason);
        }
    }
    let cost = |arm: usize, label: &str| samples.arm_summary(arm, label).cost_per_connection.median;
    let with_control = control.is_some();
    let against_control =
        |arm: usize| with_control.then(|| samples.compare(arm, CONTROL, rules.threshold));
    j.evidence = Some(Evidence {
        vs_control: against_control(CANDIDATE),
        champion_vs_control: against_control(CHAMPION),
        candidate_cost: cost(CANDIDATE, "candidate"),
        control_cost: with_control.then(|| cost(CONTROL, "control")),
        confirmation: None,
        vs_champion,
        samples,
    });
    Ok(j)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::host::trial::Measurement;
    use crate::bench::load::gate::GateResult;
    use crate::bench::servers::launch::ServerCommand;

    /// Confirmation blocks as scripted: each call to `measure` appends the
    /// next batch of (champion, candidate) costs.
    struct Scripted {
        batches: Vec<Vec<(f64, f64)>>,
        calls: usize,
    }

    impl Stages for Scripted {
        fn build(&mut self) -> Result<Arm> {
            unreachable!("a confirmation does not build")
        }

        fn measure(&mut self, _: &[Arm], samples: &mut Samples, phase: Phase) -> Result<()> {
            assert_eq!(phase, Phase::Confirming);
            let measured = |cost: f64| Measurement {
                gate: GateResult {
                    passed: true,
                    attempts: 10,
                    completed: 10,
                    ..Default::default()
                },
                cost_per_connection: Some(cost),
                ..Default::default()
            };
            for &(champion, candidate) in &self.batches[self.calls] {
                samples.trials[CHAMPION].push(measured(champion));
                samples.trials[CANDIDATE].push(measured(candidate));
            }
            self.calls += 1;
            Ok(())
        }
    }

    fn arms() -> [Arm; 2] {
        let arm = |label: &str| Arm {
            label: label.into(),
            command: ServerCommand::new("/bin/false".into(), vec![], &Default::default()),
            source_hash: None,
            binary_hash: None,
        };
        [arm("champion"), arm("candidate")]
    }

    /// Six blocks alone whose ratios scatter as drift between blocks makes
    /// them, around `centre`.
    fn blocks(centre: f64) -> Vec<(f64, f64)> {
        [0.93, 1.07, 0.97, 1.03, 1.0, 1.05]
            .iter()
            .map(|k| (100.0, 100.0 * centre * k))
            .collect()
    }

    #[test]
    fn a_confirmation_that_would_refute_at_six_blocks_measures_six_more_first() {
        // Alone the first six read about 0.96 with an interval starting above
        // the duet's 0.89; the next six read what the duet did.
        let mut s = Scripted {
            batches: vec![blocks(0.965), blocks(0.89)],
            calls: 0,
        };
        let first = {
            let mut once = Samples::new(2);
            s.measure(&arms(), &mut once, Phase::Confirming).unwrap();
            s.calls = 0;
            once.compare(CANDIDATE, CHAMPION, 0.05)
        };
        assert!(keep::unconfirmed(0.89, &first, 0.05).is_some());
        let (c, alone, refuted) = confirm(&mut s, &arms(), 0.89, 0.05).unwrap();
        assert_eq!(refuted, None, "{c:?}");
        assert_eq!(alone.count(), 12);
    }

    #[test]
    fn a_confirmation_refutes_only_when_the_pooled_blocks_still_do() {
        let mut s = Scripted {
            batches: vec![blocks(0.97), blocks(0.98)],
            calls: 0,
        };
        let (_, alone, refuted) = confirm(&mut s, &arms(), 0.89, 0.05).unwrap();
        assert!(refuted.unwrap().contains("sharing the core"));
        assert_eq!(alone.count(), 12);
        // One that confirms at the first look is not measured again.
        let mut s = Scripted {
            batches: vec![blocks(0.90)],
            calls: 0,
        };
        let (_, alone, refuted) = confirm(&mut s, &arms(), 0.89, 0.05).unwrap();
        assert_eq!((refuted, alone.count()), (None, 6));
    }

    #[test]
    fn a_confirmation_serves_each_arm_at_the_rate_of_the_duet_that_decided() {
        let duet = TrialSettings::defaults(vec![0]);
        let (alone, _) = phase_settings(Phase::Confirming, &duet, 12, true);
        assert_eq!(alone.schedule, Schedule::Blocks);
        // The duet's three arms share the target; alone, each of two arms
        // drives its half of the confirmation's.
        let per_arm_in_duet = duet.saturation.generator_target / 3.0;
        let per_arm_alone = alone.saturation.generator_target / 2.0;
        assert!((per_arm_alone - per_arm_in_duet).abs() < 1e-12);
        let (measuring, _) = phase_settings(Phase::Measuring, &duet, 12, true);
        assert_eq!(
            measuring.saturation.generator_target,
            duet.saturation.generator_target
        );
    }
}
