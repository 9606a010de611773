//! The warm start with the real emulator and guest kernel: the kernel
//! boots once per machine, every guest after that is restored from its
//! snapshot, a seed repeats a measurement to the instruction, and a
//! snapshot that does not load is booted afresh, never used.

mod common;

use common::*;
use serde_json::Value;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Small backlogs: these tests are of how a guest starts, not of a cost.
const SMALL: &str = "[emulator]\nbacklog = 32\nbatches = 1\n";

/// `cache`: ratchet's cache's parent, where snapshots are kept; `None`,
/// the user's own.
fn compare(cache: Option<&Path>, seed: u64) -> Output {
    let root = repo_root();
    let ws = temp_workspace(&format!(
        "[paths]\ntreatment = \"{}\"\ncontrol = \"{}\"\n{SMALL}",
        root.join("treatment").display(),
        root.join("control").display()
    ));
    let mut c = Command::new(ratchet());
    if let Some(cache) = cache {
        c.env("XDG_CACHE_HOME", cache);
    }
    c.arg("--config")
        .arg(ws.path().join("harness.toml"))
        .args(["compare", "--meter", "emulated", "--json", "--samples", "6"])
        .args(["--seed", &seed.to_string(), "treatment", "treatment"])
        .output()
        .unwrap()
}

fn samples(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "compare failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    r["arms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["cost_per_connection"]["samples"].clone())
        .collect()
}

/// Every snapshot's state file in `cache`, with its inode, sorted.
fn snapshots(cache: &Path) -> Vec<(PathBuf, u64)> {
    let mut all: Vec<(PathBuf, u64)> = std::fs::read_dir(cache.join("ratchet/guest-snapshots"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| d.path().join("state"))
        .filter_map(|s| Some((s.clone(), std::fs::metadata(&s).ok()?.ino())))
        .collect();
    all.sort();
    all
}

fn user_cache() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache"))
}

/// In the user's own cache, as a run finds it: the first measurement may
/// boot (a new build of ratchet is a new machine), the next does not.
#[test]
fn guests_are_restored_from_one_boot_and_a_seed_repeats_them_exactly() {
    let _g = exclusive();
    let first = samples(&compare(None, 5));
    let made = snapshots(&user_cache());
    assert!(
        !made.is_empty(),
        "no snapshot in {}",
        user_cache().display()
    );
    let again = samples(&compare(None, 5));
    assert_eq!(first, again, "the same seed, the same guests");
    assert_eq!(snapshots(&user_cache()), made, "no second boot");
    let other = samples(&compare(None, 6));
    assert_ne!(first, other, "guests of another seed are seeded apart");
}

#[test]
fn a_snapshot_that_does_not_load_is_booted_afresh_and_never_used() {
    let _g = exclusive();
    let cache = tempfile::tempdir().unwrap();
    samples(&compare(Some(cache.path()), 1));
    let (state, ino) = snapshots(cache.path()).pop().unwrap();
    let size = std::fs::metadata(&state).unwrap().len();
    let damaged = std::fs::OpenOptions::new()
        .write(true)
        .open(&state)
        .unwrap();
    damaged.set_len(size / 2).unwrap();
    let out = compare(Some(cache.path()), 1);
    samples(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("restoring the guest from {}", state.display()))
            && stderr.contains("booting the guest kernel afresh"),
        "{stderr}"
    );
    let fresh = snapshots(cache.path());
    assert_eq!(fresh.len(), 1, "{fresh:?}");
    assert_eq!(fresh[0].0, state, "the same machine's snapshot, made again");
    assert_ne!(fresh[0].1, ino, "a new file, not the damaged one");
    assert!(std::fs::metadata(&state).unwrap().len() > size / 2);
}
