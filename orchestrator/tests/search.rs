//! The search on a real run in the saturated regime at a 20% threshold: a
//! fixture server with three independent planted savings of 10-15% each.
//! None clears the line alone, so a greedy climb keeps none of them; the loop
//! keeps them together, through a stack of the promising attempts (and a
//! retry where a measurement left one out). A second fixture plants one
//! cost that two changes must both drop: the loop keeps them through an
//! interaction probe.
//!
//! The main job's line is 3%; the search's logic does not depend on where
//! the line is, so the test puts it where task-clock resolves it in a few
//! samples on a noisy host. At 5% with savings of 2-4% it needed 40 samples
//! a measurement and nine minutes; at 3% a CI host's noisy minutes asked for
//! 70 to 579 samples and the run refused.

mod common;

use common::cli::{ratchet_in, show};
use common::*;
use std::path::Path;

/// Each planted cost, in per mille of the server's own CPU time per
/// connection (measured by the server itself as it runs), so that each
/// saving is about the same share on any CPU. Own time was 0.6 to 1.0 of
/// the whole measured cost (33 per mille measured 2.0% to 3.4% of the
/// whole), so with three planted costs of 250 per mille dropping one saves
/// 10-14%, two 21-29% and all three 31-43%: one alone is always short of
/// the 20% line and well clear of 1, so promising in 12 samples, and the
/// stack of all three always clears the line.
const EXTRA_PER_MILLE: u64 = 250;

/// Saturated, at 20%, with windows short enough for a test.
///
/// The intervals are the windows' own (`task_clock_drift = 0`): this test
/// is of the search's logic on savings one run measures side by side.
const SATURATED: &str = r#"
[meter]
event = "task-clock"
task_clock_drift = 0.0
[trial]
warmup_ms = 300
window_ms = 800
[gate]
min_completed = 200
endurance_connections = 10000
[compare]
threshold = 0.2
# A saving of half the line is promising when its interval is below 1. In
# 12 samples that interval runs from the 3rd to the 10th ratio, so two
# wild blocks on either side move nothing; in 8 it was the least and the
# greatest, and one block at 1.05 during a noisy suite (the control moved
# 15% in the run) made a 13% saving a discard.
blocks = 12
[run]
smoke_window_ms = 200
profile = true
max_iterations = 8
[search]
# A discard this near 1 is worth a retry: the default 0.02 scaled with the
# line, so a saving a measurement called a discard is still retried.
near_zero = 0.15
"#;

/// The planted cost: a counted loop of CPU work, in proportion to the
/// server's own cost per connection, re-measured on the thread's CPU clock
/// every 2048 connections without the spins. The spins are timed on the same
/// clock, so what is taken out of the server's own time is what they cost,
/// and the loop's speed is re-measured from them. A spin on the monotonic
/// clock did not cost what it asked: preempted by a neighbour in the shared
/// allotment, its wall time ran on without CPU, and the same 40 per mille
/// saved 0.2-1.6% in one run and 1.3-2.6% in another. Nor did one taking
/// out what it asked rather than what it took: the spins ran long of a
/// speed measured once, the excess counted as the server's own time, the
/// next spins grew with it, and one saving meant to be 10-14% measured 21%.
const SPIN_FOR: &str = r#"static long own_ns = 10000, spun_ns, counted, own_since;
static double loops_per_ns, loops_spun;
static volatile unsigned long sink;

static long clock_ns(clockid_t clock)
{
	struct timespec t;

	clock_gettime(clock, &t);
	return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void spin_loops(long n)
{
	long i;

	for (i = 0; i < n; i++)
		sink++;
}

static void spin_for(long per_mille)
{
	long ns = own_ns * per_mille / 1000, start, n;

	if (ns <= 0)
		return;
	start = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	if (loops_per_ns == 0) {
		n = 0;
		do {
			spin_loops(10000);
			n += 10000;
		} while (clock_ns(CLOCK_THREAD_CPUTIME_ID) - start < 20000000);
		loops_per_ns = n / (double)(clock_ns(CLOCK_THREAD_CPUTIME_ID) - start);
		start = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	}
	n = (long)(ns * loops_per_ns);
	spin_loops(n);
	loops_spun += n;
	spun_ns += clock_ns(CLOCK_THREAD_CPUTIME_ID) - start;
}

static void count_connection(void)
{
	long now;

	if (++counted % 2048)
		return;
	now = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	if (own_since)
		own_ns = (now - own_since - spun_ns) / 2048;
	if (spun_ns > 0)
		loops_per_ns = loops_spun / spun_ns;
	own_since = now;
	spun_ns = 0;
	loops_spun = 0;
}

"#;

fn define(name: &str, ns: u64) -> String {
    format!("#define {name} {ns}L\n")
}

fn playbook(costs: &[&str], per_mille: u64) -> Vec<String> {
    costs
        .iter()
        .map(|x| {
            entry(
                &format!("drop-extra-{}", x.to_lowercase()),
                &format!("Drop planted cost {x}"),
                &define(&format!("EXTRA_{x}"), per_mille),
                &define(&format!("EXTRA_{x}"), 0),
            )
        })
        .collect()
}

/// A fixture repository with planted costs, each defined on its own line
/// with unchanged lines between, so their edits merge; `spins` is the C
/// that spends them for each connection.
fn planted_repo(costs: &[&str], per_mille: u64, spins: &str) -> tempfile::TempDir {
    let repo = fixture_repo_with_spin("", &playbook(costs, per_mille), 0);
    let root = repo.path();
    let server = root.join("treatment/server.c");
    let text = std::fs::read_to_string(&server).unwrap();
    let defines: String = costs
        .iter()
        .map(|x| {
            format!(
                "/* planted cost {x}: */\n{}/* (end of {x}) */\n\n",
                define(&format!("EXTRA_{x}"), per_mille)
            )
        })
        .collect();
    let text = text
        .replacen(
            "void slow_down(void);\n",
            &format!("void slow_down(void);\n\n{defines}"),
            1,
        )
        .replacen(
            "static void on_accept(",
            &format!("{SPIN_FOR}static void on_accept("),
            1,
        )
        .replacen(
            "\tslow_down();\n",
            &format!("\tslow_down();\n\tcount_connection();\n{spins}"),
            1,
        );
    std::fs::write(&server, text).unwrap();
    std::fs::write(root.join("harness.toml"), SATURATED).unwrap();
    commit_all(root, "planted costs");
    repo
}

/// The three independent planted costs.
fn savings_repo() -> tempfile::TempDir {
    planted_repo(
        &["A", "B", "C"],
        EXTRA_PER_MILLE,
        "\tspin_for(EXTRA_A);\n\tspin_for(EXTRA_B);\n\tspin_for(EXTRA_C);\n",
    )
}

/// The stack's ablation names each of its parts, and the stack measured
/// dearer without each one.
fn every_part_gives(stack: &serde_json::Value, context: &str) {
    let parts = stack["ablation"]["parts"]
        .as_array()
        .unwrap_or_else(|| panic!("a kept stack not ablated: {stack}\n{context}"));
    let numbers: Vec<&serde_json::Value> = parts.iter().map(|p| &p["attempt"]).collect();
    let stack_of: Vec<&serde_json::Value> = stack["stack_of"].as_array().unwrap().iter().collect();
    assert_eq!(numbers, stack_of, "{context}");
    for p in parts {
        let without = p["without"]["ratio_median"].as_f64();
        assert!(
            without.is_some_and(|r| r > 1.0),
            "a part of a kept stack gives nothing: {p}\n{context}"
        );
    }
}

fn champion_source(root: &Path, id: &str) -> String {
    git(root, &["show", &format!("ratchet/{id}:treatment/server.c")])
}

#[test]
fn three_sub_threshold_savings_end_in_the_champion_through_a_stack() {
    let _g = exclusive();
    let repo = savings_repo();
    let root = repo.path();
    let out = ratchet_run(root, &[], &[]);
    assert!(out.status.success(), "{}", show(&out));
    let (id, run_dir) = only_run(root);
    let a = attempts(&run_dir);
    let summary: Vec<String> = a
        .iter()
        .map(|x| {
            format!(
                "#{} {} {} {} {} {}",
                x["number"],
                x["idea"],
                x["origin"],
                x["verdict"],
                x["vs_champion"]["ratio_median"],
                x["detail"]
            )
        })
        .collect();
    let context = format!("{summary:#?}\n{}", show(&out));
    // Each saving is worth 10-14%: the agent measures all three first,
    // and none of them alone clears the 20% line on the start (a measurement
    // may call one promising or, with its interval touching 1, a discard).
    for x in &a[..3] {
        assert_eq!(x["origin"], "agent", "{context}");
        assert!(
            x["verdict"] == "promising" || x["verdict"] == "discard",
            "{context}"
        );
    }
    // They reach the champion through a stack: a keep of two or more parts,
    // whatever a retry adds after it.
    let kept: Vec<_> = a.iter().filter(|x| x["verdict"] == "keep").collect();
    assert!(kept.iter().all(|x| x["origin"] != "agent"), "{context}");
    assert!(
        kept.iter()
            .any(|x| x["origin"] == "stack"
                && x["stack_of"].as_array().is_some_and(|p| p.len() >= 2)),
        "{context}"
    );
    // Each kept stack was ablated before its keep, and every part gave.
    for x in kept.iter().filter(|x| x["origin"] == "stack") {
        every_part_gives(x, &context);
    }
    // At least two savings are in the champion. A third may be left out
    // only as a saving the loop still rates promising at its last
    // measurement: a stack of all three (0.892 in the duet) was once
    // discarded by its confirmation alone (0.962 [0.895, 1.028] in 6
    // blocks), and the retry of the part left out measured 0.965 on the new
    // champion, promising but short of the line.
    let source = champion_source(root, &id);
    let mut in_champion = 0;
    for x in ["A", "B", "C"] {
        if source.contains(&define(&format!("EXTRA_{x}"), 0)) {
            in_champion += 1;
            continue;
        }
        let idea = format!("drop-extra-{}", x.to_lowercase());
        let last = a.iter().rev().find(|y| y["idea"] == idea.as_str());
        assert!(
            last.is_some_and(|y| y["verdict"] == "promising"),
            "saving {x} is neither in the champion nor promising: {context}"
        );
    }
    assert!(
        in_champion >= 2,
        "{in_champion} savings in the champion: {context}"
    );
    // Each champion is profiled as it is measured: rationed.
    let mut profiled = 0;
    for file in std::fs::read_dir(run_dir.join("profiles")).unwrap() {
        let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
        let profile: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(
            profile["regime"]
                .as_str()
                .is_some_and(|r| r.starts_with("saturated")),
            "{profile}"
        );
        // Asleep, a server switches about once per connection (1.17-1.21 in
        // the idle regime, benchmarks/runs/20261203T092426Z); rationed, at
        // most once per ration period, and again whenever its clients fall
        // behind for a moment. `perf record` shares the generator's core, so
        // they fall behind a little more than in a scored window: 0.204 in
        // one CI run. The line sits between busy and asleep, at 0.5.
        let switches = profile["context_switches_per_connection"].as_f64();
        assert!(
            switches.is_some_and(|cs| cs < 0.5),
            "busy, not asleep: {profile}"
        );
        profiled += 1;
    }
    assert_eq!(
        profiled,
        1 + kept.len(),
        "the start and each keep: {context}"
    );
}

/// Two changes that pay only together: one planted cost that either of two
/// definitions keeps (`spin_for(max(D, E))`), 800 per mille of the server's
/// own time, so dropping both saves 32-44% of the whole (own time 0.6-1.0
/// of the rest) and dropping one saves nothing. Each alone measures near 1,
/// no belief foresees the union, and the agent has nothing left: the run
/// keeps them only if the loop probes the pair before it stops.
#[test]
fn two_changes_worth_nothing_alone_are_kept_together_by_an_interaction_probe() {
    let _g = exclusive();
    let repo = planted_repo(
        &["D", "E"],
        800,
        // Read at run time, or the compiler folds the maximum and dropping
        // one builds the champion's own binary (a no_op).
        "\t{\n\t\tstatic volatile long d, e;\n\n\t\td = EXTRA_D;\n\t\te = EXTRA_E;\n\t\tspin_for(d > e ? d : e);\n\t}\n",
    );
    let root = repo.path();
    let out = ratchet_run(root, &[], &[]);
    assert!(out.status.success(), "{}", show(&out));
    let (id, run_dir) = only_run(root);
    let a = attempts(&run_dir);
    let context = format!("{}\n{}", verdict_details(&run_dir), show(&out));
    assert_eq!(a.len(), 3, "{context}");
    for (x, idea) in a.iter().zip(["drop-extra-d", "drop-extra-e"]) {
        assert_eq!(
            (x["idea"].as_str(), x["origin"].as_str()),
            (Some(idea), Some("agent"))
        );
        assert_ne!(x["verdict"], "keep", "{context}");
    }
    let pair = &a[2];
    assert_eq!(pair["origin"], "stack", "{context}");
    assert_eq!(pair["stack_of"], serde_json::json!([1, 2]), "{context}");
    assert_eq!(pair["verdict"], "keep", "{context}");
    every_part_gives(pair, &context);
    let source = champion_source(root, &id);
    for x in ["D", "E"] {
        assert!(
            source.contains(&define(&format!("EXTRA_{x}"), 0)),
            "{source}"
        );
    }
    // `ratchet log` and the report show what each part gave in the pair,
    // under the champion it made.
    let log = show(&ratchet_in(root, &["log", &id]));
    let step = log
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("3 "))
        .skip(1)
        .take(2)
        .collect::<Vec<_>>()
        .join("\n");
    for n in [1, 2] {
        assert!(
            step.contains(&format!("part #{n} (drop-extra-")) && step.contains(": gives"),
            "the log's lineage does not show part #{n} under the pair:\n{log}"
        );
    }
    let out = ratchet_in(root, &["report", &id]);
    assert!(out.status.success(), "{}", show(&out));
    let html = std::fs::read_to_string(run_dir.join("report.html")).unwrap();
    let lineage = html.split("<section id=\"lineage\">").nth(1).unwrap_or("");
    assert!(
        lineage.contains("part #1 (drop-extra-d): without it"),
        "the report's lineage does not show the pair's parts"
    );
    // The agents' lessons set the pair beside its parts.
    let lessons = std::fs::read_to_string(run_dir.join("lessons.md")).unwrap();
    let section = lessons
        .split_once("### Interactions measured")
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("no interactions in the lessons:\n{lessons}"));
    assert!(
        section.contains("#1 Drop planted cost D")
            && section.contains("pay more together than apart"),
        "{section}"
    );
}
