//! Endurance on real servers: one process serving 100,000 connections on
//! the host, where a trial's fresh server serves a few thousand. Each leak
//! fails with its own reason, read from what the server holds as it grows
//! rather than from the failure it would end in, a crash past every
//! trial's count fails as the exit it is, and the honest server passes.

mod common;

use common::cli::show;
use common::referee::arm;
use common::*;
use serde_json::Value;
use std::process::Command;

/// `ratchet check ARMS --samples 1 --json` at the tests' quick settings:
/// the report, whatever the exit (a failed gate fails the command).
fn check(arms: &[String]) -> Value {
    let _g = exclusive();
    // The trials' floor of completed connections is not what these tests
    // are about: on a slow host (an AMD EPYC VM whose generator drove 8,500
    // connections a second, 2026-12-07) the heap-leaking arm, dearer per
    // connection, completed 675 of the default 1,000 in a window and
    // failed a trial for it, not for its leak.
    let ws = temp_workspace("[gate]\nmin_completed = 100\n");
    let out = Command::new(ratchet())
        .arg("--config")
        .arg(ws.path().join("harness.toml"))
        .arg("check")
        .args(arms)
        .args(["--samples", "1", "--json"])
        .args(QUICK)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("check printed no report: {}", show(&out)))
}

fn endurance(report: &Value, i: usize) -> &Value {
    &arm(report, i)["endurance"]
}

fn reasons(report: &Value, i: usize) -> Vec<String> {
    endurance(report, i)["gate"]["reasons"]
        .as_object()
        .map(|r| r.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn each_leak_and_a_late_crash_fail_endurance_with_their_own_reason() {
    let modes = [
        "ok",
        "leak_heap",
        "leak_fd",
        "leak_socket",
        // Past any trial's count at these settings, inside 100,000.
        "abort_after --after 70000",
    ];
    let arms: Vec<String> = modes.iter().map(|m| faulty_arm(m)).collect();
    let report = check(&arms);
    let e = endurance(&report, 0);
    assert_eq!(e["gate"]["passed"], true, "the honest server: {e}");
    // The checkpoints stop new connections, not those under way.
    assert!(e["completed"].as_u64().unwrap() >= 100_000, "{e}");
    assert!(e["footprints"].as_array().unwrap().len() >= 10, "{e}");
    let expected = [
        (1, "memory_growth"),
        (2, "descriptor_growth"),
        (3, "socket_growth"),
        (4, "server_exited"),
    ];
    for (i, reason) in expected {
        assert_eq!(
            endurance(&report, i)["gate"]["passed"],
            false,
            "{}: {}",
            modes[i],
            endurance(&report, i)
        );
        assert!(
            reasons(&report, i).contains(&reason.to_string()),
            "{} failed endurance for {:?}, not {reason}: {}",
            modes[i],
            reasons(&report, i),
            endurance(&report, i)["gate"]["detail"]
        );
    }
    // The heap leak and the late crash pass every trial: only endurance
    // sees them.
    for i in [1, 4] {
        assert_eq!(
            arm(&report, i)["gate"]["passed"],
            true,
            "{}",
            arm(&report, i)["gate"]
        );
    }
    // 16 KiB a connection, read from growth: nothing ran out.
    let per = endurance(&report, 1)["gate"]["reasons"]["memory_growth"]
        .as_u64()
        .unwrap();
    assert!((15_000..18_000).contains(&per), "{per} bytes a connection");
    let detail = endurance(&report, 4)["gate"]["detail"].to_string();
    assert!(detail.contains("exited after"), "{detail}");
}
