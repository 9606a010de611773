//! What the referee_* test files share: reading an arm's gate out of a
//! `compare --json` report, the duet of a broken fixture mode beside the
//! honest one, and a compare at the repository's own defaults.

use super::{compare_json, faulty_arm, ratchet, repo_root, temp_workspace};
use serde_json::Value;

/// Arm `i` of a `compare --json` report.
pub fn arm(report: &Value, i: usize) -> &Value {
    &report["arms"][i]
}

/// Arm `i`'s comparison with arm 0 in a `compare --json` report.
pub fn comparison(report: &Value, i: usize) -> &Value {
    report["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["arm"] == i && c["baseline"] == 0)
        .unwrap_or_else(|| panic!("no comparison of arm {i} with arm 0: {report}"))
}

/// The reasons arm `i` failed its gate, by name.
pub fn reasons(report: &Value, i: usize) -> Vec<String> {
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
pub fn judge_mode(mode: &str) -> Value {
    judge_modes(&[mode])
}

/// The honest fixture (arm 0) beside each of `modes` (arms 1 on), in one
/// compare at the tests' quick settings; the honest arm must pass.
pub fn judge_modes(modes: &[&str]) -> Value {
    let ws = temp_workspace("");
    let mut arms = vec![faulty_arm("ok")];
    arms.extend(modes.iter().map(|m| faulty_arm(m)));
    let args: Vec<&str> = arms.iter().map(String::as_str).collect();
    let (report, _) = compare_json(&ws.path().join("harness.toml"), &args, 6, &[]);
    assert_eq!(report["schedule"], "duet", "{report}");
    assert_eq!(
        arm(&report, 0)["gate"]["passed"],
        true,
        "the honest server sharing the windows with {modes:?} failed: {}",
        arm(&report, 0)["gate"]
    );
    report
}

/// `ratchet compare ARGS --json` on the repository's own harness.toml: the
/// defaults a user gets, not the tests' quick settings.
pub fn compare_at_defaults(args: &[&str]) -> Value {
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

/// A check of the host's timed regime, measured a second time if the first
/// measurement fails it. On a shared 2-vCPU VM a minute of a noisy
/// neighbour can push one compare's windows out of the regime (CI saw an
/// honest arm's sample unsaturated, here every run passes). A broken
/// feature fails both looks; each failure names its numbers first, so a
/// truncated CI log still says which.
pub fn holds_on_a_second_look(
    measure: impl Fn() -> Value,
    check: impl Fn(&Value) -> Result<(), String>,
) {
    let first = measure();
    let Err(why) = check(&first) else { return };
    eprintln!("first look failed, measuring again: {why}");
    let second = measure();
    if let Err(again) = check(&second) {
        panic!("failed twice: {again} (first: {why})\n{second}");
    }
}
