//! The search on a real run with the emulated meter at a 10% line: a
//! fixture server with three independent planted savings of 6.5% each.
//! None clears the line alone, so a greedy climb keeps none of them; the loop
//! keeps them together, through a stack of the promising attempts. A second
//! fixture plants one cost that two changes must both drop: the loop keeps
//! them through an interaction probe.
//!
//! The planted costs are counted loops, so each saving is the same number of
//! instructions on every machine and every run: the test is of the search's
//! logic, with none of the host's drift (on task-clock it needed a 20% line,
//! savings of 10-15% measured by the server itself, and ten minutes).

mod common;

use common::cli::{ratchet_in, show};
use common::*;
use std::path::Path;

/// Counted-loop iterations per connection of each planted cost. An
/// iteration of `spend` is 5.45 guest instructions, and the fixture costs
/// about 41,000 a connection in small backlogs with nothing planted
/// (measured with `ratchet compare`, 2026-12-08): 600 iterations are 6.5%
/// of the server with three planted, so one alone is short of the 10% line
/// and two or three clear it.
const EXTRA_ITERATIONS: u64 = 600;

/// The emulated meter with backlogs small enough for a test, and a line to
/// match. Counts are exact, but a trial of 64 connections is a small draw
/// of what a connection costs (a block's ratio spreads 1.6%, against 0.45%
/// at the default four batches of 256), so at 3% the A/A check asked for 22
/// samples a measurement. The search's logic does not depend on where the
/// line is; at 10% six samples resolve a planted part and clear a pair.
/// The live window that profiles each champion is small too.
const EMULATED: &str = r#"
[meter]
event = "emulated"
[emulator]
backlog = 128
batches = 1
warmup_connections = 256
window_connections = 512
[load]
connections = 32
[trial]
warmup_ms = 150
window_ms = 400
[gate]
min_completed = 50
endurance_connections = 10000
[compare]
samples = 6
threshold = 0.1
[run]
smoke_window_ms = 200
suspicious_gain = 20.0
profile = true
max_iterations = 8
"#;

/// The planted cost: a loop of `n` counted iterations, which the compiler
/// may not fold (the sink is volatile).
const SPEND: &str = "static volatile unsigned long sink;\n\nstatic void spend(long n)\n{\n\tlong i;\n\n\tfor (i = 0; i < n; i++)\n\t\tsink++;\n}\n\n";

fn define(name: &str, ns: u64) -> String {
    format!("#define {name} {ns}L\n")
}

fn playbook(costs: &[&str], iterations: u64) -> Vec<String> {
    costs
        .iter()
        .map(|x| {
            entry(
                &format!("drop-extra-{}", x.to_lowercase()),
                &format!("Drop planted cost {x}"),
                &define(&format!("EXTRA_{x}"), iterations),
                &define(&format!("EXTRA_{x}"), 0),
            )
        })
        .collect()
}

/// A fixture repository with planted costs, each defined on its own line
/// with unchanged lines between, so their edits merge; `spins` is the C
/// that spends them for each connection; `profile`: each champion profiled.
fn planted_repo(costs: &[&str], iterations: u64, spins: &str, profile: bool) -> tempfile::TempDir {
    let repo = fixture_repo_with_spin("", &playbook(costs, iterations), 0);
    let root = repo.path();
    let server = root.join("treatment/server.c");
    let text = std::fs::read_to_string(&server).unwrap();
    let defines: String = costs
        .iter()
        .map(|x| {
            format!(
                "/* planted cost {x}: */\n{}/* (end of {x}) */\n\n",
                define(&format!("EXTRA_{x}"), iterations)
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
            &format!("{SPEND}static void on_accept("),
            1,
        )
        .replacen("\tslow_down();\n", &format!("\tslow_down();\n{spins}"), 1);
    std::fs::write(&server, text).unwrap();
    let config = EMULATED.replace("profile = true", &format!("profile = {profile}"));
    std::fs::write(root.join("harness.toml"), config).unwrap();
    commit_all(root, "planted costs");
    repo
}

/// The three independent planted costs.
fn savings_repo() -> tempfile::TempDir {
    planted_repo(
        &["A", "B", "C"],
        EXTRA_ITERATIONS,
        "\tspend(EXTRA_A);\n\tspend(EXTRA_B);\n\tspend(EXTRA_C);\n",
        true,
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
                "#{} {} {} {} {} {} {}",
                x["number"],
                x["idea"],
                x["origin"],
                x["verdict"],
                x["vs_champion"]["ratio_median"],
                x["durations"]["measure_s"],
                x["detail"]
            )
        })
        .collect();
    let context = format!("{summary:#?}\n{}", show(&out));
    // Each saving is worth 6.5%: the agent measures all three first, and
    // each is resolved cheaper but short of the 10% line on the start.
    for x in &a[..3] {
        assert_eq!(x["origin"], "agent", "{context}");
        assert_eq!(x["verdict"], "promising", "{context}");
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
    // All three savings are in the champion.
    let source = champion_source(root, &id);
    for x in ["A", "B", "C"] {
        assert!(
            source.contains(&define(&format!("EXTRA_{x}"), 0)),
            "saving {x} is not in the champion: {context}"
        );
    }
    // Each champion is profiled as it is measured: by function, in
    // emulated instructions on the server's own vCPU, the kernel's named.
    let mut profiled = 0;
    for file in std::fs::read_dir(run_dir.join("profiles")).unwrap() {
        let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
        let profile: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(profile["unit"], "emulated instructions", "{profile}");
        assert!(
            profile["regime"]
                .as_str()
                .is_some_and(|r| r.contains("live regime")),
            "{profile}"
        );
        let top = profile["top"].as_array().unwrap();
        assert!(
            top.iter().any(|f| f[1] == "[kernel]"
                && f[2].as_str().is_some_and(|name| name.starts_with("tcp_"))),
            "no kernel function named: {profile}"
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
/// definitions keeps (`spend(max(D, E))`), 1,900 iterations (about 10,400
/// instructions, 20% of the server), so dropping both saves 20% and
/// dropping one saves nothing. Each alone measures at 1, no belief foresees the
/// union, and the agent has nothing left: the run keeps them only if the
/// loop probes the pair before it stops.
#[test]
fn two_changes_worth_nothing_alone_are_kept_together_by_an_interaction_probe() {
    let _g = exclusive();
    let repo = planted_repo(
        &["D", "E"],
        1900,
        // Read at run time, or the compiler folds the maximum and dropping
        // one builds the champion's own binary (a no_op).
        "\t{\n\t\tstatic volatile long d, e;\n\n\t\td = EXTRA_D;\n\t\te = EXTRA_E;\n\t\tspend(d > e ? d : e);\n\t}\n",
        // The first test holds the champions' profiles.
        false,
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
