//! The second worked example of docs/your-server.md: examples/hello-rust,
//! a Rust server on std alone, built by cargo from the toolchain rustup
//! installed in root's home (mode 700 here, which the build user cannot
//! enter). `doctor`, `check`, `compare` and a 3-attempt `run` work from its
//! own configuration, the build reaching the toolchain through its own view
//! of the filesystem (`target.toolchain`) and nothing else of that home.

mod common;

use common::cli::show;
use common::example::{check, compare, example_repo, ratchet_with, run_three};
use common::referee::arm;
use common::*;

const EXAMPLE: &str = "examples/hello-rust";

#[test]
fn the_rust_example_builds_from_a_home_toolchain_and_runs() {
    let _g = exclusive();
    // A cache of its own, so every build of the test runs cargo.
    let cache = tempfile::tempdir().unwrap();
    std::env::set_var("RATCHET_BUILD_CACHE", cache.path());
    let (dir, config) = example_repo(EXAMPLE, &[]);

    let out = ratchet_with(&config, &["doctor"]);
    let doctor = show(&out);
    let build = doctor
        .lines()
        .find(|l| l.contains("target build"))
        .unwrap_or_else(|| panic!("{doctor}"));
    assert!(build.starts_with("OK"), "{doctor}");
    assert!(build.contains("(Rust server)"), "{build}");

    let report = check(&config, &["treatment"]);
    assert_eq!(arm(&report, 0)["gate"]["passed"], true, "{report}");

    let report = compare(&config, &["treatment", "playbook:one-write"]);
    for i in 0..2 {
        assert_eq!(
            arm(&report, i)["gate"]["passed"],
            true,
            "{}",
            arm(&report, i)
        );
    }
    // One write fewer a connection, counted by the tracepoint.
    let calls = |i| arm(&report, i)["syscalls_per_connection"].as_f64().unwrap();
    assert!(calls(1) < calls(0) - 0.5, "{} -> {}", calls(0), calls(1));

    run_three(dir.path(), EXAMPLE, &config);
}
