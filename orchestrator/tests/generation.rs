//! A generation (`search.generation = 3`) end to end on the real servers and
//! the host's generator: three candidates screened in one measurement, the
//! best judged first by the keep rule, and replayed as a generation. The
//! fixture's cheapest candidate crashes after many connections: a screen
//! (fresh servers, a few thousand connections each) ranks it first, and only
//! the keep rule's endurance run reaches the crash, so the screen must not
//! be what keeps.

mod common;

use common::cli::{ratchet_in, show};
use common::*;
use serde_json::Value;

/// The fixture's busy-wait on the accept path is 160 µs a connection; the
/// threshold is the coarse one of the other loop tests.
fn playbook() -> Vec<String> {
    vec![
        entry(
            "halve-spin",
            "Halve the busy-wait on the accept path",
            "#define SPIN_NS 160000L\n",
            "#define SPIN_NS 80000L\n",
        ),
        // Cheapest by far, and aborts at its 60,000th connection: past any
        // one server process of a screen or a measurement here, short of
        // the endurance run's 80,000.
        entry(
            "drop-spin-then-crash",
            "Remove the busy-wait (and crash late)",
            "\tslow_down();\n",
            "\tstatic long served;\n\n\tif (++served == 60000)\n\t\tabort();\n",
        ),
        entry(
            "spin-on-recv",
            "Busy-wait before every recv",
            "\ttag(sqe, c, OP_RECV);\n",
            "\tslow_down();\n\ttag(sqe, c, OP_RECV);\n",
        ),
    ]
}

const GENERATION: &str = r#"
[search]
generation = 3
stack = false
"#;

fn by_idea<'a>(a: &'a [Value], idea: &str) -> &'a Value {
    a.iter()
        .find(|x| x["idea"] == idea)
        .unwrap_or_else(|| panic!("no attempt of {idea}: {a:#?}"))
}

#[test]
fn a_generation_is_screened_together_judged_best_first_and_replayed() {
    let _g = exclusive();
    let repo = fixture_repo("", &playbook());
    let root = repo.path();
    let config = std::fs::read_to_string(root.join("harness.toml")).unwrap();
    let config = config
        .replace(
            "endurance_connections = 10000",
            "endurance_connections = 80000",
        )
        .replace("[run]\n", "[run]\nmax_iterations = 3\n");
    std::fs::write(root.join("harness.toml"), format!("{config}{GENERATION}")).unwrap();
    commit_all(root, "a generation of three");
    let out = ratchet_run(root, &[], &[]);
    assert!(out.status.success(), "{}", show(&out));
    let (id, run_dir) = only_run(root);
    let a = attempts(&run_dir);
    let context = format!("{a:#?}\n{}", show(&out));
    assert_eq!(a.len(), 3, "{context}");
    // Journaled in order, all three in the one screen.
    let numbers: Vec<u64> = a.iter().map(|x| x["number"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [1, 2, 3], "{context}");
    for x in &a {
        assert_eq!(
            x["screen"]["generation"],
            serde_json::json!([1, 2, 3]),
            "{context}"
        );
    }
    // The crashing candidate ranked first, was judged first, and its
    // endurance run caught it: the keep rule, not the screen, decides.
    let crash = by_idea(&a, "drop-spin-then-crash");
    assert_eq!(crash["screen"]["rank"], 1, "{context}");
    assert_eq!(crash["verdict"], "invalid", "{context}");
    assert!(
        crash["detail"].as_str().unwrap().contains("endurance"),
        "{context}"
    );
    // Then the second: kept, on a measurement of its own (not the screen's).
    let halve = by_idea(&a, "halve-spin");
    assert_eq!(halve["screen"]["rank"], 2, "{context}");
    assert_eq!(halve["verdict"], "keep", "{context}");
    assert_ne!(
        halve["vs_champion"]["block_ratios"], halve["screen"]["vs_champion"]["block_ratios"],
        "{context}"
    );
    // The third cost more than the champion in the screen: not judged.
    let recv = by_idea(&a, "spin-on-recv");
    assert_eq!(recv["verdict"], "screened", "{context}");
    assert_eq!(recv["screen"]["rank"], 3, "{context}");
    assert!(recv["vs_champion"]["ratio_median"].as_f64().unwrap() > 1.0);
    let source = git(root, &["show", &format!("ratchet/{id}:treatment/server.c")]);
    assert!(source.contains("#define SPIN_NS 80000L"), "{source}");
    assert!(!source.contains("abort()"), "{source}");

    // The log says where each judged attempt ranked.
    let log = ratchet_in(root, &["log", &id, "--all"]);
    let text = show(&log);
    assert!(
        text.contains("ranked 1 of 3 in the screen of #1, #2, #3"),
        "{text}"
    );
    assert!(text.contains("screened"), "{text}");

    // Replayed as a generation: screened again, judged again in order.
    let rep = ratchet_in(root, &["replay", &id, "--decisions", "--json"]);
    assert!(rep.status.success(), "{}", show(&rep));
    let r: Value = serde_json::from_slice(&rep.stdout).unwrap();
    let replayed: Vec<(u64, String)> = r["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["attempt"].as_u64().unwrap(),
                d["replayed"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let recorded: Vec<(u64, String)> = a
        .iter()
        .map(|x| {
            (
                x["number"].as_u64().unwrap(),
                x["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(replayed, recorded, "{}", show(&rep));
}
