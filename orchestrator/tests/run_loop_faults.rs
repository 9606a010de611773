//! `ratchet run` end to end under faults from outside the change it is
//! measuring: SIGKILL and SIGINT mid-iteration then `--resume`, a second run
//! on the same core, a build that never ends, a full disk. They belong
//! together because each checks the same promise: the journal stays whole,
//! no attempt is lost or repeated, and no server or compiler outlives ratchet.

mod common;

use common::cli::show;
use common::run_loop::{assert_clean, planted_playbook};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Waits until the journal at `path` has `n` lines: how a test knows an
/// attempt is recorded, to time its fault after it. The limit only bounds
/// a hang: an A/A check on a noisy host may ask for more samples, and the
/// first keep runs endurance, so a fresh clone's suite once took over 120 s
/// to its first line where the test alone takes 60 s in all. A failure
/// shows what the run said (`run.stderr` in its TMPDIR).
fn wait_for_lines(path: &Path, n: usize, limit: Duration, stderr: &Path) {
    let start = Instant::now();
    while std::fs::read_to_string(path).map_or(0, |t| t.lines().count()) < n {
        assert!(
            start.elapsed() < limit,
            "no {n} journal lines in {limit:?}; the run said:\n{}",
            std::fs::read_to_string(stderr).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Directories under `tmp` holding an exported copy of the Go control.
fn control_sources_in(tmp: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("main.go").exists())
        .collect()
}

/// Servers built by ratchet still running (the tests run one ratchet at a
/// time, and builds live in its cache outside the repository).
fn servers_running(_root: &Path) -> String {
    let cache =
        std::env::var("RATCHET_BUILD_CACHE").unwrap_or_else(|_| "/var/cache/ratchet/builds".into());
    let out = Command::new("pgrep")
        .args(["-af", &format!("{cache}/(treatment|control)-")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Starts `ratchet run` in the background, quietly, for fault injection,
/// with its temporary files in `tmp` so a test can see what a kill leaves.
fn spawn_run(root: &Path, tmp: &Path, args: &[&str]) -> std::process::Child {
    Command::new(ratchet())
        .env("TMPDIR", tmp)
        .arg("--config")
        .arg(root.join("harness.toml"))
        .arg("run")
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(tmp.join("run.stderr")).unwrap())
        .spawn()
        .unwrap()
}

#[test]
fn a_second_run_on_the_same_core_is_refused() {
    let _g = exclusive();
    let repo = fixture_repo("", &planted_playbook());
    let root = repo.path();
    // The first run has a TMPDIR of its own, the second the default: the
    // lock must not live in either.
    let tmp = tempfile::tempdir().unwrap();
    let mut first = spawn_run(root, tmp.path(), &[]);
    std::thread::sleep(Duration::from_millis(1500));
    let second = ratchet_run(root, &[], &[]);
    unsafe { libc::kill(first.id() as i32, libc::SIGINT) };
    first.wait().unwrap();
    assert!(!second.status.success());
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("is in use by another ratchet"),
        "{}",
        show(&second)
    );
}

#[test]
fn a_build_that_never_ends_is_killed_and_recorded() {
    let _g = exclusive();
    // 2^40 terms of macro expansion: the compiler would run for hours.
    let mut bomb = String::from("#define E0 1\n");
    for i in 1..=40 {
        bomb += &format!("#define E{i} E{p}+E{p}\n", p = i - 1);
    }
    bomb += "int bomb(void);\nint bomb(void) { return E40; }\n\nstatic const char RESPONSE[] =\n";
    let playbook = vec![entry(
        "compile-forever",
        "Make the compiler work forever",
        "static const char RESPONSE[] =\n",
        &bomb,
    )];
    let repo = fixture_repo("\n[build]\ntimeout_s = 3\n", &playbook);
    let root = repo.path();
    let started = Instant::now();
    let out = ratchet_run(root, &[], &[]);
    // Nothing was kept or discarded: the run says so in its exit code.
    assert_eq!(out.status.code(), Some(4), "{}", show(&out));
    let (_, run_dir) = only_run(root);
    assert_eq!(verdicts(&run_dir), ["build_failed"]);
    let a = &attempts(&run_dir)[0];
    assert!(a["durations"]["build_s"].as_f64().unwrap() < 10.0, "{a}");
    assert!(started.elapsed() < Duration::from_secs(120));
    // Builds run on a copy of the sources in the cache: a compiler left
    // running would name the worktree or the cache's staging directory.
    let cache =
        std::env::var("RATCHET_BUILD_CACHE").unwrap_or_else(|_| "/var/cache/ratchet/builds".into());
    for place in [root.display().to_string(), format!("{cache}/.tmp")] {
        let left = Command::new("pgrep")
            .args(["-af", &place])
            .output()
            .unwrap();
        assert!(
            left.stdout.is_empty(),
            "a compiler outlived its timeout: {}",
            String::from_utf8_lossy(&left.stdout)
        );
    }
}

#[test]
fn a_full_disk_stops_the_run_with_a_clear_error_and_a_valid_journal() {
    let _g = exclusive();
    let disk = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(disk.path())
        .status()
        .unwrap();
    assert!(
        mounted.success(),
        "this test needs root to mount a small tmpfs"
    );
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(disk.path().to_path_buf());
    let results = disk.path().join("results");
    let repo = fixture_repo("", &planted_playbook());
    let root = repo.path();
    let toml = std::fs::read_to_string(root.join("harness.toml")).unwrap();
    std::fs::write(
        root.join("harness.toml"),
        format!("[paths]\nresults = \"{}\"\n{toml}", results.display()),
    )
    .unwrap();
    // Room for run.json and champion.json, none for an attempt line.
    std::fs::write(
        disk.path().join("filler"),
        vec![b'x'; 256 * 1024 - 24 * 1024],
    )
    .unwrap();
    let out = ratchet_run(root, &[], &[]);
    assert!(!out.status.success(), "the run should stop: {}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("No space left on device"), "{err}");
    let run_dir = std::fs::read_dir(&results)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("run.json")).unwrap())
            .expect("run.json stays valid");
    assert_eq!(
        run["run_id"].as_str().unwrap(),
        run_dir.file_name().unwrap().to_str().unwrap()
    );
    let journal = std::fs::read_to_string(run_dir.join("attempts.jsonl")).unwrap();
    assert!(
        journal.is_empty() || journal.ends_with('\n'),
        "a torn attempt line was left"
    );
    for line in journal.lines() {
        serde_json::from_str::<Value>(line).expect("every line is whole");
    }
    let worktree = root
        .join(".ratchet/worktrees")
        .join(run_dir.file_name().unwrap());
    assert_clean(&worktree);
}

/// One run faulted at every stage it passes through, resumed after each
/// fault, then run to its end: SIGKILL and SIGINT alternately at staggered
/// delays from each start (set-up, the A/A check, build, smoke,
/// measurement, the writes after a verdict); then a SIGKILL in the middle
/// of an iteration, once an attempt is journaled, and a SIGINT in the next.
/// Nothing journaled is lost or repeated, no server or control source
/// outlives a fault, and an interrupted run exits 130 and says so.
#[test]
fn kills_and_interrupts_at_staggered_points_and_mid_iteration_lose_and_repeat_nothing() {
    let _g = exclusive();
    let repo = fixture_repo("", &planted_playbook());
    let root = repo.path();
    let tmp = tempfile::tempdir().unwrap();
    let spawn = |args: &[&str]| spawn_run(root, tmp.path(), args);
    let mut faults = 0;
    let mut id: Option<String> = None;
    for (k, delay_ms) in [700u64, 2300, 3100, 4700, 5300, 6900].iter().enumerate() {
        let args: Vec<&str> = match &id {
            Some(i) => vec!["--resume", i.as_str()],
            None => vec![],
        };
        let mut child = spawn(&args);
        std::thread::sleep(Duration::from_millis(*delay_ms));
        if child.try_wait().unwrap().is_some() {
            break; // it finished before the fault
        }
        let signal = if k % 2 == 0 {
            libc::SIGKILL
        } else {
            libc::SIGINT
        };
        unsafe { libc::kill(child.id() as i32, signal) };
        child.wait().unwrap();
        faults += 1;
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            servers_running(root),
            "",
            "a server outlived ratchet after fault {k}"
        );
        let created = root.join("results").exists()
            && std::fs::read_dir(root.join("results")).unwrap().count() > 0;
        if id.is_none() && created {
            id = Some(only_run(root).0);
        }
    }
    let id = id.expect("the run was created");
    let (_, run_dir) = only_run(root);
    let journal = run_dir.join("attempts.jsonl");
    let journaled = || std::fs::read_to_string(&journal).map_or(0, |t| t.lines().count());
    let said = tmp.path().join("run.stderr");

    // SIGKILL in the middle of an iteration: once one more attempt is
    // journaled, 1.5 s into the next.
    let mut child = spawn(&["--resume", &id]);
    wait_for_lines(&journal, journaled() + 1, Duration::from_secs(300), &said);
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap();
    child.wait().unwrap();
    faults += 1;
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(servers_running(root), "", "a server outlived ratchet");
    assert_eq!(
        control_sources_in(tmp.path()),
        Vec::<PathBuf>::new(),
        "the killed run left its control's source in TMPDIR"
    );

    // Resume, and this time interrupt it with SIGINT in the next iteration.
    let mut child = spawn(&["--resume", &id]);
    wait_for_lines(&journal, journaled() + 1, Duration::from_secs(300), &said);
    std::thread::sleep(Duration::from_millis(1000));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    faults += 1;
    assert_eq!(status.code(), Some(130), "an interrupted run exits 130");
    assert_eq!(run_json(&run_dir)["status"], "interrupted");
    assert_eq!(servers_running(root), "");

    // Resume to the end.
    let out = ratchet_run(root, &["--resume", &id], &[]);
    assert!(out.status.success(), "{}", show(&out));
    let numbers: Vec<u64> = attempts(&run_dir)
        .iter()
        .map(|a| a["number"].as_u64().unwrap())
        .collect();
    assert_eq!(
        numbers,
        [1, 2, 3, 4, 5],
        "attempts lost or repeated after {faults} faults"
    );
    assert_eq!(
        verdicts(&run_dir),
        ["keep", "discard", "build_failed", "no_op", "invalid"]
    );
    assert_eq!(run_json(&run_dir)["status"], "converged");
    assert_eq!(
        git(
            root,
            &["rev-list", "--count", &format!("main..ratchet/{id}")]
        ),
        "1",
        "exactly one kept commit"
    );
    let worktree = PathBuf::from(run_json(&run_dir)["worktree"].as_str().unwrap().to_string());
    assert_clean(&worktree);
    let lessons = std::fs::read_to_string(run_dir.join("lessons.jsonl")).unwrap();
    assert_eq!(
        lessons.lines().count(),
        5,
        "one lesson per journaled attempt"
    );
    println!("reliability: {faults} faults injected, 5 attempts survived, 0 journal lines lost");
}
