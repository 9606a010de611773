//! The referee's gate against real servers and the real load generator:
//! each purpose-built broken server (wrong bytes, truncated, an extra byte,
//! never closes, resets, dies, never listens, an impostor on its port,
//! misbehaves only in the warm-up, defers its teardown) fails with the right
//! reason and scores 0, and never costs the honest server beside it its own
//! gate, nor an honest slow one its gate in the probe's starved allotment; `ratchet check` shows the gate alone. They belong together because
//! each is one way a server can answer wrongly, caught before any cost is
//! believed.

mod common;

use common::referee::{arm, compare_at_defaults, comparison, judge_modes, reasons};
use common::*;
use serde_json::Value;
use std::sync::OnceLock;

/// Every broken mode the tests below judge beside the honest fixture.
const JUDGED: [&str; 11] = [
    "wrong_bytes",
    "truncated",
    "extra_byte",
    "no_close",
    "reset",
    "drop_some",
    "die",
    "status_500",
    "no_read",
    "early_wrong",
    "defer_close",
];

/// One compare of the honest fixture beside every mode in [`JUDGED`], made
/// by the first test that needs it: each test reads its own arm. A pair
/// per mode measured the honest server eleven times over (10 s each); a
/// broken arm is judged on its own trials, and the test at the defaults
/// below shows the honest one keeps its gate beside all of them.
fn judged() -> &'static Value {
    static REPORT: OnceLock<Value> = OnceLock::new();
    REPORT.get_or_init(|| {
        let _g = exclusive();
        judge_modes(&JUDGED)
    })
}

/// `mode` beside the honest fixture fails its gate naming `reason`, scores
/// 0, and leaves its comparison with the honest one `invalid`.
fn assert_fails_with(mode: &str, reason: &str) {
    let report = judged();
    let i = 1 + JUDGED.iter().position(|m| *m == mode).unwrap();
    let gate = &arm(report, i)["gate"];
    assert_eq!(gate["passed"], false, "{mode} passed the gate: {report}");
    assert!(
        reasons(report, i).iter().any(|r| r == reason),
        "{mode}: expected reason {reason}, got {:?}",
        reasons(report, i)
    );
    assert_eq!(arm(report, i)["score"], 0.0);
    let comparison = comparison(report, i);
    assert_eq!(comparison["verdict"], "invalid", "{mode}: {comparison}");
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

/// Right the other way: an honest server of long connections keeps its
/// gate. The probe starves every arm to a twentieth of the core with 256
/// clients each, so such a server's clients wait there past their 2 s
/// deadline through the probe's doing, not the server's: judged on those
/// timeouts, the keep-alive example (eight requests a connection) was
/// dropped in the probe on CI (2026-12-07), and so was a server of 500 us
/// a connection here (717 of its 915 clients). The trials, at the allotment the probe sizes, still
/// judge every connection's timeout (the test above).
#[test]
fn an_honest_server_of_long_connections_is_not_dropped_by_the_probe() {
    let _g = exclusive();
    // 600 us a connection: in a 700 ms window, even at the most of the
    // core an arm is given, it serves a few hundred, not the default 1000.
    let ws = temp_workspace("[gate]\nmin_completed = 200\n");
    let slow = format!("{} --spin-us 600", faulty_arm("spin"));
    let (report, _) = compare_json(
        &ws.path().join("harness.toml"),
        &[&faulty_arm("ok"), &slow],
        6,
        &[],
    );
    assert!(report["dropped"][1].is_null(), "{}", report["dropped"]);
    for i in 0..2 {
        assert_eq!(arm(&report, i)["gate"]["passed"], true, "{report}");
    }
    assert_eq!(report["regime"]["regime"], "saturated", "{report}");
    assert_eq!(comparison(&report, 1)["verdict"], "worse", "{report}");
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
