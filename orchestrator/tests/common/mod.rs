//! Shared set-up for ratchet's integration tests: the real binary, the real
//! servers, temporary workspaces, and one measurement at a time (the tests
//! share one SUT core, and a benchmark with a neighbour is not a benchmark).

#![allow(dead_code)]

pub mod browser;
pub mod cli;
pub mod devtools;
pub mod example;
pub mod referee;
pub mod run_loop;

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

/// Serialises the tests of one test binary that measure. A lock per binary
/// is enough because `cargo test` runs one test binary at a time, so tests
/// in different files never measure at once either.
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
        // Its Makefile is the one statement of how fixtures are built.
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let status = Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(&fixtures)
            .arg(format!("OUT={}", dir.display()))
            .status()
            .unwrap();
        assert!(status.success(), "fixture server failed to compile");
        dir.join("faulty_server")
    })
    .clone()
}

pub fn faulty_arm(mode: &str) -> String {
    format!("cmd:{} --mode {mode}", faulty_server().display())
}

/// Short windows so a test trial takes about a second, with enough
/// connections in flight at each server that a rationed one always has work.
pub const QUICK: &[&str] = &[
    "--meter",
    "task-clock",
    "--window-ms",
    "700",
    "--warmup-ms",
    "200",
    "--connections",
    "256",
];

pub fn compare_json(
    config: &Path,
    arms: &[&str],
    blocks: usize,
    extra: &[&str],
) -> (Value, Output) {
    compare_json_env(config, arms, blocks, extra, &[])
}

/// [`compare_json`] with extra environment variables for ratchet.
pub fn compare_json_env(
    config: &Path,
    arms: &[&str],
    blocks: usize,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Value, Output) {
    let mut cmd = Command::new(ratchet());
    cmd.envs(env.iter().copied())
        .arg("--config")
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

/// A temporary directory any user may write: where a server, which runs
/// unprivileged, leaves what a test reads back.
pub fn open_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// A temporary directory holding a harness.toml (with `extra` appended).
/// It measures in task-clock: these tests are of the host's referee, and
/// `auto` picks the emulated meter wherever the emulator is set up
/// (tests/emulated.rs asks for it by `--meter`).
pub fn temp_workspace(extra: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("harness.toml"),
        format!("[meter]\nevent = \"task-clock\"\n{extra}"),
    )
    .unwrap();
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

/// Settings small enough for a test; the threshold is coarse because the
/// planted changes are large (tens of microseconds per connection). The
/// loop's logic is tested in the idle regime: 32 connections in flight are
/// too few to keep a rationed server busy (the referee tests measure the
/// saturated regime, at 512).
pub const SMALL: &str = r#"
[meter]
event = "task-clock"
[saturation]
regime = "idle"
[load]
connections = 32
[trial]
warmup_ms = 150
window_ms = 400
[gate]
min_completed = 50
# The least that shows growth past a warm-up (100,000 by default, 6-12 s a
# keep); tests/referee_endurance.rs holds the default.
endurance_connections = 10000
[compare]
blocks = 6
threshold = 0.3
[duet]
window_ms = 400
[run]
smoke_window_ms = 200
suspicious_gain = 20.0
profile = false
"#;

/// A busy-wait added to the vanilla server's accept path: the planted cost.
const SPIN: &str = "void slow_down(void)\n{\n\tstruct timespec t0, t;\n\n\tclock_gettime(CLOCK_MONOTONIC, &t0);\n\tdo\n\t\tclock_gettime(CLOCK_MONOTONIC, &t);\n\twhile ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < SPIN_NS);\n}\n\n";

pub fn entry(id: &str, hypothesis: &str, search: &str, replace: &str) -> String {
    format!(
        "id = \"{id}\"\ncategory = \"test\"\nhypothesis = \"{hypothesis}\"\n\n[[edits]]\npath = \"treatment/server.c\"\nsearch = '''\n{search}'''\nreplace = '''\n{replace}'''\n"
    )
}

/// Three entries on the fixture's busy-wait, in this order: remove it from
/// the accept path (keep), add it before every recv (discard), and break
/// the build (build_failed).
pub fn spin_entries() -> [String; 3] {
    [
        entry(
            "remove-spin",
            "Remove the busy-wait from the accept path",
            "\tslow_down();\n",
            "",
        ),
        entry(
            "spin-on-recv",
            "Busy-wait before every recv",
            "\ttag(sqe, c, OP_RECV);\n",
            "\tslow_down();\n\ttag(sqe, c, OP_RECV);\n",
        ),
        entry(
            "syntax-error",
            "A change that does not compile",
            "#define RECV_BUF 1024\n",
            "#define RECV_BUF 1024 +\n",
        ),
    ]
}

/// A git repository laid out like the project, with a treatment slowed by
/// a 160 us busy-wait per connection: several times the vanilla server's own
/// cost on any machine, so removing it clears the 30% line by a wide margin
/// (40 us gave 0.71 on a slower CPU, a coin toss at the line). `extra_config` is appended after the
/// `[run]` table: bare keys land in it.
pub fn fixture_repo(extra_config: &str, playbook: &[String]) -> tempfile::TempDir {
    fixture_repo_with_spin(extra_config, playbook, 160_000)
}

/// [`fixture_repo`] with a busy-wait of `spin_ns` (`#define SPIN_NS` in
/// treatment/server.c, for playbook entries to change).
pub fn fixture_repo_with_spin(
    extra_config: &str,
    playbook: &[String],
    spin_ns: u64,
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fill_fixture_repo(dir.path(), extra_config, playbook, spin_ns);
    dir
}

/// [`fixture_repo`] laid out in the existing directory `root`.
pub fn fixture_repo_in(root: &Path, extra_config: &str, playbook: &[String]) {
    fill_fixture_repo(root, extra_config, playbook, 160_000);
}

fn fill_fixture_repo(root: &Path, extra_config: &str, playbook: &[String], spin_ns: u64) {
    let src = repo_root();
    for sub in ["treatment", "control"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
        for f in std::fs::read_dir(src.join(sub)).unwrap() {
            let f = f.unwrap().path();
            if f.is_file() {
                std::fs::copy(&f, root.join(sub).join(f.file_name().unwrap())).unwrap();
            }
        }
    }
    let server = root.join("treatment/server.c");
    let text = std::fs::read_to_string(&server).unwrap();
    let text = text
        .replace(
            "#include <unistd.h>\n",
            &format!("#include <time.h>\n#include <unistd.h>\n\n#define SPIN_NS {spin_ns}L\nvoid slow_down(void);\n"),
        )
        .replace(
            "static void on_accept(",
            &format!("{SPIN}static void on_accept("),
        )
        .replace(
            "\tc->fd = cqe->res;\n",
            "\tslow_down();\n\tc->fd = cqe->res;\n",
        );
    std::fs::write(&server, text).unwrap();
    let pb = root.join("knowledge-base/playbook");
    std::fs::create_dir_all(&pb).unwrap();
    for (i, e) in playbook.iter().enumerate() {
        // The list's order is the search's: explicit, as in the shipped one.
        std::fs::write(pb.join(format!("{i:02}.toml")), format!("order = {i}\n{e}")).unwrap();
    }
    std::fs::write(
        root.join("harness.toml"),
        format!("{SMALL}\n{extra_config}"),
    )
    .unwrap();
    init_repo(root, "fixture");
}

/// Makes `root` a git repository on `main` whose first commit is
/// everything in it, ratchet's own directory ignored.
pub fn init_repo(root: &Path, message: &str) {
    std::fs::write(root.join(".gitignore"), ".ratchet/\n").unwrap();
    git(root, &["init", "-q", "-b", "main"]);
    git(
        root,
        &["-c", "user.name=t", "-c", "user.email=t@t", "add", "-A"],
    );
    git(
        root,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            message,
        ],
    );
}

/// Commits every tracked change in `dir` as a test user.
pub fn commit_all(dir: &Path, message: &str) {
    git(
        dir,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qam",
            message,
        ],
    );
}

pub fn ratchet_run(root: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    Command::new(ratchet())
        .arg("--config")
        .arg(root.join("harness.toml"))
        .arg("run")
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .unwrap()
}

pub fn only_run(root: &Path) -> (String, PathBuf) {
    let dirs: Vec<_> = std::fs::read_dir(root.join("results"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let id = dirs[0].file_name().unwrap().to_string_lossy().to_string();
    (id, dirs[0].clone())
}

pub fn attempts(run_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(run_dir.join("attempts.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every journal line is valid JSON"))
        .collect()
}

pub fn verdicts(run_dir: &Path) -> Vec<String> {
    attempts(run_dir)
        .iter()
        .map(|a| a["verdict"].as_str().unwrap().to_string())
        .collect()
}

/// Each attempt's verdict with its detail, for a failure message that says
/// why an attempt did not come out as planted.
pub fn verdict_details(run_dir: &Path) -> String {
    attempts(run_dir)
        .iter()
        .map(|a| format!("{}: {}\n", a["verdict"], a["detail"]))
        .collect()
}

pub fn run_json(run_dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(run_dir.join("run.json")).unwrap()).unwrap()
}
