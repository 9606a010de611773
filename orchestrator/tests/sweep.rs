//! `ratchet sweep` on a fresh fixture repository: every arm measured at
//! every connection level, and the curves drawn. It needs no recorded run,
//! so it is kept out of tests/review.rs, whose tests share one.

mod common;

use common::cli::{f, json_of, ratchet_in, show};
use common::*;
use std::path::PathBuf;

#[test]
fn sweep_measures_every_arm_at_every_level_and_draws_the_curves() {
    let _g = exclusive();
    let repo = fixture_repo("", &[]);
    let root = repo.path();
    let s = json_of(
        root,
        &[
            "sweep",
            "treatment",
            "control",
            "--connections",
            "8,32",
            "--blocks",
            "6",
            "--window-ms",
            "400",
            "--warmup-ms",
            "150",
            "--json",
        ],
    );
    let levels = s["levels"].as_array().unwrap();
    assert_eq!(
        levels
            .iter()
            .map(|l| l["connections"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [8, 32]
    );
    for l in levels {
        let arms = l["arms"].as_array().unwrap();
        assert_eq!(arms.len(), 2);
        for a in arms {
            assert_eq!(a["gate"]["passed"], true, "{a}");
            assert!(f(&a["cost_per_connection"]["median"]) > 0.0);
            assert!(f(&a["throughput_cps"]) > 0.0);
            assert!(f(&a["latency_us"]["p99"]) > 0.0);
        }
        for limit in l["limits"].as_array().unwrap() {
            assert!(["generator", "server", "neither"].contains(&limit.as_str().unwrap()));
        }
        assert!(l["comparisons"][0]["ratio_median"].is_number());
    }
    let sweeps: Vec<PathBuf> = std::fs::read_dir(root.join("results/sweeps"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let svg = sweeps
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "svg"))
        .expect("a chart is written");
    let text = std::fs::read_to_string(svg).unwrap();
    assert_eq!(
        text.matches("<svg class=\"chart\"").count(),
        3,
        "cost, throughput, p99"
    );
    // A bad level is named before anything runs.
    let out = ratchet_in(root, &["sweep", "treatment", "--connections", "8,0"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("load.connections"),
        "{}",
        show(&out)
    );
}
