//! Review and replay (`log`, `replay`, `report`, `ablate`) on a small run
//! the tests record themselves: real servers, real load generator, real
//! git. The planted run keeps two changes, of which the first is made useless
//! by the second:
//!
//! 1. shorten a 400 us busy-wait per connection to 100 us  (keep)
//! 2. remove the busy-wait call altogether                  (keep; 1 no longer matters)
//! 3. busy-wait before every recv                           (discard)
//! 4. a change that does not compile                        (build_failed)
//!
//! These tests belong together because they read the same recorded run,
//! which takes minutes to record and is recorded once per test binary: a
//! test that does not need it lives elsewhere (`sweep` in tests/sweep.rs).

mod common;

use common::browser::{headless, pixels_of};
use common::cli::{f, json_of, ratchet_in, show};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The tests below that share the recorded run; the last one to finish
/// removes it.
const SHARING: usize = 5;
static USERS: AtomicUsize = AtomicUsize::new(SHARING);

struct Recorded {
    root: PathBuf,
    id: String,
}

static RECORDED: OnceLock<Recorded> = OnceLock::new();

/// Removes the recorded run when the last test sharing it is done, passed
/// or failed.
struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        if USERS.fetch_sub(1, Ordering::SeqCst) == 1 {
            if let Some(r) = RECORDED.get() {
                std::fs::remove_dir_all(&r.root).ok();
            }
        }
    }
}

/// Removes a directory when dropped, passed or failed.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

fn planted_playbook() -> Vec<String> {
    let mut entries = vec![entry(
        "shorter-spin",
        "Shorten the busy-wait from 400 to 100 us",
        "#define SPIN_NS 400000L\n",
        "#define SPIN_NS 100000L\n",
    )];
    entries.extend(spin_entries());
    entries
}

/// The recorded run (made once per test binary, under the measuring lock),
/// and a guard that releases it.
fn recorded() -> (&'static Recorded, Release) {
    let r = RECORDED.get_or_init(|| {
        let repo = fixture_repo_with_spin("", &planted_playbook(), 400_000);
        let root = repo.keep();
        // Profiles on, so the report has real ones to draw.
        let config = root.join("harness.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, text.replace("profile = false", "profile = true")).unwrap();
        commit_all(&root, "profile the champions");
        let out = ratchet_run(&root, &[], &[]);
        assert!(
            out.status.success(),
            "the recorded run failed: {}",
            show(&out)
        );
        let (id, run_dir) = only_run(&root);
        assert_eq!(
            verdicts(&run_dir),
            ["keep", "keep", "discard", "build_failed"],
            "the planted run did not come out as planted: {}\n{}",
            verdict_details(&run_dir),
            show(&out)
        );
        Recorded { root, id }
    });
    (r, Release)
}

#[test]
fn log_reads_the_lineage_from_git_and_every_attempt_from_its_ref() {
    let _g = exclusive();
    let (r, _release) = recorded();
    let h = json_of(&r.root, &["log", &r.id, "--all", "--json"]);
    assert_eq!(h["source"], "git");
    assert_eq!(h["warnings"].as_array().unwrap().len(), 0, "{h}");
    let lineage = h["lineage"].as_array().unwrap();
    let branch = format!("ratchet/{}", r.id);
    let commits = git(
        &r.root,
        &["rev-list", "--reverse", &format!("main..{branch}")],
    );
    let commits: Vec<&str> = commits.lines().collect();
    assert_eq!(lineage.len(), 1 + commits.len());
    assert_eq!(lineage[0]["attempt"], 0);
    assert_eq!(
        lineage[0]["commit"].as_str().unwrap(),
        git(&r.root, &["rev-parse", "main"])
    );
    let mut product = 1.0;
    for (step, commit) in lineage[1..].iter().zip(&commits) {
        assert_eq!(step["commit"].as_str().unwrap(), *commit);
        let subject = git(&r.root, &["log", "-1", "--format=%s", commit]);
        assert_eq!(step["hypothesis"].as_str().unwrap(), subject);
        let ratio = f(&step["ratio"]);
        assert!(ratio < 0.7, "a planted keep has ratio {ratio}");
        let [lo, hi] = [f(&step["interval"][0]), f(&step["interval"][1])];
        assert!(lo <= ratio && ratio <= hi);
        product *= ratio;
        assert!((f(&step["cumulative"]) - product).abs() < 1e-3);
        assert!(step["vs_control"].is_number());
    }
    assert_eq!(
        lineage
            .iter()
            .map(|s| s["attempt"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [0, 1, 2]
    );
    let attempts = h["attempts"].as_array().unwrap();
    let verdicts: Vec<&str> = attempts
        .iter()
        .map(|a| a["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, ["keep", "keep", "discard", "build_failed"]);
    for a in attempts {
        let reference = a["attempt_ref"].as_str().unwrap();
        assert_eq!(
            a["ref_commit"].as_str().unwrap(),
            git(&r.root, &["rev-parse", reference])
        );
    }
    // The table says the same for a person, of the latest run by default.
    let out = ratchet_in(&r.root, &["log", "--all"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", show(&out));
    assert!(text.starts_with(&format!("run {} (", r.id)), "{text}");
    assert!(
        text.contains(&format!("lineage from branch {branch}")),
        "{text}"
    );
    assert!(
        text.contains("build_failed") && text.contains("Busy-wait before every recv"),
        "{text}"
    );
    // A run that does not exist is named.
    let out = ratchet_in(&r.root, &["log", "no-such-run"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no run \"no-such-run\""));
}

#[test]
fn replay_on_a_clone_rebuilds_from_the_journal_and_reproduces_the_keeps() {
    let _g = exclusive();
    let (r, _release) = recorded();
    // Another machine: a clone of main has neither the run branch, nor its
    // refs, nor their commits.
    let clone = tempfile::tempdir().unwrap();
    let copy = clone.path().join("repo");
    git(
        clone.path(),
        &[
            "clone",
            "-q",
            "--no-local",
            "--single-branch",
            "--branch",
            "main",
            r.root.to_str().unwrap(),
            copy.to_str().unwrap(),
        ],
    );
    let results = copy.join("results").join(&r.id);
    std::fs::create_dir_all(&results).unwrap();
    for name in ["run.json", "attempts.jsonl", "champion.json"] {
        std::fs::copy(
            r.root.join("results").join(&r.id).join(name),
            results.join(name),
        )
        .unwrap();
    }
    let h = json_of(&copy, &["log", &r.id, "--json"]);
    assert_eq!(h["source"], "journal");
    assert!(h["lineage"][1]["commit"].is_null(), "{h}");

    let rep = json_of(&copy, &["replay", &r.id, "--json"]);
    let keeps = rep["keeps"].as_array().unwrap();
    assert_eq!(keeps.len(), 2, "{rep}");
    for k in keeps {
        assert_eq!(k["reproduced"], true, "keep not reproduced: {k}");
        assert_eq!(k["replayed"]["verdict"], "better");
    }
    let vs_start = f(&rep["champion"]["vs_start"]["ratio_median"]);
    assert!(vs_start < 0.5, "the champion against the start: {vs_start}");
    assert!(rep["champion"]["vs_control"]["ratio_median"].is_number());
    // Both fingerprints are kept; raw costs are per machine.
    assert!(rep["recorded_fingerprint"]["kernel"].is_string());
    assert!(rep["fingerprint"]["kernel"].is_string());
    assert_eq!(
        rep["arms"].as_array().unwrap().len(),
        4,
        "start, #1, #2, control"
    );
    let stored = std::fs::read_dir(results.join("replays")).unwrap().count();
    assert_eq!(stored, 1, "the replay is recorded beside the run");
}

#[test]
fn replay_decisions_finds_a_planted_disagreement() {
    let _g = exclusive();
    let (r, _release) = recorded();
    // Plant it: the journal now claims attempt 4 compiled and was discarded.
    let original = r.root.join("results").join(&r.id);
    let planted_id = format!("{}-planted", r.id);
    let planted = r.root.join("results").join(&planted_id);
    std::fs::create_dir_all(&planted).unwrap();
    // Gone before the measuring lock is released: it would otherwise be the
    // latest run, the one `ratchet log` shows by default in the other tests.
    let _planted = RemoveOnDrop(planted.clone());
    for name in ["run.json", "champion.json"] {
        std::fs::copy(original.join(name), planted.join(name)).unwrap();
    }
    let lines: Vec<String> = std::fs::read_to_string(original.join("attempts.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut a: Value = serde_json::from_str(l).unwrap();
            if a["number"] == 4 {
                a["verdict"] = "discard".into();
            }
            serde_json::to_string(&a).unwrap()
        })
        .collect();
    std::fs::write(planted.join("attempts.jsonl"), lines.join("\n") + "\n").unwrap();

    let out = ratchet_in(&r.root, &["replay", &planted_id, "--decisions"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text.contains("1 decisions differ: #4 (recorded discard, now build_failed)"),
        "{text}"
    );
    let replays = planted.join("replays");
    let stored = |dir: &Path| -> Vec<Value> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|f| serde_json::from_str(&std::fs::read_to_string(f.unwrap().path()).unwrap()))
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let record = stored(&replays).remove(0);
    let decisions = record["decisions"].as_array().unwrap();
    let now: Vec<&str> = decisions
        .iter()
        .map(|d| d["replayed"].as_str().unwrap())
        .collect();
    assert_eq!(now, ["keep", "keep", "discard", "build_failed"], "{record}");
    let agrees: Vec<bool> = decisions
        .iter()
        .map(|d| d["agrees"].as_bool().unwrap())
        .collect();
    assert_eq!(agrees, [true, true, true, false]);

    // A subset: each named attempt against the champion it was recorded
    // against (#3 against #2, so nothing is carried over), the rest untouched.
    let out = ratchet_in(
        &r.root,
        &["replay", &planted_id, "--decisions", "--attempts", "4,3,4"],
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text.contains("decisions re-made for #3, #4 only")
            && text.contains("1 decisions differ: #4 (recorded discard, now build_failed)"),
        "{text}"
    );
    let subset = stored(&replays)
        .into_iter()
        .find(|r| r["decisions_only"] == serde_json::json!([3, 4]))
        .expect("the subset replay is recorded");
    let d = subset["decisions"].as_array().unwrap();
    assert_eq!(d.len(), 2, "{subset}");
    assert_eq!(
        (d[0]["attempt"].as_u64(), d[0]["replayed"].as_str()),
        (Some(3), Some("discard")),
        "{subset}"
    );
    assert!(d[0]["note"].is_null(), "#3 was carried over: {subset}");
    assert!(d[0]["ratio"].as_f64().unwrap() > 1.3, "{subset}");

    // An attempt the run does not have is named before anything is built.
    let out = ratchet_in(
        &r.root,
        &["replay", &planted_id, "--decisions", "--attempts", "9"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("has no attempt 9 (its attempts are 1 to 4)"),
        "{err}"
    );
    assert_eq!(stored(&replays).len(), 2);
}

#[test]
fn the_report_is_self_contained_and_every_chart_is_drawn() {
    let _g = exclusive();
    let (r, _release) = recorded();
    let out = ratchet_in(&r.root, &["report", &r.id]);
    assert!(out.status.success(), "{}", show(&out));
    let path = r.root.join("results").join(&r.id).join("report.html");
    let html = std::fs::read_to_string(&path).unwrap();
    for section in ["cost", "ratios", "control", "profile"] {
        let start = html
            .find(&format!("<section id=\"{section}\">"))
            .unwrap_or_else(|| panic!("no section {section}"));
        let end = start + html[start..].find("</section>").unwrap();
        assert_eq!(
            html[start..end].matches("<svg class=\"chart\"").count(),
            1,
            "section {section} has one chart"
        );
    }
    assert!(!html.contains("<script"), "no script");
    let outside = html
        .replace("http://www.w3.org/2000/svg", "")
        .matches("http")
        .count();
    assert_eq!(outside, 0, "nothing is fetched from anywhere");
    assert_eq!(html.matches("<tr id=\"attempt-").count(), 4);
    assert!(html.contains("Remove the busy-wait from the accept path"));
    assert!(html.contains("-\tslow_down();"), "the kept diff is shown");
    assert!(
        !html.contains("no profile recorded"),
        "the baseline and champion profiles are drawn"
    );
    // The shares by DSO come from a report with no cut: they account for
    // every sample, the long tail of small kernel symbols included.
    let profiles = r.root.join("results").join(&r.id).join("profiles");
    let mut seen = 0;
    for file in std::fs::read_dir(&profiles).unwrap() {
        let profile: Value =
            serde_json::from_str(&std::fs::read_to_string(file.unwrap().path()).unwrap()).unwrap();
        let total: f64 = profile["dso_shares"]
            .as_object()
            .unwrap()
            .values()
            .map(f)
            .sum();
        assert!(
            (total - 1.0).abs() < 0.005,
            "shares sum to {total}: {profile}"
        );
        // Profiled in the regime the run measured in (this fixture's: idle).
        assert!(
            profile["regime"]
                .as_str()
                .is_some_and(|r| r.starts_with("idle")),
            "{profile}"
        );
        seen += 1;
    }
    assert!(seen >= 2, "the baseline's and the champion's profiles");

    // A real browser parses it into four charts...
    let dom = headless(&["--dump-dom"], &path);
    let dom_text = String::from_utf8_lossy(&dom.stdout);
    assert_eq!(
        dom_text.matches("<svg class=\"chart\"").count(),
        4,
        "chromium --dump-dom: {}",
        show(&dom)
    );
    // ...and draws each one: every chart's own ink is on the screen, and
    // legend swatches are translucent, so those pixels are data marks.
    let shot = std::env::temp_dir().join(format!("ratchet-report-{}.png", std::process::id()));
    let out = headless(
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1150,3000",
        ],
        &path,
    );
    assert!(shot.exists(), "no screenshot: {}", show(&out));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let image = &buf[..info.buffer_size()];
    std::fs::remove_file(&shot).ok();
    for (chart, rgb) in [
        ("cost staircase", [0x21, 0x66, 0xac]),
        ("ratio intervals", [0x5e, 0x3c, 0x99]),
        ("champion against the control", [0xe7, 0x29, 0x8a]),
        ("baseline profile", [0xe6, 0xab, 0x02]),
        ("champion profile", [0x66, 0xa6, 0x1e]),
    ] {
        let n = pixels_of(image, channels, rgb);
        assert!(n >= 30, "{chart}: only {n} pixels drawn");
    }
}

#[test]
fn ablate_reports_the_planted_useless_change_as_contributing_nothing() {
    let _g = exclusive();
    let (r, _release) = recorded();
    // Six blocks, not the run's three: the useless change is an A/A pair, and
    // one 400 ms block of it varies by up to a quarter here, so the median
    // of three could land anywhere in that range (1.30 on one CI machine).
    let a = json_of(&r.root, &["ablate", &r.id, "--blocks", "6", "--json"]);
    assert_eq!(a["sample_count"], 6, "{a}");
    let c = a["contributions"].as_array().unwrap();
    assert_eq!(c.len(), 2, "{a}");
    assert_eq!(c[0]["attempt"], 1);
    assert_eq!(c[0]["finding"], "nothing measurable", "{a}");
    assert!(
        c[0]["note"].as_str().unwrap().contains("helped when kept"),
        "{a}"
    );
    // Its estimated effect is inside the threshold either way.
    let threshold = f(&a["threshold"]);
    let useless = f(&c[0]["in_final"]["ratio_median"]);
    assert!(
        useless > 1.0 - threshold && useless < 1.0 / (1.0 - threshold),
        "the useless change's median {useless}: {a}"
    );
    assert_eq!(c[1]["attempt"], 2);
    assert_eq!(c[1]["finding"], "contributes", "{a}");
    let pairs = a["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 1);
    assert_eq!(pairs[0]["interacts"], true, "{a}");
    assert!(f(&pairs[0]["factor"]) > 1.3, "{a}");
    assert!(pairs[0]["description"]
        .as_str()
        .unwrap()
        .starts_with("overlap"));
}
