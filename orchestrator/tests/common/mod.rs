//! Shared set-up for ratchet's integration tests: the real binary, the real
//! servers, temporary workspaces, and one measurement at a time (the tests
//! share one SUT core, and a benchmark with a neighbour is not a benchmark).

#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, OnceLock};

pub fn ratchet() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ratchet"))
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Serialises the tests of one test binary that measure.
pub fn exclusive() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The faulty fixture server, compiled once per test binary.
pub fn faulty_server() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ratchet-fixture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("faulty_server");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/faulty_server.c");
        let status = Command::new("cc")
            .args(["-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-o"])
            .arg(&out)
            .arg(src)
            .arg("-luring")
            .status()
            .unwrap();
        assert!(status.success(), "fixture server failed to compile");
        out
    })
    .clone()
}

pub fn faulty_arm(mode: &str) -> String {
    format!("cmd:{} --mode {mode}", faulty_server().display())
}

/// Short windows so a test trial takes about a second.
pub const QUICK: &[&str] = &[
    "--window-ms",
    "700",
    "--warmup-ms",
    "200",
    "--connections",
    "64",
];

pub fn compare_json(
    config: &Path,
    arms: &[&str],
    blocks: usize,
    extra: &[&str],
) -> (Value, Output) {
    let mut cmd = Command::new(ratchet());
    cmd.arg("--config")
        .arg(config)
        .arg("compare")
        .args(arms)
        .args(["--blocks", &blocks.to_string(), "--json"])
        .args(QUICK)
        .args(extra);
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "ratchet compare failed: {}\n{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    (
        serde_json::from_str(&text).expect("compare --json prints JSON"),
        out,
    )
}

/// A temporary directory holding a harness.toml (with `extra` appended).
pub fn temp_workspace(extra: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("harness.toml"), extra).unwrap();
    dir
}

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
