//! What the referee concludes from honest servers and tells the user: the
//! shipped control and treatment pass the gate with a full report, an A/A
//! comparison lands near 1 and never promotes, a planted cost per
//! connection is `worse` and its removal `better`, the table names its unit,
//! and bad configuration or arms are refused by name. They belong together
//! because each is the referee's answer, seen from outside.

mod common;

use common::referee::arm;
use common::*;

#[test]
fn control_and_treatment_pass_the_gate() {
    let _g = exclusive();
    let config = repo_root().join("harness.toml");
    let (report, _) = compare_json(&config, &["control", "treatment"], 6, &[]);
    for i in 0..2 {
        assert_eq!(arm(&report, i)["gate"]["passed"], true, "{report}");
        assert!(
            arm(&report, i)["cost_per_connection"]["median"]
                .as_f64()
                .unwrap()
                > 0.0
        );
        assert!(arm(&report, i)["score"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(
        report["meter"]["unit"],
        if report["meter"]["event"] == "instructions" {
            "instructions"
        } else {
            "ns"
        }
    );
    let env = &report["environment"];
    assert_eq!(env["control_source_sha256"].as_str().unwrap().len(), 64);
    assert_eq!(env["treatment_source_sha256"].as_str().unwrap().len(), 64);
    assert!(report["comparisons"][0]["ratio_interval"].is_array());
}

/// An A/A comparison must never promote and must land near 1. It is not
/// asserted to be `same`: a 95% interval leaves out 1 in about one A/A run in
/// twenty by construction, and `worse` and `promising` ask for no minimum
/// effect, so such a test would fail that often without any fault.
#[test]
fn the_same_server_against_itself_is_never_better_and_lands_near_one() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let ok = faulty_arm("ok");
    let (report, _) = compare_json(&ws.path().join("harness.toml"), &[&ok, &ok], 12, &[]);
    let c = &report["comparisons"][0];
    assert!(
        ["same", "worse", "promising"].contains(&c["verdict"].as_str().unwrap()),
        "an A/A comparison was judged {}: {c}",
        c["verdict"]
    );
    let median = c["ratio_median"].as_f64().unwrap();
    assert!((0.85..1.18).contains(&median), "A/A median {median}: {c}");
}

/// 100 us is several times the fixture's own cost per connection on any CPU
/// seen so far, so the verdict does not hang on the machine's speed.
#[test]
fn a_known_extra_cost_per_connection_is_worse() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let ok = faulty_arm("ok");
    let slow = format!("{} --spin-us 100", faulty_arm("spin"));
    let (report, _) = compare_json(&ws.path().join("harness.toml"), &[&ok, &slow], 6, &[]);
    let c = &report["comparisons"][0];
    assert_eq!(c["verdict"], "worse", "{c}");
    assert!(c["ratio_median"].as_f64().unwrap() > 1.2, "{c}");
}

/// The same planted cost, seen from the other side.
#[test]
fn a_known_saving_per_connection_is_better() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let ok = faulty_arm("ok");
    let slow = format!("{} --spin-us 100", faulty_arm("spin"));
    let (report, out) = compare_json(&ws.path().join("harness.toml"), &[&slow, &ok], 6, &[]);
    let c = &report["comparisons"][0];
    let why = || {
        let arms: Vec<String> = (0..2)
            .map(|i| {
                let saturated: Vec<String> = report["trials"][i]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t["saturated"].to_string())
                    .collect();
                format!(
                    "gate {} saturated [{}]",
                    arm(&report, i)["gate"],
                    saturated.join(", ")
                )
            })
            .collect();
        format!(
            "{c}\n{}\n{}",
            arms.join("\n"),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    assert_eq!(c["verdict"], "better", "{}", why());
    assert!(c["ratio_median"].as_f64().unwrap() < 0.8, "{c}");
    assert!(c["ci_coverage"].as_f64().unwrap() > 0.95, "{c}");
    // Every window of the duet measured both arms, in an audited order.
    assert_eq!(report["orders"].as_array().unwrap().len(), 6, "{report}");
}

#[test]
fn the_table_names_the_unit_and_the_verdict() {
    let _g = exclusive();
    let ws = temp_workspace("");
    let ok = faulty_arm("ok");
    let out = std::process::Command::new(ratchet())
        .arg("--config")
        .arg(ws.path().join("harness.toml"))
        .args(["compare", &ok, &ok, "--blocks", "6"])
        .args(QUICK)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("/conn") && text.contains("=> "), "{text}");
    assert!(
        text.contains(" ns/conn") || text.contains(" instructions/conn"),
        "{text}"
    );
}

#[test]
fn malformed_configuration_names_the_field() {
    let ws = temp_workspace("[gate]\nmax_failure_rate = \"low\"\n");
    let out = std::process::Command::new(ratchet())
        .arg("--config")
        .arg(ws.path().join("harness.toml"))
        .args(["compare", "control", "treatment"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("harness.toml") && err.contains("max_failure_rate"),
        "{err}"
    );
}

#[test]
fn an_unknown_arm_is_refused_clearly() {
    let ws = temp_workspace("");
    let out = std::process::Command::new(ratchet())
        .arg("--config")
        .arg(ws.path().join("harness.toml"))
        .args(["compare", "control", "treatmnet"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("treatmnet") && err.contains("expected control"),
        "{err}"
    );
}
