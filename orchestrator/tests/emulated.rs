//! The emulated meter with the real emulator, guest kernel, servers and
//! load generator: counts are exact, arms are measured in instructions and
//! gated, and a guest that hangs, crashes or idles is named, never a crash
//! of ratchet, and never outlives it.

mod common;

use common::referee::comparison;
use common::*;
use serde_json::Value;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Two batches a trial: enough for a gate, and counts are exact. The
/// `[emulator]` table is last: a test's bare keys land in it.
const QUICK_GUEST: &str = "[emulator]\nbatches = 2\n";

/// A workspace whose `treatment` and `control` are the repository's.
fn workspace(emulator_keys: &str) -> tempfile::TempDir {
    let root = repo_root();
    temp_workspace(&format!(
        "[paths]\ntreatment = \"{}\"\ncontrol = \"{}\"\n{QUICK_GUEST}{emulator_keys}",
        root.join("treatment").display(),
        root.join("control").display()
    ))
}

fn compare(
    extra_config: &str,
    arms: &[&str],
    blocks: usize,
    env: &[(&str, &str)],
) -> std::process::Output {
    let ws = workspace(extra_config);
    Command::new(ratchet())
        .envs(env.iter().copied())
        .arg("--config")
        .arg(ws.path().join("harness.toml"))
        .args([
            "compare",
            "--meter",
            "emulated",
            "--json",
            "--blocks",
            &blocks.to_string(),
        ])
        .args(arms)
        .output()
        .unwrap()
}

fn report(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "compare failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("compare --json prints JSON")
}

/// QEMU processes whose command line names `needle`.
fn emulators_naming(needle: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    let c = String::from_utf8_lossy(&c);
                    c.contains("qemu-system") && c.contains(needle)
                })
                .unwrap_or(false)
        })
        .collect()
}

/// `doctor` boots two guests: the calibration loop must be counted to the
/// instruction, and a known load on each vCPU of a live guest must be
/// counted on that vCPU (under icount QEMU counts a block on the vCPU that
/// translated it: docs/emulated-meter.md, "Which vCPU ran it").
#[test]
fn the_plugin_counts_a_loop_of_known_length_exactly_on_the_vcpu_that_ran_it() {
    let _g = exclusive();
    let out = Command::new(ratchet())
        .arg("--config")
        .arg(repo_root().join("harness.toml"))
        .arg("doctor")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| {
            l.get(5..)
                .is_some_and(|check| check.starts_with("emulated meter"))
        })
        .unwrap_or_else(|| panic!("doctor printed no emulated meter line:\n{text}"));
    assert!(
        line.starts_with("OK")
            && line.contains("exact; a loop of 200001 instructions counted 200001"),
        "{line}"
    );
    let placed = text
        .lines()
        .find(|l| {
            l.get(5..)
                .is_some_and(|check| check.starts_with("emulated attribution"))
        })
        .unwrap_or_else(|| panic!("doctor printed no emulated attribution line:\n{text}"));
    assert!(
        placed.starts_with("OK")
            && placed
                .contains("a loop of 40001 instructions on each of 6 vCPUs counted exactly there"),
        "{placed}"
    );
}

/// The arms of one measurement that several tests read, each its own arm:
/// the repository's two servers, an honest fixture, and three that misbehave
/// in the guest. Emulated counts do not depend on what else a guest ran,
/// so one measurement serves them all (each 2-arm compare booted guests of
/// its own), and a misbehaving arm that leaked into an honest one's trials
/// would fail the honest gates these tests assert.
const SHARED_ARMS: [&str; 6] = ["treatment", "control", "ok", "bursty", "defer", "crash"];

/// The shared measurement, made by the first test that needs it.
fn shared() -> &'static Value {
    static SHARED: OnceLock<Value> = OnceLock::new();
    SHARED.get_or_init(|| {
        let arms = SHARED_ARMS.map(|a| match a {
            "treatment" | "control" => a.to_string(),
            // Puts off a 20 ms spin until its window has closed.
            "defer" => format!("{} --spin-us 20000", faulty_arm("defer_work")),
            "crash" => "cmd:/bin/sh -c 'echo c > /proc/sysrq-trigger; sleep 60'".to_string(),
            fixture => faulty_arm(fixture),
        });
        let arms: Vec<&str> = arms.iter().map(String::as_str).collect();
        report(&compare("", &arms, 6, &[]))
    })
}

/// The index of `name` in [`SHARED_ARMS`].
fn arm(name: &str) -> usize {
    SHARED_ARMS.iter().position(|a| *a == name).unwrap()
}

#[test]
fn compare_counts_every_arm_in_emulated_instructions_and_gates_it() {
    let _g = exclusive();
    let r = shared();
    assert_eq!(r["meter"]["event"], "instructions", "{}", r["meter"]);
    assert_eq!(r["meter"]["source"], "emulated", "{}", r["meter"]);
    assert_eq!(r["meter"]["unit"], "instructions");
    assert_eq!(r["environment"]["meter_source"], "emulated");
    assert!(r["environment"]["emulator"]
        .as_str()
        .unwrap()
        .contains("QEMU"));
    for i in [arm("treatment"), arm("control")] {
        let arm = &r["arms"][i];
        assert_eq!(arm["gate"]["passed"], true, "arm {i}: {arm}");
        // A backlog has no generator beside the server and no client that
        // timed a connection: what was not measured is absent, never 0.
        for unmeasured in ["generator_busy", "generator_headroom", "latency_us"] {
            assert!(arm.get(unmeasured).is_none(), "arm {i}: {arm}");
        }
        for t in r["trials"][i].as_array().unwrap() {
            assert!(t.get("generator_busy").is_none(), "{t}");
            assert!(t.get("latency_us").is_none(), "{t}");
            let cost = t["cost_per_connection"].as_f64().unwrap();
            let completed = t["window_completed"].as_u64().unwrap();
            let (server, generator, guest) = (
                t["emulated"]["server"].as_u64().unwrap(),
                t["emulated"]["generator"].as_u64().unwrap(),
                t["emulated"]["guest"].as_u64().unwrap(),
            );
            let expected = guest as f64 / completed as f64;
            assert!((cost - expected).abs() <= expected * 1e-12, "{t}");
            assert!(
                server > 0 && generator > 0 && guest == server + generator,
                "{t}"
            );
            assert!(
                t["slice_costs"].as_array().unwrap().is_empty(),
                "guest ns are not instructions"
            );
        }
    }
    // The Go control does more work per connection than the io_uring server.
    let control = comparison(r, arm("control"));
    assert!(control["ratio_median"].as_f64().unwrap() > 1.2, "{control}");
}

#[test]
fn a_guest_that_hangs_is_stopped_and_named() {
    let _g = exclusive();
    let tmp = tempfile::tempdir().unwrap();
    let tmpdir = tmp.path().to_str().unwrap();
    let start = Instant::now();
    // 100 or 200 ms of work per connection: the first backlog keeps the
    // guest busy for 5 s of guest time (the batch's timeout), over a minute
    // of the host's. A guest starts warm in well under a second, so each
    // hang is an arm's: the guest is stopped while that arm runs, and the
    // arm is blamed; the other is measured again in a fresh guest, and
    // hangs in its turn.
    let slow: Vec<String> = [100_000, 200_000]
        .iter()
        .map(|us| format!("{} --spin-us {us}", faulty_arm("spin")))
        .collect();
    let r = report(&compare(
        "timeout_s = 5\n",
        &[&slow[0], &slow[1]],
        6,
        &[("TMPDIR", tmpdir)],
    ));
    for (i, arm) in slow.iter().enumerate() {
        let stopped = &r["trials"][i][0]["gate"];
        assert_eq!(stopped["passed"], false, "{stopped}");
        let why = stopped["detail"][0].as_str().unwrap_or_default();
        assert!(
            why.contains("still running after 5 s (emulator.timeout_s)")
                && why.contains(&format!("was stopped while {arm} ran in it")),
            "{stopped}"
        );
    }
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
    assert!(
        emulators_naming(tmpdir).is_empty(),
        "an emulator outlived its measurement"
    );
}

#[test]
fn no_emulator_survives_a_sigkill_of_ratchet() {
    let _g = exclusive();
    let tmp = tempfile::tempdir().unwrap();
    let tmpdir = tmp.path().to_str().unwrap().to_string();
    let ws = workspace("");
    let mut child = Command::new(ratchet())
        .env("TMPDIR", &tmpdir)
        .arg("--config")
        .arg(ws.path().join("harness.toml"))
        .args([
            "compare",
            "--meter",
            "emulated",
            "--blocks",
            "6",
            "treatment",
            "control",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while emulators_naming(&tmpdir).len() < 2 {
        assert!(Instant::now() < deadline, "no emulator started");
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !emulators_naming(&tmpdir).is_empty() {
        assert!(
            Instant::now() < deadline,
            "emulators outlived ratchet: {:?}",
            emulators_naming(&tmpdir)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_server_that_idles_in_the_guest_is_reported_not_busy() {
    let _g = exclusive();
    let r = shared();
    let (ok, bursty) = (arm("ok"), arm("bursty"));
    assert_eq!(r["regime"]["regime"], "saturated", "{}", r["regime"]);
    assert_eq!(r["arms"][ok]["unsaturated_samples"], 0, "{}", r["arms"]);
    // A bursty server naps 5 ms every five connections while its backlog
    // waits: every batch shows it, in every guest.
    assert_eq!(r["arms"][bursty]["unsaturated_samples"], 6, "{}", r["arms"]);
    let (busy, honest) = (
        r["arms"][bursty]["sut_busy"].as_f64().unwrap(),
        r["arms"][ok]["sut_busy"].as_f64().unwrap(),
    );
    assert!(busy < 0.3 && honest > 0.6, "{busy} {honest}: {}", r["arms"]);
    assert_eq!(comparison(r, bursty)["verdict"], "invalid");
}

/// A server that answers its backlog, waits for the window to close and
/// then does the work it put off is not scored on what it left out.
#[test]
fn a_server_that_defers_work_out_of_its_windows_fails_its_gate() {
    let _g = exclusive();
    let r = shared();
    assert_eq!(
        r["arms"][arm("ok")]["gate"]["passed"],
        true,
        "{}",
        r["arms"]
    );
    let gate = &r["arms"][arm("defer")]["gate"];
    assert_eq!(gate["passed"], false, "{gate}");
    assert!(
        gate["reasons"]["deferred_work"].as_u64().unwrap() > 0,
        "{gate}"
    );
    assert_eq!(comparison(r, arm("defer"))["verdict"], "invalid");
}

/// A server that never goes still (a thread on a 50 us timer) ends its
/// windows once its clients are answered, and its idle work between them
/// fails its gate.
#[test]
fn a_server_that_never_goes_still_is_measured_in_bounded_time_and_caught() {
    let _g = exclusive();
    let start = Instant::now();
    let r = report(&compare(
        "",
        &["treatment", &faulty_arm("restless")],
        6,
        &[],
    ));
    // 20 s measured; a window held open until the batch deadline took longer.
    assert!(
        start.elapsed() < Duration::from_secs(120),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(r["arms"][0]["gate"]["passed"], true, "{}", r["arms"]);
    let gate = &r["arms"][1]["gate"];
    assert!(
        gate["reasons"]["deferred_work"].as_u64().unwrap() > 0,
        "{gate}"
    );
}

/// A server runs unprivileged in the guest too, so it cannot crash the
/// guest's kernel through sysrq (as root it did, and its guest ended as
/// "the guest kernel panicked"): it fails its own gate, saying why, and the
/// other arms are measured.
#[test]
fn a_server_that_tries_to_crash_the_guest_kernel_cannot_and_the_others_are_measured() {
    let _g = exclusive();
    let r = shared();
    let crash = arm("crash");
    assert_eq!(r["arms"][0]["gate"]["passed"], true, "{}", r["arms"]);
    assert_eq!(r["arms"][crash]["gate"]["passed"], false, "{}", r["arms"]);
    let detail = r["arms"][crash]["gate"].to_string();
    assert!(detail.contains("Permission denied"), "{detail}");
    assert!(!detail.contains("panicked"), "{detail}");
    assert_eq!(comparison(r, crash)["verdict"], "invalid");
    assert!(r["trials"][0][5]["cost_per_connection"].as_f64().is_some());
}

fn emulated_compare_error(emulator_keys: &str) -> String {
    let ws = workspace(emulator_keys);
    let out = Command::new(ratchet())
        .arg("--config")
        .arg(ws.path().join("harness.toml"))
        .args(["compare", "--meter", "emulated", "treatment", "control"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn a_missing_emulator_under_meter_emulated_is_an_error_never_a_fallback() {
    let _g = exclusive();
    let err = emulated_compare_error("qemu = \"/nonexistent/qemu-system-x86_64\"\n");
    assert!(
        err.contains("emulator.qemu") && err.contains("/nonexistent/qemu-system-x86_64"),
        "{err}"
    );
    let err = emulated_compare_error("kernel = \"/nonexistent/vmlinuz\"\n");
    assert!(
        err.contains("emulator.kernel") && err.contains("scripts/setup.sh"),
        "{err}"
    );
}

#[test]
fn a_bad_emulator_setting_is_named_with_its_range() {
    let _g = exclusive();
    let err = emulated_compare_error("backlog = 100000\n");
    assert!(
        err.contains("emulator.backlog") && err.contains("4096"),
        "{err}"
    );
}

/// A flag the emulated meter would ignore is refused, naming the flag and
/// the setting that does the job, before anything is built or measured.
#[test]
fn a_flag_the_emulated_meter_would_ignore_is_refused_by_name() {
    let _g = exclusive();
    for (regime, flag, value, names) in [
        ("backlog", "--connections", "32", "emulator.backlog"),
        ("backlog", "--window-ms", "500", "emulator.batches"),
        ("backlog", "--warmup-ms", "200", "emulator.warmup_batches"),
        ("backlog", "--schedule", "duet", "in blocks"),
        ("live", "--window-ms", "500", "emulator.window_connections"),
    ] {
        let out = compare(
            &format!("regime = \"{regime}\"\n"),
            &["treatment", "control", flag, value],
            6,
            &[],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag} {value} in {regime}: {err}");
        assert!(
            err.contains(&format!("{flag} "))
                && err.contains("has no effect")
                && err.contains(names),
            "{flag} {value} in {regime}: {err}"
        );
        assert!(err.contains(&format!("({regime} regime)")), "{err}");
    }
}
