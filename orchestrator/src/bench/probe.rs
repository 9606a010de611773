//! The probe that sizes the saturated regime's allotment (see
//! [`crate::bench::ration`]): every arm at once, each rationed to the small
//! [`ration::PROBE`] allotment and holding its share of the clients, for a
//! fraction of a second. It reads each arm's busy cost per connection and
//! how busy the generator was for the connections it drove.

use anyhow::Result;
use std::time::{Duration, Instant};

use crate::bench::arm::Arm;
use crate::bench::ballast::Ballast;
use crate::bench::cgroup::{containment, RationGroup};
use crate::bench::launch::{free_port, RunningServer};
use crate::bench::loadgen::{LoadGen, EVERY_TARGET};
use crate::bench::meter::MeterPlan;
use crate::bench::ration::{self, Allotment, Regime, RegimeRecord};
use crate::bench::trial::{own_cpu, TrialSettings};
use crate::config::Schedule;
use crate::interrupt;

/// The regime `arms` will be measured in under `s`: the idle regime where
/// it is asked for or rationing cannot be set up (with the reason), else
/// the saturated regime with the allotment the probe sized.
pub fn regime(arms: &[Arm], plan: &MeterPlan, s: &TrialSettings) -> Result<RegimeRecord> {
    if s.saturation.regime == Regime::Idle {
        return Ok(RegimeRecord::idle(
            "idle regime chosen (saturation.regime = \"idle\")".into(),
        ));
    }
    if let Some(why) = containment().cannot_ration() {
        return Ok(RegimeRecord::idle(format!(
            "measured in the idle regime: {why}"
        )));
    }
    let group = RationGroup::create(ration::PROBE, arms.len())?;
    let _ballast = Ballast::start_if(s.saturation.ballast, plan.sut_core)?;
    let mut servers: Vec<Option<RunningServer>> = Vec::with_capacity(arms.len());
    let mut ports = Vec::with_capacity(arms.len());
    for arm in arms {
        let port = free_port()?;
        ports.push(port);
        let started = RunningServer::start(&arm.command, port, plan, Some(&group))
            .and_then(|mut r| r.wait_listening(s.ready_timeout).map(|_| r));
        servers.push(started.ok());
    }
    let load = LoadGen::start(s.load_spec(&ports))?;
    load.set_live(&servers.iter().map(Option::is_some).collect::<Vec<_>>());
    load.set_active(EVERY_TARGET);
    std::thread::sleep(Duration::from_millis(300));
    interrupt::check()?;
    let read = |servers: &mut Vec<Option<RunningServer>>| -> Vec<Option<u64>> {
        servers
            .iter_mut()
            .map(|r| Some(r.as_mut()?.read().ok()?.on_sut_ns()))
            .collect()
    };
    let (t0, cpu0, m0) = (Instant::now(), own_cpu(), read(&mut servers));
    let l0: Vec<u64> = (0..arms.len())
        .map(|i| load.snapshot(i).completed)
        .collect();
    std::thread::sleep(Duration::from_millis(s.saturation.probe_ms));
    let (m1, cpu1) = (read(&mut servers), own_cpu());
    let l1: Vec<u64> = (0..arms.len())
        .map(|i| load.snapshot(i).completed)
        .collect();
    let elapsed = t0.elapsed().as_secs_f64();
    load.finish();
    for server in servers.iter_mut().flatten() {
        server.stop(s.stop_grace)?;
    }
    interrupt::check()?;

    let done: Vec<u64> = l1.iter().zip(&l0).map(|(b, a)| b - a).collect();
    let costs: Vec<Option<f64>> = (0..arms.len())
        .map(|i| {
            let cpu = m1[i]? - m0[i]?;
            (done[i] > 0).then(|| cpu as f64 / done[i] as f64)
        })
        .collect();
    let total: u64 = done.iter().sum();
    let generator_busy = (cpu1 - cpu0).as_secs_f64() / elapsed / s.load_cores.len().max(1) as f64;
    let known: Vec<f64> = costs.iter().flatten().copied().collect();
    if known.is_empty() || total == 0 || generator_busy <= 0.0 {
        return Ok(RegimeRecord {
            regime: Regime::Saturated,
            allotment: Some(ration::PROBE),
            alone: Vec::new(),
            probe_costs: costs,
            generator_capacity_cps: None,
            warning: Some(
                "the probe served no connection: every arm keeps the probe's own allotment".into(),
            ),
        });
    }
    let capacity = total as f64 / elapsed / generator_busy;
    let window = match s.schedule {
        Schedule::Duet => s.duet.window,
        Schedule::Blocks => s.window,
    };
    let fit = |costs: &[f64]| fit(costs, capacity, window, s);
    let (allotment, warning) = fit(&known);
    // Alone, each arm gets the share at which it by itself keeps the
    // generator at its target, as the arms together do in a duet: an arm
    // measured beside an idler generator pays more to wake it (sending the
    // response wakes the client), so equal shares would make a costlier
    // arm's generator idler and its cost dearer still.
    let alone = match s.schedule {
        Schedule::Duet => Vec::new(),
        Schedule::Blocks => costs
            .iter()
            .map(|c| c.map_or(allotment, |c| fit(&[c]).0))
            .collect(),
    };
    Ok(RegimeRecord {
        regime: Regime::Saturated,
        allotment: Some(allotment),
        alone,
        probe_costs: costs,
        generator_capacity_cps: Some(capacity),
        warning,
    })
}

/// The allotment that keeps arms of busy costs `costs` (rationed alike, in
/// the same windows) saturated under a generator of `capacity` conn/s, and
/// gives the gate its connections per `window` from the costliest of them.
/// A probe whose connections stalled (a listen backlog overflowing into SYN
/// retransmits, seen with 1024 in flight) reads a tiny capacity; the share
/// is then raised to what the gate needs, and that is said.
fn fit(
    costs: &[f64],
    capacity: f64,
    window: Duration,
    s: &TrialSettings,
) -> (Allotment, Option<String>) {
    let (allotment, warning) = ration::size(
        costs,
        capacity,
        s.connections as f64,
        s.saturation.generator_target,
    );
    let costliest = costs.iter().copied().fold(0.0, f64::max);
    let needed = 1.5 * s.gate.min_completed as f64 * costliest / window.as_nanos() as f64;
    if allotment.share() >= needed {
        return (allotment, warning);
    }
    let raised = ration::with_share(allotment, needed.min(0.9 / costs.len().max(1) as f64));
    let why = format!(
        "the probe sized {:.2}% of the core per arm (generator capacity {capacity:.0} conn/s), too little for \
         gate.min_completed = {} from the costliest arm in a window; raised to {:.2}%: the generator may now be the limit",
        allotment.share() * 100.0,
        s.gate.min_completed,
        raised.share() * 100.0
    );
    (raised, Some(why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn alone_each_arm_gets_the_share_that_keeps_the_generator_at_its_target() {
        let s = TrialSettings::from_config(&Config::default(), vec![0]);
        let capacity = 30_000.0;
        let drives = |a: Allotment, cost: f64| a.share() * 1e9 / cost / capacity;
        for cost in [7_000.0, 20_000.0] {
            let (a, _) = fit(&[cost], capacity, s.window, &s);
            assert!((drives(a, cost) - 0.65).abs() < 0.01, "{cost}: {a:?}");
        }
        // Together, the same share for both: the pair drives the target.
        let (both, _) = fit(&[7_000.0, 20_000.0], capacity, s.window, &s);
        let pair = drives(both, 7_000.0) + drives(both, 20_000.0);
        assert!((pair - 0.65).abs() < 0.01, "{both:?}");
    }
}
