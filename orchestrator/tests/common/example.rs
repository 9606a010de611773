//! The worked examples of docs/your-server.md as a user runs them: each in
//! a git repository of its own, from its own harness.toml with test-sized
//! settings added.

use super::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Test-sized settings, added to the example's own configuration: short
/// windows in task-clock, and a coarse threshold so that the A/A check's
/// demands stay small (the tests are of the plumbing, not of the ideas).
/// The connections in flight stay the default 256: with 64, eight round
/// trips a connection left the server waiting on its clients in a third
/// of the windows, which are then not scored, and too few remained.
const SHORT: &str = r#"
[meter]
event = "task-clock"
[trial]
warmup_ms = 150
window_ms = 400
[gate]
min_completed = 50
endurance_connections = 10000
[compare]
samples = 6
threshold = 0.3
[duet]
window_ms = 400
"#;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        if name == "results" {
            continue;
        }
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(&name));
        } else {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
}

/// A git repository holding the example `example` and the control at their own paths, its harness.toml
/// with [`SHORT`] added, and `playbook` entries beside its own.
pub fn example_repo(example: &str, playbook: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    copy_dir(&repo_root().join(example), &root.join(example));
    // The frozen control, for an example that measures against it.
    copy_dir(&repo_root().join("control"), &root.join("control"));
    let config = root.join(example).join("harness.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "[run]\n",
        "[run]\nsmoke_window_ms = 200\nprofile = false\nsuspicious_gain = 20.0\n",
    );
    std::fs::write(&config, format!("{text}{SHORT}")).unwrap();
    for (name, entry) in playbook {
        std::fs::write(
            root.join(example)
                .join("knowledge-base/playbook")
                .join(format!("{name}.toml")),
            entry,
        )
        .unwrap();
    }
    init_repo(root, "the example");
    (dir, config)
}

pub fn ratchet_with(config: &Path, args: &[&str]) -> Output {
    Command::new(ratchet())
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .unwrap()
}

pub fn compare(config: &Path, arms: &[&str]) -> serde_json::Value {
    let out = ratchet_with(config, &[&["compare"], arms, &["--json"]].concat());
    assert!(out.status.success(), "{}", cli::show(&out));
    serde_json::from_slice(&out.stdout).expect("compare --json prints JSON")
}

/// `ratchet check`: each arm's gate in two short samples, no ratio. It
/// fails when a gate does, so its document is read either way.
pub fn check(config: &Path, arms: &[&str]) -> serde_json::Value {
    let quick = ["--json", "--window-ms", "400", "--warmup-ms", "150"];
    let out = ratchet_with(config, &[&["check"], arms, &quick].concat());
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check --json prints JSON ({e}): {}", cli::show(&out)))
}

/// A 3-attempt `run` of `example` from `config`, checked as every example's
/// is: it ends on its budget, each attempt was decided, and its branch
/// touches the server's sources and nothing else. Returns the run's output,
/// attempts and `run.json` for the example's own checks.
pub fn run_three(
    root: &Path,
    example: &str,
    config: &Path,
) -> (String, Vec<serde_json::Value>, serde_json::Value) {
    let out = ratchet_with(config, &["run", "--max-iterations", "3"]);
    let log = cli::show(&out);
    assert!(out.status.success(), "{log}");
    let (_, run_dir) = only_run(&root.join(example));
    let attempts = attempts(&run_dir);
    assert_eq!(attempts.len(), 3, "{}", verdict_details(&run_dir));
    for a in &attempts {
        let v = a["verdict"].as_str().unwrap();
        assert!(
            ["keep", "discard", "promising", "no_op"].contains(&v),
            "{}",
            verdict_details(&run_dir)
        );
    }
    let run = run_json(&run_dir);
    assert_eq!(
        run["status"], "stopped",
        "three attempts, then the budget: {run}"
    );
    let branch = run["branch"].as_str().unwrap();
    let changed = git(root, &["diff", "--name-only", "main", branch]);
    for path in changed.lines() {
        assert!(
            path.starts_with(&format!("{example}/server/src/")),
            "{path}"
        );
    }
    (log, attempts, run)
}
