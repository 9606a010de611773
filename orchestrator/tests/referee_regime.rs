//! The regime the referee measures in, on real servers: saturated (the
//! server has work all the time, the generator keeps headroom), measured
//! rather than assumed (a server that idles between bursts is reported
//! unsaturated and not scored), read past start-up with many connections in
//! flight, and rationed per arm when arms are measured alone (the blocks
//! schedule). They belong together because each checks the conditions a
//! cost is taken under, not the cost.

mod common;

use common::referee::{arm, compare_at_defaults, holds_on_a_second_look};
use common::*;
use serde_json::Value;

/// The saturated regime is measured, not assumed: a server that sleeps
/// between bursts leaves most of its allotment unused, every one of its
/// samples is reported as not saturated and none is scored, while the
/// honest server beside it had work all along.
#[test]
fn a_server_that_idles_between_bursts_is_reported_not_saturated() {
    let _g = exclusive();
    // The probe rations every arm to 5% of the core with 256 connections in
    // flight: the napping server's clients then wait about a second each,
    // and on a slow host past the default 2 s timeout (43% of them on a
    // fresh clone here, 2026-12-06), so it was dropped in the probe before
    // its saturation could be read. Saturation, not latency, is tested.
    // Its naps are 10 ms: with 5, a slow host (2026-12-07) saw one of six
    // samples in each of two looks use just over a quarter of the
    // allotment, where the other five used 0.20 on average.
    let ws = temp_workspace("[load]\ntimeout_ms = 10000\n");
    let (ok, bursty) = (
        faulty_arm("ok"),
        format!("{} --nap-us 10000", faulty_arm("bursty")),
    );
    let measure = || compare_json(&ws.path().join("harness.toml"), &[&ok, &bursty], 6, &[]).0;
    holds_on_a_second_look(measure, |report| {
        let unsaturated = |i| arm(report, i)["unsaturated_samples"].as_u64();
        let used = arm(report, 1)["allotment_used"].as_f64().unwrap_or(1.0);
        let (regime, verdict) = (
            &report["regime"]["regime"],
            &report["comparisons"][0]["verdict"],
        );
        let expected = regime == "saturated"
            && unsaturated(0) == Some(0)
            && unsaturated(1) == Some(6)
            && used < 0.25
            && verdict == "invalid";
        expected.then_some(()).ok_or(format!(
            "regime {regime}, unsaturated samples {:?} (honest) and {:?} (bursty, \
             allotment used {used:.2}), verdict {verdict}",
            unsaturated(0),
            unsaturated(1)
        ))
    });
}

/// Alone (the blocks schedule), each arm is rationed so that it by itself
/// drives its part of the probe's target, as it does in a duet. With one
/// allotment for both, a server three times dearer completes a third as
/// many connections beside an idler generator, and pays more per connection
/// to wake it.
#[test]
fn alone_every_arm_keeps_the_generator_equally_busy() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let (ok, dear) = (
        faulty_arm("ok"),
        format!("{} --spin-us 20", faulty_arm("spin")),
    );
    let (report, _) = compare_json(
        &ws.path().join("harness.toml"),
        &[&ok, &dear],
        6,
        &["--schedule", "blocks"],
    );
    let alone = report["regime"]["alone"]
        .as_array()
        .expect("arms sized alone");
    let share = |a: &Value| a["quota_us"].as_f64().unwrap() / a["period_us"].as_f64().unwrap();
    // Each share follows its arm's own probe cost. Not a fixed factor of
    // two: the probe read the two arms' costs 3.5 times apart on a quiet
    // minute and 1.76 times (26,099 against 46,059 ns) on a noisy one, when
    // this test asked for 2 and failed. The sizing is arithmetic on those
    // costs, so the shares' ratio is the costs' to within rounding.
    let cost = |i: usize| report["regime"]["probe_costs"][i].as_f64().unwrap();
    let (shares, costs) = (share(&alone[1]) / share(&alone[0]), cost(1) / cost(0));
    assert!(
        costs > 1.3,
        "the dear arm did not cost more in the probe: {report}"
    );
    assert!(
        (shares / costs - 1.0).abs() < 0.05,
        "shares {shares:.2} apart for costs {costs:.2} apart: {}",
        report["regime"]
    );
    // Equal shares leave the generator about a third as busy for the dear
    // arm (0.18 against 0.56: 0.32, seen with this feature broken). Sized
    // alone it is close, not equal: with half of the core the dear fixture
    // cannot quite use its share at 256 connections (0.76-0.82 of it), and
    // its generator ran 0.44-0.49 busy against the cheap arm's 0.54-0.67
    // (0.66-0.91). The line sits between the two, at 0.5.
    let busy = |i| arm(&report, i)["generator_busy"].as_f64().unwrap();
    let (cheap, costly) = (busy(0), busy(1));
    assert!(
        (0.5..1.5).contains(&(costly / cheap)),
        "generator {cheap:.2} busy for the cheap arm, {costly:.2} for the dear one"
    );
}

/// The regime the referee promises: the treatment has work all the time
/// (next to no context switches per connection) and the generator keeps
/// headroom, in one `compare --json`.
#[test]
fn the_treatment_is_measured_saturated_with_generator_headroom() {
    let _g = exclusive();
    let report = compare_at_defaults(&["treatment", "treatment", "--blocks", "6"]);
    assert_eq!(report["regime"]["regime"], "saturated", "{report}");
    assert!(report["regime"].get("warning").is_none(), "{report}");
    for i in 0..2 {
        let a = arm(&report, i);
        let cs = a["context_switches_per_connection"].as_f64().unwrap();
        assert!(
            cs <= 0.1,
            "treatment: {cs} context switches per connection: {a}"
        );
        assert!(a["generator_busy"].as_f64().unwrap() < 0.95, "{a}");
        assert!(a["allotment_used"].as_f64().unwrap() > 0.85, "{a}"); // twins share alike
        assert_eq!(a["unsaturated_samples"], 0, "{a}");
    }
}

/// With many connections in flight a server's start-up (its first burst of
/// arrivals, its per-connection state faulted in) lasts long on the probe's
/// small allotment. The probe must read past it: its generator capacity is
/// what the generator then did in the measurement, and the measurement is
/// saturated. Three arms, as the loop measures: read during start-up, the
/// probe of three servers at 512 each (two ran fine) came out at 207-315
/// conn/s against 43,000 and the measurement ran with the generator 98% busy.
#[test]
fn the_probe_reads_steady_costs_with_many_connections_in_flight() {
    let _g = exclusive();
    let measure = || {
        compare_at_defaults(&[
            "treatment",
            "treatment",
            "control",
            "--connections",
            "512",
            "--blocks",
            "6",
        ])
    };
    holds_on_a_second_look(measure, |report| {
        let probed = report["regime"]["generator_capacity_cps"].as_f64().unwrap();
        let busy = arm(report, 0)["generator_busy"].as_f64().unwrap();
        let served: f64 = (0..3)
            .map(|i| arm(report, i)["throughput_cps"].as_f64().unwrap())
            .sum();
        let did = served / busy;
        let cs = arm(report, 0)["context_switches_per_connection"]
            .as_f64()
            .unwrap();
        // Where the probe's share would leave an arm short of
        // gate.min_completed in a window, the share is raised and the regime
        // warns that the generator may be the limit (on an AMD EPYC VM
        // whose generator drove 8,500 connections a second, 2026-12-07):
        // headroom is then not the probe's to give, and what it read still is.
        let floored = report["regime"]["warning"]
            .as_str()
            .is_some_and(|w| w.contains("gate.min_completed"));
        let expected =
            probed > 0.6 * did && probed < 1.6 * did && cs <= 0.1 && (busy < 0.9 || floored);
        expected.then_some(()).ok_or(format!(
            "probed {probed:.0} conn/s, the generator did {did:.0}, {busy:.2} busy \
             (share raised to the min_completed floor: {floored}); \
             treatment {cs} context switches per connection"
        ))
    });
}
