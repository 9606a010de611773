//! The referee against real servers and the real load generator: honest
//! servers pass the gate, each purpose-built broken server fails it with the
//! right reason, and the statistics say `same` for A/A and `worse` for a
//! server with a known extra cost per connection.

mod common;

use common::*;
use serde_json::Value;

fn arm(report: &Value, i: usize) -> &Value {
    &report["arms"][i]
}

fn reasons(report: &Value, i: usize) -> Vec<String> {
    arm(report, i)["gate"]["reasons"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

/// Compares a fixture mode against the honest fixture in one duet: the two
/// share every window, and the broken one must fail its own gate without
/// taking the honest one down with it.
fn judge_mode(mode: &str) -> Value {
    let ws = temp_workspace("");
    let ok = faulty_arm("ok");
    let bad = faulty_arm(mode);
    let (report, _) = compare_json(&ws.path().join("harness.toml"), &[&ok, &bad], 6, &[]);
    assert_eq!(report["schedule"], "duet", "{report}");
    assert_eq!(
        arm(&report, 0)["gate"]["passed"],
        true,
        "the honest server sharing the windows with {mode} failed: {}",
        arm(&report, 0)["gate"]
    );
    assert_eq!(
        arm(&report, 0)["gate"]["passed"],
        true,
        "the honest fixture failed: {report}"
    );
    report
}

fn assert_fails_with(mode: &str, reason: &str) {
    let _g = exclusive();
    let report = judge_mode(mode);
    let gate = &arm(&report, 1)["gate"];
    assert_eq!(gate["passed"], false, "{mode} passed the gate: {report}");
    assert!(
        reasons(&report, 1).iter().any(|r| r == reason),
        "{mode}: expected reason {reason}, got {:?}",
        reasons(&report, 1)
    );
    assert_eq!(arm(&report, 1)["score"], 0.0);
    assert_eq!(report["comparisons"][0]["verdict"], "invalid");
}

#[test]
fn wrong_bytes_fail_the_gate() {
    assert_fails_with("wrong_bytes", "wrong_bytes");
}

#[test]
fn a_truncated_response_fails_the_gate() {
    assert_fails_with("truncated", "truncated");
}

#[test]
fn one_extra_byte_fails_the_gate() {
    assert_fails_with("extra_byte", "extra_bytes");
}

#[test]
fn a_server_that_never_closes_fails_the_gate() {
    assert_fails_with("no_close", "timeout");
}

#[test]
fn a_server_that_resets_fails_the_gate() {
    assert_fails_with("reset", "reset");
}

#[test]
fn dropping_one_connection_in_500_fails_the_gate() {
    assert_fails_with("drop_some", "truncated");
}

#[test]
fn a_server_that_dies_mid_window_fails_the_gate() {
    // Saturated, the probe sees it die and drops it before any window.
    assert_fails_with("die", "server_exited");
    // Idle, nothing probes: it dies inside a measured window, not after
    // the measurement. The first window saw it serve, and it never served
    // a whole epoch.
    let _g = exclusive();
    let ws = temp_workspace("[saturation]\nregime = \"idle\"\n");
    let (report, _) = compare_json(
        &ws.path().join("harness.toml"),
        &[&faulty_arm("ok"), &faulty_arm("die")],
        6,
        &[],
    );
    assert_eq!(arm(&report, 0)["gate"]["passed"], true, "{report}");
    assert!(reasons(&report, 1).iter().any(|r| r == "server_exited"));
    let first = &report["trials"][1][0];
    assert!(
        first["window_completed"].as_u64().unwrap() > 0,
        "it served nothing in the first window: {first}"
    );
    let served: u64 = report["trials"][1]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["window_completed"].as_u64().unwrap())
        .sum();
    let honest: u64 = report["trials"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["window_completed"].as_u64().unwrap())
        .sum();
    assert!(served < honest / 2, "it served {served} against {honest}");
}

#[test]
fn a_well_formed_500_fails_the_gate() {
    assert_fails_with("status_500", "wrong_bytes");
}

/// Every broken mode beside one honest server, at the defaults (the user's
/// harness.toml, six windows): each broken one is caught, and none costs
/// the honest one its gate. Before arms were screened the probe read a
/// generator capacity of 27 conn/s beside them (a dead server's clients
/// spun on refused connects and starved the rest), sized an allotment that
/// starved every arm, and the honest server failed as `too_few_completed`.
#[test]
fn an_honest_server_beside_every_broken_one_passes_at_the_defaults() {
    let _g = exclusive();
    let broken = [
        ("wrong_bytes", "wrong_bytes"),
        ("truncated", "truncated"),
        ("extra_byte", "extra_bytes"),
        ("no_close", "timeout"),
        ("reset", "reset"),
        ("status_500", "wrong_bytes"),
        ("die", "server_exited"),
        ("no_read", "reset"),
        ("drop_some", "truncated"),
    ];
    let mut arms = vec![faulty_arm("ok")];
    arms.extend(broken.iter().map(|(mode, _)| faulty_arm(mode)));
    let mut args: Vec<&str> = arms.iter().map(String::as_str).collect();
    args.extend(["--blocks", "6"]);
    let report = compare_at_defaults(&args);
    assert_eq!(
        arm(&report, 0)["gate"]["passed"],
        true,
        "the honest server failed beside the broken ones: {}",
        arm(&report, 0)["gate"]
    );
    assert_eq!(arm(&report, 0)["unsaturated_samples"], 0, "{report}");
    assert!(report["regime"].get("warning").is_none(), "{report}");
    for (i, (mode, reason)) in broken.iter().enumerate() {
        let i = i + 1;
        assert_eq!(arm(&report, i)["gate"]["passed"], false, "{mode} passed");
        assert!(
            reasons(&report, i).iter().any(|r| r == reason),
            "{mode}: expected {reason}, got {:?}",
            reasons(&report, i)
        );
        // The record says where it was dropped.
        let stage = report["dropped"][i]["stage"].as_str();
        assert!(
            matches!(stage, Some("screen" | "probe")),
            "{mode} was measured: {}",
            report["dropped"]
        );
    }
    assert!(report["dropped"][0].is_null(), "{}", report["dropped"]);
}

/// A server that tries to work on another core is either rejected (its
/// gate names `off_core`, or it cannot start) or contained: where a cpuset
/// confines it, its attempt fails and every nanosecond it is scored on ran
/// on the SUT core. Never is it scored with off-core work.
fn assert_never_scored_off_core(mode: &str) {
    let _g = exclusive();
    let report = judge_mode(mode);
    let gate = &arm(&report, 1)["gate"];
    let r = reasons(&report, 1);
    if gate["passed"] == false {
        assert!(
            r.iter()
                .any(|x| x == "off_core" || x == "no_listen" || x == "server_exited"),
            "{mode}: failed for another reason: {r:?}"
        );
        return;
    }
    let containment = report["environment"]["containment"].as_str().unwrap();
    assert!(
        containment.contains("cpuset") && !containment.starts_with("warning"),
        "{mode} passed the gate without a cpuset to contain it: {containment}"
    );
    for t in report["trials"][1].as_array().unwrap() {
        assert_eq!(t["meter_delta"]["off_core_ns"], 0, "{mode}: {t}");
    }
}

/// Without cgroups (as on a host that has none), nothing confines a server
/// to its core: the off-core counter (all task-clock minus the SUT core's)
/// must then catch it, and the result must say it was not contained.
#[test]
fn without_cgroups_off_core_work_fails_the_gate_and_the_result_warns() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let ok = faulty_arm("ok");
    let bad = faulty_arm("off_core");
    let (report, _) = compare_json_env(
        &ws.path().join("harness.toml"),
        &[&ok, &bad],
        6,
        &[],
        &[("RATCHET_CGROUPS", "off")],
    );
    assert!(
        reasons(&report, 1).contains(&"off_core".to_string()),
        "{:?}",
        reasons(&report, 1)
    );
    let containment = report["environment"]["containment"].as_str().unwrap();
    assert!(
        containment.starts_with("warning: containment"),
        "{containment}"
    );
}

#[test]
fn a_server_that_moves_itself_off_core_is_rejected_or_contained() {
    assert_never_scored_off_core("off_core");
}

#[test]
fn a_helper_thread_on_another_core_is_rejected_or_contained() {
    assert_never_scored_off_core("thread_off_core");
}

#[test]
fn a_forked_child_serving_from_another_core_is_rejected_or_contained() {
    assert_never_scored_off_core("fork_off_core");
}

#[test]
fn an_sqpoll_thread_on_another_core_is_rejected_or_contained() {
    assert_never_scored_off_core("sqpoll_off_core");
}

#[test]
fn answering_without_reading_the_request_fails_the_gate() {
    assert_fails_with("no_read", "reset");
}

#[test]
fn misbehaving_only_in_the_warm_up_fails_the_gate() {
    assert_fails_with("early_wrong", "wrong_bytes");
}

#[test]
fn teardown_deferred_out_of_the_window_fails_the_gate() {
    assert_fails_with("defer_close", "deferred_close");
}

/// A server that leaves a daemon (a grandchild in its own session) behind
/// is contained: the daemon dies with the trial's cgroup.
#[test]
fn a_daemon_left_by_a_server_dies_with_its_trial() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let open = open_dir();
    let pidfile = open.path().join("daemon.pid");
    let ok = faulty_arm("ok");
    let bad = format!(
        "cmd:{} --mode escape --pidfile {}",
        faulty_server().display(),
        pidfile.display()
    );
    let (report, _) = compare_json(&ws.path().join("harness.toml"), &[&ok, &bad], 6, &[]);
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .expect("the fixture left a daemon")
        .trim()
        .parse()
        .unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.contains(") Z"),
        "the daemon {pid} outlived the comparison: {stat}"
    );
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&pidfile.display().to_string()))
        .collect();
    assert!(left.is_empty(), "processes left behind: {left:?}");
    assert!(!report["environment"]["containment"]
        .as_str()
        .unwrap()
        .starts_with("warning"));
}

/// A server that prints every environment it can reach sees no key, and
/// what it printed reaches no output of ratchet with one in it.
#[test]
fn a_server_sees_no_key_and_its_output_carries_none() {
    let _g = exclusive();
    let key = "sk-ratchet-test-0123456789abcdef";
    let ws = temp_workspace("[trial]\nready_timeout_ms = 500\n");
    let open = open_dir();
    let seen = open.path().join("seen.txt");
    let ok = faulty_arm("ok");
    let bad = format!(
        "cmd:{} --mode print_env --pidfile {}",
        faulty_server().display(),
        seen.display()
    );
    let (report, out) = compare_json_env(
        &ws.path().join("harness.toml"),
        &[&ok, &bad],
        6,
        &[],
        &[("OPENAI_API_KEY", key), ("RATCHET_TEST_SECRET_TOKEN", key)],
    );
    let raw = std::fs::read_to_string(&seen).expect("the fixture wrote what it saw");
    assert!(raw.contains("env: PATH="), "{raw}");
    assert!(raw.contains("parent env:"), "{raw}");
    assert!(!raw.contains(key), "the server saw the key:\n{raw}");
    let detail = arm(&report, 1)["gate"]["detail"].to_string();
    assert!(detail.contains("env: PATH="), "{detail}");
    for text in [
        report.to_string(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    ] {
        assert!(!text.contains(key), "the key reached ratchet's output");
    }
}

#[test]
fn a_server_that_never_listens_fails_with_its_stderr() {
    let _g = exclusive();
    let ws = temp_workspace("[trial]\nready_timeout_ms = 300\n");
    let ok = faulty_arm("ok");
    // A `cmd:` arm is one command line; a compound one goes through `sh -c`.
    let silent = format!(
        "cmd:sh -c 'echo about to hang >&2; exec {} --mode never_listen'",
        faulty_server().display()
    );
    let (report, _) = compare_json(&ws.path().join("harness.toml"), &[&ok, &silent], 6, &[]);
    let gate = &arm(&report, 1)["gate"];
    assert_eq!(gate["passed"], false);
    assert!(reasons(&report, 1).contains(&"no_listen".to_string()));
    let detail = gate["detail"].to_string();
    assert!(
        detail.contains("did not listen") && detail.contains("about to hang"),
        "{detail}"
    );
}

#[test]
fn a_listener_on_the_port_that_is_not_the_server_is_not_mistaken_for_it() {
    let _g = exclusive();
    // The arm's own process binds nothing: it starts a correct server in a
    // session of its own (out of its process group) on the arm's port and
    // sleeps. Something answers on the port, but not the arm's server; it
    // must not be scored.
    let ws = temp_workspace("[trial]\nready_timeout_ms = 500\n");
    let ok = faulty_arm("ok");
    let impostor = format!(
        "cmd:sh -c 'setsid {} --mode ok \"$@\" & exec sleep 30' sh",
        faulty_server().display()
    );
    let (report, _) = compare_json(&ws.path().join("harness.toml"), &[&ok, &impostor], 6, &[]);
    assert_eq!(arm(&report, 1)["gate"]["passed"], false, "{report}");
    assert!(
        reasons(&report, 1).contains(&"no_listen".to_string()),
        "{:?}",
        reasons(&report, 1)
    );
}

#[test]
fn control_and_treatment_pass_the_gate() {
    let _g = exclusive();
    let config = repo_root().join("harness.toml");
    let (report, _) = compare_json(&config, &["control", "treatment"], 6, &[]);
    for i in 0..2 {
        assert_eq!(arm(&report, i)["gate"]["passed"], true, "{report}");
        assert!(
            arm(&report, i)["cost_per_connection"]["median"]
                .as_f64()
                .unwrap()
                > 0.0
        );
        assert!(arm(&report, i)["score"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(
        report["meter"]["unit"],
        if report["meter"]["event"] == "instructions" {
            "instructions"
        } else {
            "ns"
        }
    );
    let env = &report["environment"];
    assert_eq!(env["control_source_sha256"].as_str().unwrap().len(), 64);
    assert_eq!(env["treatment_source_sha256"].as_str().unwrap().len(), 64);
    assert!(report["comparisons"][0]["ratio_ci95"].is_array());
}

/// The saturated regime is measured, not assumed: a server that sleeps
/// between bursts leaves most of its allotment unused, every one of its
/// samples is reported as not saturated and none is scored, while the
/// honest server beside it had work all along.
#[test]
fn a_server_that_idles_between_bursts_is_reported_not_saturated() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let (ok, bursty) = (faulty_arm("ok"), faulty_arm("bursty"));
    let (report, _) = compare_json(&ws.path().join("harness.toml"), &[&ok, &bursty], 6, &[]);
    assert_eq!(report["regime"]["regime"], "saturated", "{report}");
    assert_eq!(arm(&report, 0)["unsaturated_samples"], 0, "{report}");
    assert_eq!(arm(&report, 1)["unsaturated_samples"], 6, "{report}");
    assert!(arm(&report, 1)["allotment_used"].as_f64().unwrap() < 0.25);
    assert_eq!(report["comparisons"][0]["verdict"], "invalid", "{report}");
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

/// `ratchet compare ARGS --json` on the repository's own harness.toml: the
/// defaults a user gets, not the tests' quick settings.
fn compare_at_defaults(args: &[&str]) -> Value {
    let out = std::process::Command::new(ratchet())
        .arg("--config")
        .arg(repo_root().join("harness.toml"))
        .arg("compare")
        .args(args)
        .args(["--json", "--meter", "task-clock"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
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
    let report = compare_at_defaults(&[
        "treatment",
        "treatment",
        "control",
        "--connections",
        "512",
        "--blocks",
        "6",
    ]);
    let regime = &report["regime"];
    let probed = regime["generator_capacity_cps"].as_f64().unwrap();
    let busy = arm(&report, 0)["generator_busy"].as_f64().unwrap();
    let served: f64 = (0..3)
        .map(|i| arm(&report, i)["throughput_cps"].as_f64().unwrap())
        .sum();
    let did = served / busy;
    assert!(
        probed > 0.6 * did && probed < 1.6 * did,
        "probed {probed:.0} conn/s, the generator did {did:.0}: {regime}"
    );
    let treatment = arm(&report, 0);
    let cs = treatment["context_switches_per_connection"]
        .as_f64()
        .unwrap();
    assert!(cs <= 0.1, "{cs} context switches per connection: {report}");
    assert!(busy < 0.9, "generator {busy} busy: {report}");
}

/// An A/A comparison must never promote and must land near 1. It is not
/// asserted to be `same`: a 95% interval leaves out 1 in about one A/A run in
/// twenty by construction, and `worse` asks for no minimum effect, so such a
/// test would fail that often without any fault.
#[test]
fn the_same_server_against_itself_is_never_better_and_lands_near_one() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let ok = faulty_arm("ok");
    let (report, _) = compare_json(&ws.path().join("harness.toml"), &[&ok, &ok], 12, &[]);
    let c = &report["comparisons"][0];
    assert!(
        c["verdict"] == "same" || c["verdict"] == "worse",
        "an A/A comparison was judged {}: {c}",
        c["verdict"]
    );
    let median = c["ratio_median"].as_f64().unwrap();
    assert!((0.85..1.18).contains(&median), "A/A median {median}: {c}");
}

/// 100 us is several times the fixture's own cost per connection on any CPU
/// seen so far, so the verdict does not hang on the machine's speed.
#[test]
fn a_known_extra_cost_per_connection_is_worse() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let ok = faulty_arm("ok");
    let slow = format!("{} --spin-us 100", faulty_arm("spin"));
    let (report, _) = compare_json(&ws.path().join("harness.toml"), &[&ok, &slow], 6, &[]);
    let c = &report["comparisons"][0];
    assert_eq!(c["verdict"], "worse", "{c}");
    assert!(c["ratio_median"].as_f64().unwrap() > 1.2, "{c}");
}

/// The same planted cost, seen from the other side.
#[test]
fn a_known_saving_per_connection_is_better() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let ok = faulty_arm("ok");
    let slow = format!("{} --spin-us 100", faulty_arm("spin"));
    let (report, _) = compare_json(&ws.path().join("harness.toml"), &[&slow, &ok], 6, &[]);
    let c = &report["comparisons"][0];
    assert_eq!(c["verdict"], "better", "{c}");
    assert!(c["ratio_median"].as_f64().unwrap() < 0.8, "{c}");
    assert!(c["ci_coverage"].as_f64().unwrap() > 0.95, "{c}");
    // Every window of the duet measured both arms, in an audited order.
    assert_eq!(report["orders"].as_array().unwrap().len(), 6, "{report}");
}

#[test]
fn the_table_names_the_unit_and_the_verdict() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let ok = faulty_arm("ok");
    let out = std::process::Command::new(ratchet())
        .arg("--config")
        .arg(ws.path().join("harness.toml"))
        .args(["compare", &ok, &ok, "--blocks", "6"])
        .args(QUICK)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("/conn") && text.contains("=> "), "{text}");
    assert!(
        text.contains(" ns/conn") || text.contains(" instructions/conn"),
        "{text}"
    );
}

#[test]
fn malformed_configuration_names_the_field() {
    let ws = temp_workspace("[gate]\nmax_failure_rate = \"low\"\n");
    let out = std::process::Command::new(ratchet())
        .arg("--config")
        .arg(ws.path().join("harness.toml"))
        .args(["compare", "control", "treatment"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("harness.toml") && err.contains("max_failure_rate"),
        "{err}"
    );
}

#[test]
fn an_unknown_arm_is_refused_clearly() {
    let ws = temp_workspace("");
    let out = std::process::Command::new(ratchet())
        .arg("--config")
        .arg(ws.path().join("harness.toml"))
        .args(["compare", "control", "treatmnet"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("treatmnet") && err.contains("expected control"),
        "{err}"
    );
}

/// The cgroups `ratchet/<pid>-...` that process `pid` made, in every
/// mounted hierarchy.
fn cgroups_of(pid: u32) -> Vec<std::path::PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let mut found = Vec::new();
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 || !f[2].starts_with("cgroup") {
            continue;
        }
        let parent = std::path::Path::new(f[1]).join("ratchet");
        for e in std::fs::read_dir(&parent).into_iter().flatten().flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{pid}-"))
            {
                found.push(e.path());
            }
        }
    }
    found
}

/// A SIGKILLed ratchet runs no destructor: its servers die with it (parent
/// death signal) and the next ratchet removes the cgroups it left, the
/// rationing group among them, so no quota and no process outlives it.
#[test]
fn rationing_is_torn_down_after_ratchet_is_killed() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let ok = faulty_arm("ok");
    let mut child = std::process::Command::new(ratchet())
        .arg("--config")
        .arg(ws.path().join("harness.toml"))
        .args(["compare", &ok, &ok, "--blocks", "12"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = std::time::Instant::now();
    let ration = loop {
        if let Some(p) = cgroups_of(pid)
            .into_iter()
            .find(|p| p.to_string_lossy().ends_with("-ration"))
        {
            break p;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "no rationing group appeared for ratchet {pid}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // Let the servers join it and take load.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let members = std::fs::read_to_string(ration.join("cgroup.procs")).unwrap();
    assert!(
        !members.trim().is_empty(),
        "no server in {}",
        ration.display()
    );
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    for m in members.lines() {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", m.trim())).unwrap_or_default();
        assert!(
            stat.is_empty() || stat.contains(") Z"),
            "server {m} outlived ratchet: {stat}"
        );
    }
    assert!(!cgroups_of(pid).is_empty(), "nothing was left to clean up");
    let doctor = std::process::Command::new(ratchet())
        .arg("--config")
        .arg(ws.path().join("harness.toml"))
        .arg("doctor")
        .output()
        .unwrap();
    let left = cgroups_of(pid);
    assert!(
        left.is_empty(),
        "cgroups of the killed ratchet survived the next one: {left:?}\n{}",
        String::from_utf8_lossy(&doctor.stdout)
    );
}

/// A gate-only check, as one runs to see whether a server honours the
/// contract: a couple of samples, the gate, and no verdict.
#[test]
fn check_shows_the_gate_in_a_few_samples_and_fails_with_it() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let run = |mode: &str| {
        std::process::Command::new(ratchet())
            .arg("--config")
            .arg(ws.path().join("harness.toml"))
            .args(["check", &faulty_arm(mode), "--samples", "1"])
            .args(QUICK)
            .output()
            .unwrap()
    };
    let ok = run("ok");
    let text = String::from_utf8_lossy(&ok.stdout);
    assert!(
        ok.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(
        text.contains("pass") && text.contains("no interval or verdict below 6 samples"),
        "{text}"
    );
    let bad = run("wrong_bytes");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stdout).contains("FAIL"));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("the gate failed"));
}
