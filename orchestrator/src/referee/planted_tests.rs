//! The keep rule against a measuring host whose truth is known
//! ([`Planted`]): side-by-side samples with a drift that every arm of a
//! sample shares, as a real machine's, and noise of each trial's own.

use crate::bench::measuring::planted::Planted;
use crate::bench::measuring::MeasuringHost;
use crate::bench::samples::Samples;
use crate::bench::servers::arm::Arm;
use crate::bench::servers::launch::ServerCommand;
use crate::referee::judge::{CANDIDATE, CHAMPION, DECISION_LEVEL};
use crate::referee::keep::{decide, Step};
use crate::referee::verdict::AttemptVerdict;

const THRESHOLD: f64 = 0.03;
const SAMPLES: usize = 12;

fn arms() -> Vec<Arm> {
    ["champion", "candidate"]
        .iter()
        .map(|label| Arm {
            label: label.to_string(),
            command: ServerCommand::new("/bin/false".into(), vec![], &Default::default()),
            source_hash: None,
            binary_hash: None,
        })
        .collect()
}

/// What the keep rule decides about `candidate` (the champion costs 100),
/// measured as the loop measures: a look, and one extension if it asks.
fn verdict(candidate: f64, noise: f64, seed: u64) -> AttemptVerdict {
    let host = Planted {
        costs: vec![100.0, candidate],
        noise,
        drift: 0.05,
    };
    let arms = arms();
    let mut samples = Samples::new(arms.len());
    let mut extended = false;
    loop {
        host.measure(&mut samples, &arms, SAMPLES, seed, &mut |_| {})
            .unwrap();
        let c = samples.compare_at(CANDIDATE, CHAMPION, THRESHOLD, DECISION_LEVEL);
        match decide(&c, THRESHOLD, 2.0, extended) {
            Step::Extend => extended = true,
            Step::Decided(v) => return v,
        }
    }
}

#[test]
fn a_gain_past_the_threshold_is_kept_under_a_drift_larger_than_it() {
    for seed in 0..20 {
        assert_eq!(
            verdict(90.0, 0.01, seed),
            AttemptVerdict::Keep,
            "seed {seed}"
        );
    }
}

#[test]
fn no_difference_is_never_kept_however_the_machine_drifts() {
    for seed in 0..200 {
        let v = verdict(100.0, 0.01, seed);
        assert!(!v.is_keep(), "seed {seed}: {v:?}");
    }
}

#[test]
fn a_resolved_gain_short_of_the_threshold_is_promising() {
    for seed in 0..20 {
        assert_eq!(
            verdict(98.5, 0.002, seed),
            AttemptVerdict::Promising,
            "seed {seed}"
        );
    }
}
