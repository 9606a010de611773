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

use std::time::Duration;

use crate::bench::meters::meter::Throttling;
use crate::bench::regime::SaturationConfig;
use crate::bench::servers::cgroup::Allotment;

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
