//! Untrusted code runs unprivileged: a server that tries to reach ratchet
//! (read its memory, signal it, write outside its directory, become root,
//! use a capability) fails at every attempt, and is measured like any
//! other server.

mod common;

use common::*;

#[test]
fn a_hostile_server_cannot_reach_ratchet_and_is_measured_like_any_other() {
    let _g = exclusive();
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: ratchet has no privilege to drop here");
        return;
    }
    let ws = temp_workspace("");
    let plant = ws.path().join("planted");
    let hostile = format!("{} --plant {}", faulty_arm("hostile"), plant.display());
    let (report, out) = compare_json(
        &ws.path().join("harness.toml"),
        &[&faulty_arm("ok"), &hostile],
        6,
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for i in 0..2 {
        assert_eq!(
            report["arms"][i]["gate"]["passed"], true,
            "arm {i}: {}\n{stderr}",
            report["arms"][i]["gate"]
        );
    }
    assert!(!plant.exists(), "the server wrote {}", plant.display());
    let privilege = report["environment"]["privilege"].as_str().unwrap();
    assert!(
        privilege.contains("no capabilities") && !privilege.starts_with("warning"),
        "{privilege}"
    );
    // It serves alike: the same fixture, so the ratio is near 1.
    let ratio = report["comparisons"][0]["ratio_median"].as_f64().unwrap();
    assert!((0.9..1.1).contains(&ratio), "{ratio}");
}
