//! The regime a measurement runs in: as configured (`[saturation]`) and as
//! recorded with its samples. What the host's probe and rations, and the
//! emulator's backlogs and live clients, settle is written here, so the
//! referee and review read it without knowing which host measured.

use serde::{Deserialize, Serialize};

use crate::bench::servers::cgroup::Allotment;
use crate::check::range;

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Regime {
    /// Every server rationed so that it always has work: its busy cost.
    #[default]
    Saturated,
    /// No rationing: servers sleep between arrivals when the generator is
    /// the bottleneck (what ratchet measured before; an explicit option).
    Idle,
}

/// `[saturation]` in harness.toml.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SaturationConfig {
    pub regime: Regime,
    /// How busy the probe sizes the generator to be: the rest is its
    /// headroom, so the servers, not the generator, set the pace.
    pub generator_target: f64,
    /// A window in which an arm used less of its allotment than this ran out
    /// of work: it is not scored as saturated. Low, because the scheduler
    /// shares the group's quota by task, not by arm: beside the
    /// multi-threaded Go control (1.45 of a fair share) the single-threaded
    /// treatment used 0.55 while it always had work (measured); the floor
    /// catches an arm that leaves most of its share unused.
    pub min_allotment_used: f64,
    /// Nor is one with more context switches per connection than this: the
    /// arm slept and woke on about every arrival (1.3-1.5 for the treatment
    /// in an unrationed duet). A multi-threaded server switches while it
    /// has work (the Go control's runtime hands off between its threads:
    /// 0.25-0.6 per connection when rationed, half of them voluntary), so
    /// this cannot be tight; a server that sleeps briefly but catches up on
    /// its allotment passes it, and the probe's backlog warning is what
    /// covers that case.
    pub max_context_switches: f64,
    /// A window in which the server's group spent its whole quota in fewer
    /// of its bandwidth periods than this did not always have work (0: not
    /// checked, as on the host, where the probe sizes the quota; the
    /// emulated guest, whose quota is fixed, checks 0.9).
    pub min_throttled_share: f64,
    /// How long the probe measures.
    pub probe_ms: u64,
    /// Keep the SUT core from halting between quotas (see
    /// [`crate::bench::host::ballast`]).
    pub ballast: bool,
}

impl Default for SaturationConfig {
    fn default() -> Self {
        Self {
            regime: Regime::Saturated,
            generator_target: 0.65,
            min_allotment_used: 0.25,
            max_context_switches: 1.0,
            min_throttled_share: 0.0,
            probe_ms: 600,
            ballast: true,
        }
    }
}

impl SaturationConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        range(
            "saturation.generator_target",
            self.generator_target,
            0.05,
            0.95,
        )?;
        range(
            "saturation.min_allotment_used",
            self.min_allotment_used,
            0.0,
            1.0,
        )?;
        range(
            "saturation.max_context_switches",
            self.max_context_switches,
            0.0,
            1000.0,
        )?;
        range("saturation.probe_ms", self.probe_ms as f64, 100.0, 60_000.0)
    }
}

/// The regime a measurement ran in, recorded with it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct RegimeRecord {
    pub regime: Regime,
    /// Every arm's allotment (the same for all) in a duet, in the saturated
    /// regime...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allotment: Option<Allotment>,
    /// ...and each arm's own under the blocks schedule, by arm (empty in a
    /// duet, and in blocks measured before arms were sized alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alone: Vec<Allotment>,
    /// What the probe measured: each arm's busy cost per connection in the
    /// meter's unit (None for an arm that served nothing)...
    #[serde(default)]
    pub probe_costs: Vec<Option<f64>>,
    /// ...and the connections per second the generator could drive at 100%
    /// of its cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator_capacity_cps: Option<f64>,
    /// How long the probe ran before it read: until every arm had served
    /// its backlog four times over (`bench/host/probe.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_warmup_ms: Option<u64>,
    /// In the emulated meter: the connections queued for each server
    /// before it ran (`bench/emulated/batch.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<u64>,
    /// In the emulated meter's live regime: the clients and the guest
    /// (`bench/emulated/live.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveLoad>,
    /// Why this measurement may not be in the saturated regime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// The live regime's load, as recorded.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LiveLoad {
    /// Clients in flight, each holding one connection at a time.
    pub connections: u64,
    /// The guest's vCPUs: the last the server's, the others the clients'.
    pub vcpus: u64,
    /// Whether the server's vCPU ran without its tick (`emulator.nohz_full`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nohz_full: bool,
}

impl RegimeRecord {
    pub fn idle(why: String) -> Self {
        Self {
            regime: Regime::Idle,
            warning: Some(why),
            ..Default::default()
        }
    }

    /// Arm `i`'s allotment: its own where arms were sized alone.
    pub fn allotment_of(&self, i: usize) -> Option<Allotment> {
        self.alone.get(i).copied().or(self.allotment)
    }

    /// One line for tables and logs.
    pub fn describe(&self) -> String {
        if let Some(l) = self.live {
            return format!(
                "saturated, live: {} clients in flight on {} vCPUs beside the server alone on its own{}; \
                 the cost is the server vCPU's instructions",
                l.connections,
                l.vcpus - 1,
                if l.nohz_full { ", without its tick" } else { "" }
            );
        }
        if let Some(n) = self.backlog {
            return format!(
                "saturated: every server served backlogs of {n} connections, queued while it was stopped"
            );
        }
        if self.regime == Regime::Saturated && !self.alone.is_empty() {
            let each: Vec<String> = self
                .alone
                .iter()
                .map(|a| {
                    format!(
                        "{} us per {} us ({:.1}%)",
                        a.quota_us,
                        a.period_us,
                        a.share() * 100.0
                    )
                })
                .collect();
            return format!(
                "saturated: each arm alone rationed so that it drives its part of the generator's target, as in a duet: {}{}",
                each.join(", "),
                self.generator_capacity_cps
                    .map(|g| format!("; generator capacity about {g:.0} conn/s"))
                    .unwrap_or_default()
            );
        }
        match (self.regime, self.allotment) {
            (Regime::Saturated, Some(a)) => format!(
                "saturated: every arm rationed to {} us per {} us ({:.1}% of the SUT core){}",
                a.quota_us,
                a.period_us,
                a.share() * 100.0,
                self.generator_capacity_cps
                    .map(|g| format!(", generator capacity about {g:.0} conn/s"))
                    .unwrap_or_default()
            ),
            _ => "idle: servers not rationed; they sleep between arrivals when the generator is the limit".into(),
        }
    }
}
