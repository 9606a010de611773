//! The saturated regime: the referee measures what a busy server costs.
//!
//! One generator core cannot keep a server's core busy here: left alone, the
//! server sleeps between arrivals and much of what is measured is the cost
//! of sleeping and waking (0.73 context switches per connection for the
//! vanilla treatment, about twice its busy cost), which moves with how the
//! load arrives rather than with the code. So every server under test is
//! rationed with CPU bandwidth control (v1 `cpu.cfs_quota_us`, or cgroup2
//! `cpu.max`; see [`crate::bench::servers::cgroup`]): a quota per period well under
//! its demand, so a backlog builds while it is throttled and it always has
//! work while it runs.
//!
//! The allotment is sized from a short probe ([`crate::bench::host::probe`]) of
//! every arm at once: each arm's cost per connection and the generator's
//! capacity give the share at which the generator keeps headroom, and the
//! connections in flight per arm bound the quota, so the backlog a throttled
//! server builds outlasts its next quota. Every window then checks what was
//! assumed: the share of its allotment each arm used ([`Saturation`]).

use serde::{Deserialize, Serialize};
use std::time::Duration;

use crate::check::range;

/// CPU bandwidth for one cgroup: at most `quota_us` of CPU time in every
/// `period_us` ([`crate::bench::host::ration`] sizes it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allotment {
    pub quota_us: u64,
    pub period_us: u64,
}

impl Allotment {
    /// The share of one CPU it allows.
    pub fn share(&self) -> f64 {
        self.quota_us as f64 / self.period_us.max(1) as f64
    }
}

/// Bandwidth-control periods a cgroup has seen, and how many of them it
/// spent its whole quota in (it had work until the quota ran out).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Throttling {
    pub periods: u64,
    pub throttled: u64,
}

impl Throttling {
    pub fn delta(&self, earlier: &Throttling) -> Throttling {
        Throttling {
            periods: self.periods.saturating_sub(earlier.periods),
            throttled: self.throttled.saturating_sub(earlier.throttled),
        }
    }
}

/// The kernel refuses a quota under 1 ms.
pub const MIN_QUOTA_US: u64 = 1000;
/// Longer bursts are closer to a server that never stops; beyond a few ms a
/// one-second window holds too few periods to split evenly.
pub const MAX_QUOTA_US: u64 = 3000;
/// The kernel refuses a period over 1 s.
const MAX_PERIOD_US: u64 = 1_000_000;
/// The probe's own allotment: small enough that any server it has met is
/// throttled with a backlog, so its costs are already the busy ones.
pub const PROBE: Allotment = Allotment {
    quota_us: 1000,
    period_us: 20_000,
};

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

/// The allotment for arms of busy costs `costs_ns` (per connection, in ns
/// of CPU) under a generator that drives `capacity_cps` connections per
/// second at full load, with `in_flight` connections per arm, and why it
/// cannot saturate where it cannot.
///
/// Every arm gets the same share f: the arms together then complete
/// f * sum(1/c) connections per second, which is held to `target` of the
/// generator's capacity, and to 90% of the core. The quota is as long as
/// the backlog allows: a throttled arm holds at most `in_flight`
/// connections, worth in_flight * c of its CPU, and the quota is sized so
/// that the backlog outlasts it twice over. Where the kernel's minimum
/// quota is longer than that margin allows, the arm still has work as long
/// as its whole backlog outlasts the quota (the peer server, 256 connections
/// at 7 us, half a backlog of 0.9 ms: 0.024 context switches per
/// connection, measured); only a backlog shorter than the quota drains.
pub fn size(
    costs_ns: &[f64],
    capacity_cps: f64,
    in_flight: f64,
    target: f64,
) -> (Allotment, Option<String>) {
    let arms = costs_ns.len().max(1) as f64;
    let rate_per_share: f64 = costs_ns.iter().map(|c| 1e9 / c.max(1.0)).sum();
    let share = (target * capacity_cps / rate_per_share.max(1e-9))
        .min(0.9 / arms)
        .max(1e-4);
    let cheapest = costs_ns.iter().copied().fold(f64::INFINITY, f64::min);
    let backlog_us = in_flight * cheapest / 1e3;
    let quota_us = ((backlog_us / 2.0) as u64).clamp(MIN_QUOTA_US, MAX_QUOTA_US);
    let period_us = ((quota_us as f64 / share) as u64).clamp(quota_us, MAX_PERIOD_US);
    let quota_us = quota_us.min(period_us);
    let mut warning = None;
    if backlog_us < MIN_QUOTA_US as f64 {
        warning = Some(format!(
            "{in_flight:.0} connections in flight per arm at {cheapest:.0} ns each hold a backlog \
             of {backlog_us:.0} us, under the kernel's 1 ms minimum quota: the cheapest arm will \
             drain it and sleep; raise load.connections"
        ));
    }
    (
        Allotment {
            quota_us,
            period_us,
        },
        warning,
    )
}

/// `a`'s quota at a period that gives `share` of the core.
pub fn with_share(a: Allotment, share: f64) -> Allotment {
    let period_us = ((a.quota_us as f64 / share.max(1e-4)) as u64).clamp(a.quota_us, MAX_PERIOD_US);
    Allotment {
        quota_us: a.quota_us,
        period_us,
    }
}

/// What a window says about an arm's saturation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Saturation {
    /// Its CPU time on the SUT core over what its allotment allowed.
    pub allotment_used: Option<f64>,
    /// The share of bandwidth periods in which it spent its whole quota.
    pub throttled_share: Option<f64>,
    /// Whether it had work all the window (None in the idle regime).
    pub saturated: Option<bool>,
}

/// What a window metered of one arm, for [`saturation`].
pub struct WindowUse {
    pub on_sut_ns: u64,
    pub context_switches_per_connection: Option<f64>,
    /// Its group's bandwidth periods.
    pub throttling: Option<Throttling>,
    pub elapsed: Duration,
}

/// The saturation of an arm that used `w` with `allotment` (None: the idle
/// regime, where nothing is claimed).
pub fn saturation(w: &WindowUse, allotment: Option<Allotment>, c: &SaturationConfig) -> Saturation {
    let Some(a) = allotment else {
        return Saturation::default();
    };
    let allowed = a.share() * w.elapsed.as_nanos() as f64;
    let used = (allowed > 0.0).then(|| w.on_sut_ns as f64 / allowed);
    let slept = w
        .context_switches_per_connection
        .is_some_and(|cs| cs > c.max_context_switches);
    let throttled_share = w
        .throttling
        .filter(|t| t.periods > 0)
        .map(|t| t.throttled as f64 / t.periods as f64);
    let starved = throttled_share.is_some_and(|t| t < c.min_throttled_share);
    Saturation {
        allotment_used: used,
        throttled_share,
        saturated: used.map(|u| u >= c.min_allotment_used && !slept && !starved),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_keeps_the_generator_at_its_target() {
        // Three arms of 20, 14 and 40 us; a generator of 19k conn/s.
        let costs = [20_000.0, 14_000.0, 40_000.0];
        let (a, w) = size(&costs, 19_000.0, 170.0, 0.65);
        assert_eq!(w, None);
        let rate: f64 = costs.iter().map(|c| a.share() * 1e9 / c).sum();
        assert!((rate / 19_000.0 - 0.65).abs() < 0.02, "{a:?} {rate}");
        // Half of 170 connections at 14 us is 1.19 ms of backlog.
        assert_eq!(a.quota_us, 1190);
    }

    #[test]
    fn a_generator_that_could_fill_the_core_leaves_it_unrationed_but_shared() {
        let (a, _) = size(&[10_000.0, 10_000.0], 1e7, 1024.0, 0.65);
        assert!((a.share() - 0.45).abs() < 0.01, "{a:?}");
        assert_eq!(a.quota_us, MAX_QUOTA_US);
    }

    #[test]
    fn a_share_is_set_by_the_period() {
        let a = with_share(
            Allotment {
                quota_us: 2000,
                period_us: 500_000,
            },
            0.1,
        );
        assert_eq!(a.period_us, 20_000);
        assert!((a.share() - 0.1).abs() < 1e-9);
    }

    #[test]
    fn too_few_connections_in_flight_are_said_to_drain() {
        let (a, w) = size(&[12_000.0], 19_000.0, 32.0, 0.65);
        assert_eq!(a.quota_us, MIN_QUOTA_US);
        assert!(w.unwrap().contains("backlog of 384 us"));
        // Half a backlog under the minimum quota, the whole of it over:
        // the arm still has work when its quota starts, so no warning.
        let (a, w) = size(&[7_000.0], 19_000.0, 256.0, 0.65);
        assert_eq!(a.quota_us, MIN_QUOTA_US);
        assert_eq!(w, None);
    }

    #[test]
    fn an_arm_that_used_its_allotment_was_saturated_and_one_that_idled_was_not() {
        let a = Some(Allotment {
            quota_us: 1000,
            period_us: 10_000,
        });
        let c = SaturationConfig::default();
        let floor = c.min_allotment_used;
        let busy = WindowUse {
            on_sut_ns: 95_000_000,
            context_switches_per_connection: Some(0.02),
            throttling: Some(Throttling {
                periods: 100,
                throttled: 97,
            }),
            elapsed: Duration::from_secs(1),
        };
        let s = saturation(&busy, a, &c);
        assert_eq!(s.saturated, Some(true));
        assert!((s.allotment_used.unwrap() - 0.95).abs() < 1e-9);
        assert!((s.throttled_share.unwrap() - 0.97).abs() < 1e-9);
        let idle = WindowUse {
            on_sut_ns: (floor * 0.9 * 1e8) as u64,
            ..busy
        };
        assert_eq!(saturation(&idle, a, &c).saturated, Some(false));
        assert_eq!(saturation(&idle, None, &c), Saturation::default());
        // Caught up on its allotment, but by sleeping and waking.
        let napping = WindowUse {
            context_switches_per_connection: Some(1.3),
            ..busy
        };
        assert_eq!(saturation(&napping, a, &c).saturated, Some(false));
    }

    #[test]
    fn where_asked_an_arm_that_ran_out_of_quota_in_few_periods_was_not_saturated() {
        let a = Some(Allotment {
            quota_us: 2000,
            period_us: 40_000,
        });
        // Used nearly all its allotment over the window, yet spent the whole
        // quota in 15% of the periods: it idled between bursts.
        let bursty = WindowUse {
            on_sut_ns: 48_500_000,
            context_switches_per_connection: Some(0.2),
            throttling: Some(Throttling {
                periods: 20,
                throttled: 3,
            }),
            elapsed: Duration::from_secs(1),
        };
        let host = SaturationConfig::default();
        assert_eq!(saturation(&bursty, a, &host).saturated, Some(true));
        let guest = SaturationConfig {
            min_throttled_share: 0.9,
            ..host
        };
        assert_eq!(saturation(&bursty, a, &guest).saturated, Some(false));
        let busy = WindowUse {
            throttling: Some(Throttling {
                periods: 20,
                throttled: 20,
            }),
            ..bursty
        };
        assert_eq!(saturation(&busy, a, &guest).saturated, Some(true));
    }
}
