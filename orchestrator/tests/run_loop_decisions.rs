//! `ratchet run` end to end on temporary git repositories (the real servers,
//! the real load generator, real git, small blocks and windows): what the
//! loop decides. Each test plants changes whose right verdict is known (a
//! keep, a discard, a build failure, a server cheap only beside its
//! neighbours, a keep bought with latency, a threshold no measurement can
//! resolve) and checks the verdict and the evidence recorded with it.

mod common;

use common::cli::show;
use common::run_loop::{assert_clean, planted_playbook};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PLANTED: [&str; 5] = ["keep", "discard", "build_failed", "no_op", "invalid"];

/// The planted playbook run once in a fresh fixture: its repository, run id
/// and run directory, or why its verdicts did not come out as planted.
fn planted_run() -> Result<(tempfile::TempDir, String, PathBuf), String> {
    let repo = fixture_repo("", &planted_playbook());
    let out = ratchet_run(repo.path(), &[], &[]);
    assert!(out.status.success(), "{}", show(&out));
    let (id, run_dir) = only_run(repo.path());
    if verdicts(&run_dir) != PLANTED {
        return Err(format!("{}\n{}", show(&out), verdict_details(&run_dir)));
    }
    Ok((repo, id, run_dir))
}

/// A time meter on a shared VM can fail an honest trial's gate (a stall of
/// the host); so the planted run gets a second look, as the regime tests
/// do. A broken keep rule fails both.
#[test]
fn the_playbook_loop_keeps_discards_and_records_every_verdict() {
    let _g = exclusive();
    let (repo, id, run_dir) = planted_run().unwrap_or_else(|why| {
        eprintln!("first look failed, running again:\n{why}");
        planted_run().unwrap_or_else(|again| panic!("failed twice:\n{again}\nfirst:\n{why}"))
    });
    let root = repo.path();
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
    // The knowledge base learned from every verdict, in the run's own
    // directory: the run changed nothing else in the user's tree.
    let lessons = std::fs::read_to_string(run_dir.join("lessons.md")).unwrap();
    for h in [
        "Remove the busy-wait",
        "Busy-wait before every recv",
        "does not compile",
        "Reword a comment",
        "longer body",
    ] {
        assert!(lessons.contains(h), "the lessons digest lacks {h}");
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

/// A saving bought with a leak: the busy-wait goes, and 16 KiB of heap is
/// kept with every connection. Each trial's fresh server serves too few
/// for that to hurt, so the measurement says keep; the endurance run before
/// the keep reads the growth, and the attempt is invalid, never kept.
#[test]
fn a_keep_that_leaks_is_invalid_after_its_endurance_run() {
    let _g = exclusive();
    let leak = entry(
        "leaky-saving",
        "Drop the busy-wait, keep a buffer per connection",
        "\tslow_down();\n\tc->fd",
        // Handed to an empty asm that may read memory: a malloc whose block
        // nobody reads may be removed (it was, and the leak was kept).
        "\t{ void *kept = memset(malloc(16384), 1, 16384); __asm__ volatile(\"\" : : \"r\"(kept) : \"memory\"); }\n\tc->fd",
    );
    let repo = fixture_repo("", &[leak]);
    let root = repo.path();
    let out = ratchet_run(root, &[], &[]);
    let (id, run_dir) = only_run(root);
    let a = attempts(&run_dir);
    assert_eq!(
        verdicts(&run_dir),
        ["invalid"],
        "{}\n{}",
        verdict_details(&run_dir),
        show(&out)
    );
    let ratio = a[0]["vs_champion"]["ratio_median"].as_f64().unwrap();
    assert!(
        ratio < 0.7,
        "it measured as a saving: {}",
        a[0]["vs_champion"]
    );
    let detail = a[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("endurance") && detail.contains("memory_growth"),
        "{detail}"
    );
    let endurance = &a[0]["endurance"];
    assert_eq!(endurance["gate"]["passed"], false, "{endurance}");
    assert!(
        endurance["footprints"].as_array().unwrap().len() >= 10,
        "{endurance}"
    );
    // Nothing was committed: the run's branch is where it started.
    assert_eq!(
        git(root, &["rev-parse", &format!("ratchet/{id}")]),
        git(root, &["rev-parse", "main"])
    );
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
