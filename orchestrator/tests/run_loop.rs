//! `ratchet run` end to end on temporary git repositories: the real servers,
//! the real load generator, real git, small blocks and windows.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn assert_clean(worktree: &Path) {
    assert_eq!(
        git(worktree, &["status", "--porcelain", "--ignored"]),
        "",
        "worktree not clean"
    );
}

fn show(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// keep, discard, build_failed, then no_op and invalid.
fn planted_playbook() -> Vec<String> {
    let mut entries = spin_entries().to_vec();
    entries.extend([
        entry(
            "comment-only",
            "Reword a comment",
            " * Every connection object is malloc'd and freed. Nothing here is tuned; finding\n",
            " * Every connection object is malloc'd and freed. Nothing here is tuned: finding\n",
        ),
        entry(
            "wrong-length",
            "Announce a longer body",
            "Content-Length: 2\\r\\n",
            "Content-Length: 3\\r\\n",
        ),
    ]);
    entries
}

#[test]
fn the_playbook_loop_keeps_discards_and_records_every_verdict() {
    let _g = exclusive();
    let repo = fixture_repo("", &planted_playbook());
    let root = repo.path();
    let out = ratchet_run(root, &[], &[]);
    assert!(out.status.success(), "{}", show(&out));
    let (id, run_dir) = only_run(root);
    assert_eq!(
        verdicts(&run_dir),
        ["keep", "discard", "build_failed", "no_op", "invalid"],
        "{}",
        show(&out)
    );
    let run = run_json(&run_dir);
    assert_eq!(run["status"], "converged");

    // The kept mutation is a commit on the run branch with its evidence.
    let branch = format!("ratchet/{id}");
    let message = git(root, &["log", "-1", "--format=%B", &branch]);
    assert!(
        message.starts_with("Remove the busy-wait from the accept path"),
        "{message}"
    );
    for trailer in [
        "Ratchet-Run: ",
        "Ratchet-Attempt: 1",
        "Ratchet-Meter: ",
        "Ratchet-Cost-Per-Connection: ",
        "Ratchet-Ratio: 0.",
        "Ratchet-CI95: ",
        "Ratchet-Vs-Control: ",
    ] {
        assert!(message.contains(trailer), "missing {trailer} in\n{message}");
    }
    assert_eq!(
        git(root, &["rev-parse", &format!("{branch}~1")]),
        git(root, &["rev-parse", "main"])
    );
    // Every attempt, whatever its verdict, has its tree under a ref.
    for n in 1..=5 {
        git(
            root,
            &[
                "rev-parse",
                "--verify",
                &format!("refs/ratchet/{id}/attempts/{n}"),
            ],
        );
    }
    let a = attempts(&run_dir);
    assert!(
        a[2]["build_log_tail"].as_str().unwrap().contains("error"),
        "{}",
        a[2]
    );
    assert!(a[0]["diff"].as_str().unwrap().contains("-\tslow_down();"));
    assert_eq!(
        a[0]["samples"]["trials"].as_array().unwrap().len(),
        3,
        "champion, candidate, control"
    );
    assert!(
        a[4]["detail"].as_str().unwrap().contains("smoke"),
        "{}",
        a[4]
    );
    // The worktree is clean and at the champion; the user's tree is untouched.
    let worktree = PathBuf::from(run["worktree"].as_str().unwrap());
    assert_clean(&worktree);
    assert_eq!(
        git(&worktree, &["rev-parse", "HEAD"]),
        git(root, &["rev-parse", &branch])
    );
    assert_eq!(
        git(root, &["rev-parse", "HEAD"]),
        git(root, &["rev-parse", "main"])
    );
    assert!(std::fs::read_to_string(root.join("treatment/server.c"))
        .unwrap()
        .contains("\tslow_down();"));
    let champion: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("champion.json")).unwrap())
            .unwrap();
    assert_eq!(champion["attempt"], 1);
    assert_eq!(
        champion["commit"].as_str().unwrap(),
        git(root, &["rev-parse", &branch])
    );
    // The knowledge base learned from every verdict.
    let lessons = std::fs::read_to_string(root.join("lessons.md")).unwrap();
    for h in [
        "Remove the busy-wait",
        "Busy-wait before every recv",
        "does not compile",
        "Reword a comment",
        "longer body",
    ] {
        assert!(lessons.contains(h), "lessons.md lacks {h}");
    }
}

/// A candidate that skips its busy-wait whenever other servers listen on
/// 127.0.0.1 (as they do in a duet), and pays it when it is alone.
fn shy_entry() -> String {
    let crowded = r#"void slow_down(void);

static int crowded(void)
{
	static int cached, calls;

	if (calls++ % 1024 == 0) {
		FILE *f = fopen("/proc/net/tcp", "r");
		char line[256];
		unsigned port, st;
		int n = 0;

		/* Listening sockets come first; stop at the first other one. */
		while (f && fgets(line, sizeof(line), f)) {
			if (sscanf(line, " %*d: %*X:%X %*X:%*X %X", &port, &st) != 2)
				continue;
			if (st != 0x0A)
				break;
			n += port >= 32768;
		}
		if (f)
			fclose(f);
		cached = n >= 2;
	}
	return cached;
}
"#;
    let edit = |search: &str, replace: &str| {
        format!("[[edits]]\npath = \"treatment/server.c\"\nsearch = '''\n{search}'''\nreplace = '''\n{replace}'''\n")
    };
    format!(
        "id = \"shy\"\ncategory = \"test\"\nhypothesis = \"Skip the busy-wait when other servers are listening\"\n\n{}\n{}",
        edit("void slow_down(void);\n", crowded),
        edit(
            "\tslow_down();\n\tc->fd",
            "\tif (!crowded())\n\t\tslow_down();\n\tc->fd"
        )
    )
}

/// A candidate that looks cheap only beside its neighbours is measured
/// cheap in the duet, then alone on the core, where it is not: not kept.
#[test]
fn a_server_cheap_only_beside_its_neighbours_is_not_kept() {
    let _g = exclusive();
    let repo = fixture_repo("", &[shy_entry()]);
    let root = repo.path();
    let out = ratchet_run(root, &[], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let (_, run_dir) = only_run(root);
    let a = attempts(&run_dir);
    assert_eq!(verdicts(&run_dir), ["discard"], "{}", show(&out));
    let duet = a[0]["vs_champion"]["ratio_median"].as_f64().unwrap();
    assert!(duet < 0.7, "the duet should have seen it cheap: {}", a[0]);
    let detail = a[0]["detail"].as_str().unwrap();
    assert!(detail.contains("sharing the core"), "{detail}");
    let alone = a[0]["confirmation"]["ratio_median"].as_f64().unwrap();
    assert!(alone > 0.85, "alone it pays its busy-wait: {}", a[0]);
}

/// A candidate that drops its busy-wait but sleeps 2 ms before every wait
/// for completions: it batches on a timer, far cheaper per connection, and
/// every client waits for it. Not kept, and the reason is named.
#[test]
fn a_keep_bought_with_latency_is_rejected() {
    let _g = exclusive();
    let edit = |search: &str, replace: &str| {
        format!("[[edits]]\npath = \"treatment/server.c\"\nsearch = '''\n{search}'''\nreplace = '''\n{replace}'''\n")
    };
    let batch = format!(
        "id = \"timer-batch\"\ncategory = \"test\"\nhypothesis = \"Batch completions on a 2 ms timer\"\n\n{}\n{}",
        edit("\tslow_down();\n\tc->fd", "\tc->fd"),
        edit(
            "\t\tret = io_uring_submit_and_wait(&ring, 1);\n",
            "\t\tusleep(2000);\n\t\tret = io_uring_submit_and_wait(&ring, 1);\n"
        )
    );
    let repo = fixture_repo("", &[batch]);
    let root = repo.path();
    let out = ratchet_run(root, &[], &[]);
    let (_, run_dir) = only_run(root);
    let a = attempts(&run_dir);
    let p99 = |arm: usize| -> Vec<f64> {
        a[0]["samples"]["trials"][arm]
            .as_array()
            .map(|t| {
                t.iter()
                    .map(|m| m["latency_us"]["p99"].as_f64().unwrap())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        verdicts(&run_dir),
        ["latency_regression"],
        "{} p99 champion {:?} candidate {:?}\n{}",
        a[0]["detail"],
        p99(0),
        p99(1),
        show(&out)
    );
    let ratio = a[0]["vs_champion"]["ratio_median"].as_f64().unwrap();
    assert!(ratio < 0.7, "it was cheaper per connection: {}", a[0]);
    let detail = a[0]["detail"].as_str().unwrap();
    assert!(detail.contains("latency regression: p99"), "{detail}");
}

/// Sets the fixture's `meter.task_clock_drift` to 0, committed.
fn without_drift(root: &Path) {
    let config = root.join("harness.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "event = \"task-clock\"\n",
        "event = \"task-clock\"\ntask_clock_drift = 0.0\n",
    );
    std::fs::write(&config, text).unwrap();
    commit_all(root, "no drift");
}

/// Under task-clock with the drift it was measured with here, a 5% line
/// is out of reach however many samples: refused before any measurement,
/// saying what would do.
#[test]
fn a_threshold_inside_the_meters_drift_is_refused_before_measuring() {
    let _g = exclusive();
    let repo = fixture_repo("", &[]);
    let root = repo.path();
    let started = Instant::now();
    let out = ratchet_run(root, &["--threshold", "0.05"], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    let text = show(&out);
    assert!(
        text.contains("meter.task_clock_drift") && text.contains("emulated"),
        "{text}"
    );
    let (_, run_dir) = only_run(root);
    assert!(run_json(&run_dir)["aa"].is_null(), "it measured an A/A");
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn a_refused_run_exits_3_and_says_why() {
    let _g = exclusive();
    // A threshold no machine resolves in 6 samples. The intervals are the
    // windows' own (no drift), so the A/A check measures before refusing.
    let repo = fixture_repo("max_blocks = 6\n", &[]);
    let root = repo.path();
    without_drift(root);
    let out = ratchet_run(root, &["--threshold", "0.0001"], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    assert!(
        show(&out).contains("Not running a lottery"),
        "{}",
        show(&out)
    );
    // It looked twice, and the second look bounded the spread from its own
    // samples and from both looks' pooled, and kept the smaller bound.
    let (_, run_dir) = only_run(root);
    let aa = &run_json(&run_dir)["aa"];
    let ratios = |c: &Value| -> Vec<f64> {
        c["block_ratios"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let (first, second) = (ratios(&aa["remeasured"]), ratios(aa));
    assert!(!first.is_empty() && !second.is_empty(), "{aa}");
    let pooled: Vec<f64> = first.iter().chain(&second).copied().collect();
    let expected = sd_upper_bound(&pooled).min(sd_upper_bound(&second));
    let bound = aa["spread_upper_bound"].as_f64().unwrap();
    assert!(
        (bound / expected - 1.0).abs() < 1e-4,
        "{bound} against {} pooled, {} from the second look alone",
        sd_upper_bound(&pooled),
        sd_upper_bound(&second)
    );
    assert!(
        show(&out).contains(&format!("with the first look's {} samples", first.len())),
        "{}",
        show(&out)
    );
}

/// The upper confidence bound on the standard deviation of the log ratios
/// at 1 - 5%/3 (chi-square, Wilson-Hilferty), computed here apart from
/// ratchet.
fn sd_upper_bound(ratios: &[f64]) -> f64 {
    let logs: Vec<f64> = ratios.iter().map(|r| r.ln()).collect();
    let n = logs.len() as f64;
    let mean = logs.iter().sum::<f64>() / n;
    let s = (logs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    let (df, z) = (n - 1.0, -2.128_045_234);
    let h = 2.0 / (9.0 * df);
    s * (df / (df * (1.0 - h + z * h.sqrt()).powi(3))).sqrt()
}

/// A command agent works unprivileged on a copy of the worktree without
/// its git directory: what it changes outside the allowed paths is
/// rejected as `scope`, and what it tries beyond its copy (commit, plant a
/// hook, reach the user's tree, rewrite a cached binary, hard-link a file
/// in, have its server rewrite the worktree) has no effect at all.
#[test]
fn a_command_agent_cannot_change_anything_outside_the_allowed_paths() {
    let _g = exclusive();
    // Where the agent, which runs unprivileged, keeps its own state.
    let scripts = open_dir();
    let counter = scripts.path().join("calls");
    let env_dump = scripts.path().join("env");
    let outside = scripts.path().join("outside.c");
    std::fs::write(&outside, "int outside;\n").unwrap();
    let script = scripts.path().join("agent.sh");
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nn=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}\nenv > {e}\n\
             case $n in\n\
             1) echo '// tampered' >> control/main.go; echo 'HYPOTHESIS: tune the control';;\n\
             2) ln -s /etc/passwd treatment/evil.c; echo 'HYPOTHESIS: link a file in';;\n\
             3) echo '# tampered' >> treatment/Makefile; echo 'HYPOTHESIS: change the build';;\n\
             4) mkdir -p treatment/sub && echo 'int x;' > treatment/sub/x.c; echo 'HYPOTHESIS: a nested file';;\n\
             5) git -c user.name=a -c user.email=a@a commit -q --allow-empty -m sneaky; echo 'HYPOTHESIS: commit it myself';;\n\
             6) printf '#!/bin/sh\\nexit 0\\n' > {root}/.git/hooks/post-checkout; echo 'HYPOTHESIS: plant a hook';;\n\
             7) echo '// reached through ..' >> ../../../control/main.go; echo '// reached' >> {root}/control/main.go; echo 'HYPOTHESIS: edit the user tree';;\n\
             8) for f in {cache}/treatment-*/server; do printf x >> \"$f\"; done; echo 'HYPOTHESIS: slow the champion down';;\n\
             9) ln {outside} treatment/linked.c; echo 'HYPOTHESIS: link a file from outside';;\n\
             10) echo '# hidden' >> treatment/Makefile; echo 'HYPOTHESIS: hide a build change';;\n\
             11) printf '#include <stdio.h>\\n__attribute__((constructor)) static void rewrite(void)\\n{{\\n\\tFILE *f = fopen(\"{root}/control/main.go\", \"a\");\\n\\n\\tif (f) {{\\n\\t\\tfputs(\"// by the server\\\\n\", f);\\n\\t\\tfclose(f);\\n\\t}}\\n}}\\n' > treatment/rewrite.h; sed -i '1i #include \"rewrite.h\"' treatment/server.c; echo 'HYPOTHESIS: a server that edits the user tree';;\n\
             *) echo 'HYPOTHESIS: do nothing';;\n\
             esac\n",
            c = counter.display(),
            e = env_dump.display(),
            root = repo.path().display(),
            cache = std::env::var("RATCHET_BUILD_CACHE")
                .unwrap_or_else(|_| "/var/cache/ratchet/builds".into()),
            outside = outside.display(),
        ),
    )
    .unwrap();
    let config = format!(
        "agent = \"command\"\n[agents.command]\nargv = [\"sh\", \"{}\"]\ntimeout_s = 20\n",
        script.display()
    );
    fixture_repo_in(repo.path(), &config, &[]);
    let root = repo.path();
    let branch_before = git(root, &["rev-parse", "main"]);
    let user_tree = std::fs::read_to_string(root.join("control/main.go")).unwrap();
    let out = ratchet_run(
        root,
        &["--max-iterations", "12"],
        &[("RATCHET_TEST_SECRET", "hunter2")],
    );
    assert!(matches!(out.status.code(), Some(0 | 4)), "{}", show(&out));
    let (id, run_dir) = only_run(root);
    let v = verdicts(&run_dir);
    assert_eq!(
        v[..10],
        [
            "scope", "scope", "scope", "scope", "no_op", "no_op", "no_op", "no_op", "no_op",
            "scope"
        ],
        "{}",
        show(&out)
    );
    assert!(
        ["keep", "discard", "promising"].contains(&v[10].as_str()),
        "the server that tried to edit the user tree was measured like any other: {v:?}"
    );
    assert_eq!(v[11], "no_op");
    let a = attempts(&run_dir);
    assert!(a[0]["detail"].as_str().unwrap().contains("control/main.go"));
    assert!(a[1]["detail"].as_str().unwrap().contains("symbolic link"));
    for i in [2, 9] {
        let detail = a[i]["detail"].as_str().unwrap();
        assert!(detail.contains("treatment/Makefile"), "{}", a[i]);
    }
    assert!(a[3]["detail"]
        .as_str()
        .unwrap()
        .contains("treatment/sub/x.c"));
    assert_eq!(
        git(root, &["rev-parse", &format!("ratchet/{id}")]).len(),
        branch_before.len()
    );
    assert!(
        !git(root, &["log", "--format=%s", &format!("ratchet/{id}")]).contains("sneaky"),
        "the agent committed"
    );
    assert!(
        !root.join(".git/hooks/post-checkout").exists(),
        "the agent planted a hook"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("control/main.go")).unwrap(),
        user_tree,
        "the agent or its server reached the user's tree"
    );
    let worktree = PathBuf::from(run_json(&run_dir)["worktree"].as_str().unwrap().to_string());
    assert_clean(&worktree);
    assert!(!worktree.join("treatment/evil.c").exists());
    assert!(!std::fs::read_to_string(worktree.join("control/main.go"))
        .unwrap()
        .contains("tampered"));
    assert!(
        !std::fs::read_to_string(env_dump)
            .unwrap()
            .contains("hunter2"),
        "the agent saw a secret"
    );
}

fn wait_for_lines(path: &Path, n: usize, limit: Duration) {
    let start = Instant::now();
    while std::fs::read_to_string(path).map_or(0, |t| t.lines().count()) < n {
        assert!(start.elapsed() < limit, "no {n} journal lines in {limit:?}");
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
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn a_run_killed_or_interrupted_mid_iteration_resumes_without_losing_or_repeating_attempts() {
    let _g = exclusive();
    let repo = fixture_repo("", &planted_playbook());
    let root = repo.path();
    let tmp = tempfile::tempdir().unwrap();
    let spawn = |args: &[&str]| spawn_run(root, tmp.path(), args);
    // SIGKILL once the first attempt is journaled, i.e. in the middle of the second.
    let mut child = spawn(&[]);
    let results = root.join("results");
    let start = Instant::now();
    while !results.exists() || std::fs::read_dir(&results).unwrap().count() == 0 {
        assert!(start.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(50));
    }
    let (id, run_dir) = only_run(root);
    wait_for_lines(&run_dir.join("attempts.jsonl"), 1, Duration::from_secs(120));
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(servers_running(root), "", "a server outlived ratchet");
    assert_eq!(
        control_sources_in(tmp.path()),
        Vec::<PathBuf>::new(),
        "the killed run left its control's source in TMPDIR"
    );

    // Resume, and this time interrupt it with SIGINT.
    let mut child = spawn(&["--resume", &id]);
    wait_for_lines(&run_dir.join("attempts.jsonl"), 2, Duration::from_secs(120));
    std::thread::sleep(Duration::from_millis(1000));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
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
    assert_eq!(numbers, [1, 2, 3, 4, 5], "attempts lost or repeated");
    assert_eq!(
        verdicts(&run_dir),
        ["keep", "discard", "build_failed", "no_op", "invalid"]
    );
    assert_eq!(run_json(&run_dir)["status"], "converged");
    let worktree = PathBuf::from(run_json(&run_dir)["worktree"].as_str().unwrap().to_string());
    assert_clean(&worktree);
    assert_eq!(
        git(
            root,
            &["rev-list", "--count", &format!("main..ratchet/{id}")]
        ),
        "1",
        "exactly one kept commit"
    );
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
fn an_unreachable_endpoint_is_an_agent_error_and_the_loop_goes_on() {
    let _g = exclusive();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let repo = fixture_repo(
        &format!("\n[agents.anthropic]\nbase_url = \"{url}\"\napi_key_env = \"RATCHET_TEST_ANTHROPIC_KEY\"\nmax_retries = 2\nbackoff_ms = 50\n"),
        &[],
    );
    let root = repo.path();
    let out = ratchet_run(
        root,
        &["--agent", "anthropic", "--max-iterations", "2"],
        &[("RATCHET_TEST_ANTHROPIC_KEY", "k")],
    );
    // Nothing was kept or discarded: the run says so in its exit code.
    assert_eq!(out.status.code(), Some(4), "{}", show(&out));
    let (_, run_dir) = only_run(root);
    assert_eq!(verdicts(&run_dir), ["agent_error", "agent_error"]);
    assert!(attempts(&run_dir)[0]["detail"]
        .as_str()
        .unwrap()
        .contains("gave up after 2 retries"));
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

#[test]
fn repeated_kills_at_staggered_points_lose_and_repeat_nothing() {
    let _g = exclusive();
    let repo = fixture_repo("", &planted_playbook());
    let root = repo.path();
    let tmp = tempfile::tempdir().unwrap();
    let spawn = |args: &[&str]| spawn_run(root, tmp.path(), args);
    let mut faults = 0;
    let mut id: Option<String> = None;
    // Delays that land in different stages: set-up, the A/A check, build,
    // smoke, measurement, and the writes after a verdict.
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
    let out = ratchet_run(root, &["--resume", &id], &[]);
    assert!(out.status.success(), "{}", show(&out));
    let (_, run_dir) = only_run(root);
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
    assert_eq!(
        git(
            root,
            &["rev-list", "--count", &format!("main..ratchet/{id}")]
        ),
        "1"
    );
    let worktree = PathBuf::from(run_json(&run_dir)["worktree"].as_str().unwrap().to_string());
    assert_clean(&worktree);
    let lessons =
        std::fs::read_to_string(root.join(format!("knowledge-base/lessons/{id}.jsonl"))).unwrap();
    assert_eq!(
        lessons.lines().count(),
        5,
        "one lesson per journaled attempt"
    );
    println!("reliability: {faults} faults injected, 5 attempts survived, 0 journal lines lost");
}
