//! Names the git revision ratchet was built from, so every record says
//! which code made it (`ratchet_version` in its environment), not only the
//! crate's version, which no commit changes.

use std::process::Command;

fn main() {
    let rev = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "unknown revision".into());
    println!("cargo:rustc-env=RATCHET_GIT_REV={rev}");
    // A new commit moves HEAD or the branch it names.
    for path in ["../.git/HEAD", "../.git/refs/heads", "../.git/packed-refs"] {
        println!("cargo:rerun-if-changed={path}");
    }
}
