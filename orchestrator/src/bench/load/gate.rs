//! The gate: whether one trial's measurement may be scored at all. A trial
//! that fails it scores zero and makes its arm `invalid`; it is never silently
//! dropped from the samples.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::bench::load::contract::{Failure, FailureCounts};
use crate::bench::load::loadgen::LoadTotals;
use crate::check::range;

/// Everything the gate looks at, gathered by one trial.
#[derive(Clone, Debug, Default)]
pub struct GateEvidence {
    /// Connections attempted and completed over the whole trial: warm-up,
    /// measured window and drain. Every connection is judged, so a server
    /// that misbehaves only while it is being measured is caught.
    pub attempts: u64,
    pub completed: u64,
    pub failures: FailureCounts,
    pub window_completed: u64,
    pub alive: bool,
    pub off_core_ns: u64,
    /// Connections the server still held once every client was done (see
    /// [`crate::bench::servers::launch::RunningServer::held_connections`]).
    pub held_connections: u64,
    /// In the emulated meter's batches: the server's CPU time outside its
    /// measured windows, where it exceeded the tolerance (see
    /// `bench/emulated/batch.rs`): work deferred out of the count.
    pub deferred_work_ns: u64,
    pub start_error: Option<String>,
    /// Leaks an endurance run read (see `bench/host/endurance.rs`).
    pub growth: Vec<Growth>,
}

/// A leak: what grew, by how much (in the unit its detail names).
#[derive(Clone, Debug, PartialEq)]
pub struct Growth {
    pub reason: GateReason,
    pub amount: u64,
    pub detail: String,
}

impl GateEvidence {
    /// The evidence of a trial with no measured window of its own (the
    /// screen, the probe): every connection it completed counts toward
    /// the gate's least, and a client still waiting at the drain's deadline
    /// never got its answer, so it counts as a timeout.
    pub fn from_totals(t: &LoadTotals, alive: bool) -> Self {
        let mut failures = t.snapshot.failures;
        failures[Failure::Timeout.index()] += t.stuck_clients as u64;
        GateEvidence {
            attempts: t.snapshot.attempts,
            completed: t.snapshot.completed,
            failures,
            window_completed: t.snapshot.completed,
            alive,
            ..Default::default()
        }
    }
}

/// Why a gate counts against a trial: a failure class of its connections,
/// or a rule of the gate it broke. Records spell each in snake_case, as
/// they always have; the variants are in that spelling's order, so a
/// record's reasons stay in the order they always had.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateReason {
    Connect,
    DeferredClose,
    DeferredWork,
    DescriptorGrowth,
    ExtraBytes,
    MemoryGrowth,
    NoListen,
    OffCore,
    Reset,
    ServerExited,
    SocketGrowth,
    Timeout,
    TooFewCompleted,
    Truncated,
    WrongBytes,
}

impl GateReason {
    pub fn name(self) -> &'static str {
        match self {
            GateReason::Connect => "connect",
            GateReason::DeferredClose => "deferred_close",
            GateReason::DeferredWork => "deferred_work",
            GateReason::DescriptorGrowth => "descriptor_growth",
            GateReason::ExtraBytes => "extra_bytes",
            GateReason::MemoryGrowth => "memory_growth",
            GateReason::NoListen => "no_listen",
            GateReason::OffCore => "off_core",
            GateReason::Reset => "reset",
            GateReason::ServerExited => "server_exited",
            GateReason::SocketGrowth => "socket_growth",
            GateReason::Timeout => "timeout",
            GateReason::TooFewCompleted => "too_few_completed",
            GateReason::Truncated => "truncated",
            GateReason::WrongBytes => "wrong_bytes",
        }
    }
}

impl From<Failure> for GateReason {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Connect => GateReason::Connect,
            Failure::Reset => GateReason::Reset,
            Failure::Timeout => GateReason::Timeout,
            Failure::Truncated => GateReason::Truncated,
            Failure::WrongBytes => GateReason::WrongBytes,
            Failure::ExtraBytes => GateReason::ExtraBytes,
        }
    }
}

impl std::fmt::Display for GateReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Reasons as the tables print them: `{"reset": 20, "timeout": 1}`.
pub fn fmt_reasons(reasons: &BTreeMap<GateReason, u64>) -> String {
    let items: Vec<String> = reasons
        .iter()
        .map(|(k, v)| format!("{:?}: {v}", k.name()))
        .collect();
    format!("{{{}}}", items.join(", "))
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct GateResult {
    pub passed: bool,
    pub attempts: u64,
    pub completed: u64,
    pub failures: u64,
    pub failure_rate: f64,
    /// Failure classes and gate violations with their counts (off_core in ns).
    pub reasons: BTreeMap<GateReason, u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub detail: Vec<String>,
}

pub fn check(e: &GateEvidence, cfg: &GateConfig) -> GateResult {
    let failures: u64 = e.failures.iter().sum();
    let failure_rate = if e.attempts == 0 {
        0.0
    } else {
        failures as f64 / e.attempts as f64
    };
    let mut reasons = BTreeMap::new();
    for f in Failure::ALL {
        if e.failures[f.index()] > 0 {
            reasons.insert(f.into(), e.failures[f.index()]);
        }
    }
    let mut detail = Vec::new();
    let mut violated = false;
    if let Some(err) = &e.start_error {
        reasons.insert(GateReason::NoListen, 1);
        detail.push(err.clone());
        violated = true;
    } else {
        if failures > 0 && failure_rate >= cfg.max_failure_rate {
            detail.push(format!(
                "failure rate {failure_rate:.6} ({failures} of {} attempts: {}) is not below gate.max_failure_rate {}",
                e.attempts,
                fmt_reasons(&reasons),
                cfg.max_failure_rate
            ));
            violated = true;
        }
        if e.window_completed < cfg.min_completed {
            reasons.insert(GateReason::TooFewCompleted, e.window_completed);
            detail.push(format!(
                "{} connections completed in the window, gate.min_completed is {}",
                e.window_completed, cfg.min_completed
            ));
            violated = true;
        }
        if !e.alive {
            reasons.insert(GateReason::ServerExited, 1);
            detail.push("the server exited during the trial".into());
            violated = true;
        }
        if e.off_core_ns > 0 {
            reasons.insert(GateReason::OffCore, e.off_core_ns);
            detail.push(format!(
                "the server ran {} ns on cores other than the SUT core",
                e.off_core_ns
            ));
            violated = true;
        }
        if e.deferred_work_ns > 0 {
            reasons.insert(GateReason::DeferredWork, e.deferred_work_ns);
            detail.push(format!(
                "the server ran {} ns between its measured windows, while no client waited on it: work deferred out of the count",
                e.deferred_work_ns
            ));
            violated = true;
        }
        for g in &e.growth {
            reasons.insert(g.reason, g.amount);
            detail.push(g.detail.clone());
            violated = true;
        }
        if e.held_connections > 0 {
            reasons.insert(GateReason::DeferredClose, e.held_connections);
            detail.push(format!(
                "the server still held {} connections after every client was done: teardown deferred out of the measured window",
                e.held_connections
            ));
            violated = true;
        }
    }
    GateResult {
        passed: !violated,
        attempts: e.attempts,
        completed: e.completed,
        failures,
        failure_rate,
        reasons,
        detail,
    }
}

/// Sums the gates of several trials of one arm: it passes only if all did.
pub fn combine(results: &[GateResult]) -> GateResult {
    let mut out = GateResult {
        passed: !results.is_empty(),
        ..Default::default()
    };
    for r in results {
        out.passed &= r.passed;
        out.attempts += r.attempts;
        out.completed += r.completed;
        out.failures += r.failures;
        for (k, v) in &r.reasons {
            *out.reasons.entry(*k).or_default() += v;
        }
        for d in &r.detail {
            if !out.detail.contains(d) {
                out.detail.push(d.clone());
            }
        }
    }
    out.failure_rate = if out.attempts == 0 {
        0.0
    } else {
        out.failures as f64 / out.attempts as f64
    };
    out
}

/// `[gate]` in harness.toml.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct GateConfig {
    pub max_failure_rate: f64,
    pub min_completed: u64,
    /// Before a keep and in `check`: connections one server process serves
    /// on the host, its memory and descriptors read for growth
    /// (`bench/host/endurance.rs`); 0: off.
    pub endurance_connections: u64,
    /// ...within this long, or it has served too few.
    pub endurance_seconds: u64,
}

impl Default for GateConfig {
    fn default() -> Self {
        Self {
            max_failure_rate: 0.0001,
            min_completed: 1000,
            endurance_connections: 100_000,
            endurance_seconds: 120,
        }
    }
}

impl GateConfig {
    pub fn validate(&self) -> Result<()> {
        range("gate.max_failure_rate", self.max_failure_rate, 0.0, 1.0)?;
        if self.endurance_connections > 0 && self.endurance_connections < 10_000 {
            bail!(
                "gate.endurance_connections must be 0 (off) or at least 10000, got {}: fewer cannot show growth past a warm-up",
                self.endurance_connections
            );
        }
        if self.endurance_connections > 0 && self.endurance_seconds == 0 {
            bail!("gate.endurance_seconds must be above 0 while gate.endurance_connections is on");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_keep_the_names_records_have_always_had() {
        let all = [
            GateReason::Connect,
            GateReason::DeferredClose,
            GateReason::DeferredWork,
            GateReason::ExtraBytes,
            GateReason::NoListen,
            GateReason::OffCore,
            GateReason::Reset,
            GateReason::ServerExited,
            GateReason::Timeout,
            GateReason::TooFewCompleted,
            GateReason::Truncated,
            GateReason::WrongBytes,
        ];
        for r in all {
            assert_eq!(serde_json::to_value(r).unwrap(), r.name());
        }
        let names: Vec<&str> = all.iter().map(|r| r.name()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "variants in the order of their names");
        for f in Failure::ALL {
            assert_eq!(serde_json::to_value(f).unwrap(), GateReason::from(f).name());
        }
        let old: GateResult = serde_json::from_str(
            r#"{"passed":false,"attempts":9,"completed":8,"failures":1,"failure_rate":0.1,
                "reasons":{"deferred_work":40,"too_few_completed":8}}"#,
        )
        .unwrap();
        assert_eq!(old.reasons[&GateReason::DeferredWork], 40);
        assert_eq!(
            fmt_reasons(&old.reasons),
            r#"{"deferred_work": 40, "too_few_completed": 8}"#
        );
    }

    fn healthy() -> GateEvidence {
        GateEvidence {
            attempts: 100_000,
            completed: 100_000,
            window_completed: 60_000,
            alive: true,
            ..Default::default()
        }
    }

    #[test]
    fn connections_held_after_the_clients_are_done_fail_the_gate() {
        let mut e = healthy();
        e.held_connections = 3;
        let g = check(&e, &GateConfig::default());
        assert!(!g.passed);
        assert_eq!(g.reasons[&GateReason::DeferredClose], 3);
    }

    #[test]
    fn healthy_trial_passes() {
        let g = check(&healthy(), &GateConfig::default());
        assert!(g.passed, "{g:?}");
        assert!(g.reasons.is_empty());
    }

    #[test]
    fn rate_at_or_above_limit_fails_and_below_passes() {
        let mut e = healthy();
        e.failures[Failure::Reset.index()] = 10; // exactly 1e-4
        let g = check(&e, &GateConfig::default());
        assert!(!g.passed);
        assert_eq!(g.reasons[&GateReason::Reset], 10);
        e.failures[Failure::Reset.index()] = 9;
        let g = check(&e, &GateConfig::default());
        assert!(g.passed, "9 in 100000 is below 1e-4: {g:?}");
        assert_eq!(
            g.reasons[&GateReason::Reset],
            9,
            "failures are reported even when tolerated"
        );
    }

    #[test]
    fn each_violation_is_named() {
        let cfg = GateConfig::default();
        let mut e = healthy();
        e.alive = false;
        assert!(check(&e, &cfg)
            .reasons
            .contains_key(&GateReason::ServerExited));
        let mut e = healthy();
        e.off_core_ns = 5;
        assert_eq!(check(&e, &cfg).reasons[&GateReason::OffCore], 5);
        let mut e = healthy();
        e.window_completed = 3;
        assert!(!check(&e, &cfg).passed);
        let e = GateEvidence {
            start_error: Some("never listened".into()),
            ..Default::default()
        };
        let g = check(&e, &cfg);
        assert!(!g.passed && g.reasons.contains_key(&GateReason::NoListen));
    }

    #[test]
    fn totals_judge_every_connection_and_count_stuck_clients_as_timeouts() {
        use crate::bench::load::loadgen::LoadSnapshot;
        let mut snapshot = LoadSnapshot {
            attempts: 70,
            completed: 64,
            ..Default::default()
        };
        snapshot.failures[Failure::Timeout.index()] = 1;
        snapshot.failures[Failure::Reset.index()] = 2;
        let t = LoadTotals {
            snapshot,
            latency_us: hdrhistogram::Histogram::new(3).unwrap(),
            stuck_clients: 3,
        };
        let e = GateEvidence::from_totals(&t, false);
        assert_eq!((e.attempts, e.completed, e.window_completed), (70, 64, 64));
        assert_eq!(e.failures[Failure::Timeout.index()], 4);
        assert_eq!(e.failures[Failure::Reset.index()], 2);
        assert!(!e.alive);
        assert_eq!(e.held_connections, 0);
        assert_eq!(e.start_error, None);
    }

    #[test]
    fn combined_gate_needs_every_trial() {
        let cfg = GateConfig::default();
        let good = check(&healthy(), &cfg);
        let mut e = healthy();
        e.alive = false;
        let bad = check(&e, &cfg);
        assert!(combine(&[good.clone(), good.clone()]).passed);
        let c = combine(&[good, bad]);
        assert!(!c.passed);
        assert_eq!(c.attempts, 200_000);
    }
}
