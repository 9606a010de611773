//! An epoch's servers: started afresh in a rotated order, and watched, so
//! the generator's clients go only to those alive.

use anyhow::Result;

use crate::bench::host::trial::{failed_start, Measurement, TrialSettings};
use crate::bench::load::gate::GateConfig;
use crate::bench::meters::meter::{MeterPlan, MeterReading};
use crate::bench::samples::Dropped;
use crate::bench::servers::arm::Arm;
use crate::bench::servers::cgroup::RationGroup;
use crate::bench::servers::launch::RunningServer;
use crate::bench::servers::port::free_port;

/// One arm's server during an epoch.
pub(super) struct Live {
    pub server: Option<RunningServer>,
    pub start_error: Option<String>,
}

impl Live {
    pub fn read(&mut self) -> Result<Option<MeterReading>> {
        match &mut self.server {
            Some(s) => Ok(Some(s.read()?)),
            None => Ok(None),
        }
    }
}

/// The order an epoch starts its arms in: rotated by epoch, so no arm
/// always starts first.
fn start_order(arms: usize, epoch: usize) -> impl Iterator<Item = usize> {
    (0..arms).map(move |k| (k + epoch) % arms)
}

/// Starts every arm not `dropped`; one that cannot start keeps why. A
/// dropped arm still gets a port, so the generator's targets stay indexed
/// by arm.
pub(super) fn start_arms(
    arms: &[Arm],
    dropped: &[Option<Dropped>],
    epoch: usize,
    plan: &MeterPlan,
    group: Option<&RationGroup>,
) -> Result<(Vec<Live>, Vec<u16>)> {
    let n = arms.len();
    let mut lives: Vec<Live> = (0..n)
        .map(|_| Live {
            server: None,
            start_error: None,
        })
        .collect();
    let mut ports = vec![0u16; n];
    for i in start_order(n, epoch) {
        ports[i] = free_port()?;
        if dropped[i].is_some() {
            continue;
        }
        match RunningServer::start(&arms[i].command, ports[i], plan, group) {
            Ok(r) => lives[i].server = Some(r),
            Err(e) => lives[i].start_error = Some(format!("{e:#}")),
        }
    }
    Ok((lives, ports))
}

/// Waits for every started server to listen; one that does not is stopped
/// and keeps why.
pub(super) fn await_listening(lives: &mut [Live], s: &TrialSettings) -> Result<()> {
    for live in lives.iter_mut() {
        if let Some(server) = &mut live.server {
            if let Err(e) = server.wait_listening(s.ready_timeout) {
                live.start_error = Some(format!("{e:#}"));
                server.stop(s.stop_grace)?;
                live.server = None;
            }
        }
    }
    Ok(())
}

pub(super) fn started(lives: &[Live]) -> Vec<bool> {
    lives.iter().map(|l| l.server.is_some()).collect()
}

/// The arms that take the load in turn: those whose server listened.
pub(super) fn live_arms(started: &[bool]) -> Vec<usize> {
    (0..started.len()).filter(|&i| started[i]).collect()
}

/// Which arms the generator's clients go to: a server that never started
/// or has exited would have them spin on refused connections, so they
/// serve the living arms instead.
pub(super) fn takes_clients(started: &[bool], alive: &[bool]) -> Vec<bool> {
    started.iter().zip(alive).map(|(&s, &a)| s && a).collect()
}

/// Marks dead every arm whose server was alive and is no longer (`now`:
/// None for an arm with no server). True if one died just now: its
/// clients are to be dealt again.
pub(super) fn note_deaths(alive: &mut [bool], now: &[Option<bool>]) -> bool {
    let mut died = false;
    for (a, now) in alive.iter_mut().zip(now) {
        if let Some(now) = *now {
            died |= *a && !now;
            *a &= now;
        }
    }
    died
}

/// The sample of an arm with nothing measured in a window: the verdict
/// that dropped it, or why its server did not start.
pub(super) fn unmeasured(
    dropped: Option<&Dropped>,
    live: &Live,
    rules: &GateConfig,
) -> Measurement {
    if let Some(d) = dropped {
        return d.measurement();
    }
    let why = live.start_error.as_deref();
    failed_start(why.unwrap_or("the server did not start").into(), rules)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::load::gate::GateResult;
    use crate::bench::samples::Stage;

    #[test]
    fn each_epoch_starts_every_arm_once_from_the_next_arm_on() {
        assert_eq!(start_order(3, 0).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(start_order(3, 1).collect::<Vec<_>>(), vec![1, 2, 0]);
        assert_eq!(start_order(3, 5).collect::<Vec<_>>(), vec![2, 0, 1]);
    }

    #[test]
    fn clients_go_only_to_started_servers_still_alive() {
        let started = [true, false, true, true];
        assert_eq!(live_arms(&started), vec![0, 2, 3]);
        let alive = [true, true, false, true];
        assert_eq!(
            takes_clients(&started, &alive),
            vec![true, false, false, true]
        );
    }

    #[test]
    fn an_arm_dies_once_and_only_a_new_death_deals_clients_again() {
        let mut alive = [true, true, true];
        assert!(!note_deaths(&mut alive, &[Some(true), None, Some(true)]));
        assert!(note_deaths(&mut alive, &[Some(true), None, Some(false)]));
        assert_eq!(alive, [true, true, false]);
        // Dead already: not news, and a server never comes back.
        assert!(!note_deaths(&mut alive, &[Some(true), None, Some(true)]));
        assert_eq!(alive, [true, true, false]);
    }

    #[test]
    fn an_arm_with_no_sample_carries_its_drop_verdict_or_why_it_did_not_start() {
        let rules = GateConfig::default();
        let mut live = Live {
            server: None,
            start_error: Some("bind: address in use".into()),
        };
        let m = unmeasured(None, &live, &rules);
        assert!(!m.gate.passed);
        assert_eq!(m.gate.detail, vec!["bind: address in use".to_string()]);
        live.start_error = None;
        let m = unmeasured(None, &live, &rules);
        assert_eq!(m.gate.detail, vec!["the server did not start".to_string()]);
        let dropped = Dropped {
            stage: Stage::Screen,
            gate: GateResult::default(),
        };
        let m = unmeasured(Some(&dropped), &live, &rules);
        assert!(m.gate.detail[0].starts_with("dropped alone"), "{m:?}");
    }
}
