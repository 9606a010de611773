//! Running a ratchet subcommand in a test's repository and reading what it
//! printed: shared by the review tests and the loop's, which all need a
//! failure message that shows both streams.

use super::ratchet;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

/// Both streams of a finished command, for a failure message.
pub fn show(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `ratchet --config ROOT/harness.toml ARGS`, run to the end.
pub fn ratchet_in(root: &Path, args: &[&str]) -> Output {
    Command::new(ratchet())
        .arg("--config")
        .arg(root.join("harness.toml"))
        .args(args)
        .output()
        .unwrap()
}

/// [`ratchet_in`] that must succeed and print JSON.
pub fn json_of(root: &Path, args: &[&str]) -> Value {
    let out = ratchet_in(root, args);
    assert!(
        out.status.success(),
        "ratchet {args:?} failed: {}",
        show(&out)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("ratchet {args:?} printed no JSON ({e}): {}", show(&out)))
}

/// A JSON number, or a failure naming what was there instead.
pub fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}
