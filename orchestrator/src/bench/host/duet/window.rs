//! One window of a duet: the counters it is measured between, what every
//! arm's sample of it shares, and the gate evidence each arm gathers over
//! its epoch, which the drain completes.

use std::time::{Duration, Instant};

use crate::bench::host::trial::{unaccounted, Latency, Measurement, TrialSettings};
use crate::bench::load::contract::Failure;
use crate::bench::load::gate::GateConfig;
use crate::bench::load::gate::{self, GateEvidence};
use crate::bench::load::loadgen::{LoadSnapshot, LoadTotals};
use crate::bench::meters::meter::MeterReading;

/// Every counter a window is measured between, read at one boundary.
pub(super) struct Mark {
    pub meters: Vec<Option<MeterReading>>,
    pub load: Vec<LoadSnapshot>,
    pub cpu: Duration,
    /// The core's idle time, with the instant it covers up to.
    pub idle: (Instant, Option<u64>),
    pub ballast_ns: u64,
}

/// An arm's meter over a window: only an arm read at both of its ends has
/// a sample in it.
pub(super) fn window_meter(
    from: &Option<MeterReading>,
    to: &Option<MeterReading>,
) -> Option<MeterReading> {
    Some(to.as_ref()?.delta(from.as_ref()?))
}

/// The SUT core's time the arms' counters saw over a window.
fn on_sut_ns(from: &[Option<MeterReading>], to: &[Option<MeterReading>]) -> u64 {
    from.iter()
        .zip(to)
        .filter_map(|(a, b)| window_meter(a, b))
        .map(|d| d.on_sut_ns())
        .sum()
}

/// An arm's gate evidence for the window from `start` to `end`: the fate
/// of its connections since `gate_from` (the epoch's start for window 0,
/// so warm-up failures count), and those completed in the window alone.
pub(super) fn window_evidence(
    gate_from: &LoadSnapshot,
    start: &LoadSnapshot,
    end: &LoadSnapshot,
    alive: bool,
    meter: &MeterReading,
    held: u64,
) -> GateEvidence {
    let spanned = end.delta(gate_from);
    GateEvidence {
        attempts: spanned.attempts,
        completed: spanned.completed,
        failures: spanned.failures,
        window_completed: end.completed - start.completed,
        alive,
        off_core_ns: meter.off_core_ns,
        held_connections: held,
        ..Default::default()
    }
}

/// What every arm's measurement of one window shares.
pub(super) struct Window {
    elapsed: Duration,
    generator_cpu_s: f64,
    live_arms: usize,
    /// Every arm held its share of the clients all the window.
    shared: bool,
    sut_unaccounted: Option<f64>,
}

impl Window {
    pub fn between(
        from: &Mark,
        to: &Mark,
        elapsed: Duration,
        live_arms: usize,
        shared: bool,
    ) -> Self {
        let idle_us = to.idle.1.zip(from.idle.1).map(|(b, a)| b.saturating_sub(a));
        let on_sut =
            on_sut_ns(&from.meters, &to.meters) + to.ballast_ns.saturating_sub(from.ballast_ns);
        Window {
            elapsed,
            generator_cpu_s: (to.cpu - from.cpu).as_secs_f64(),
            live_arms,
            shared,
            sut_unaccounted: unaccounted(to.idle.0 - from.idle.0, idle_us, on_sut),
        }
    }

    pub fn measurement(
        &self,
        meter: MeterReading,
        e: &GateEvidence,
        s: &TrialSettings,
    ) -> Measurement {
        let gate = gate::check(e, &s.gate);
        let done = e.window_completed;
        let per_conn = |x: u64| (done > 0).then(|| x as f64 / done as f64);
        let window_s = self.elapsed.as_secs_f64();
        // In slices, each arm held the load for its share of the window;
        // shared, every arm held its share of the clients all the window.
        let active_s = if self.shared {
            window_s
        } else {
            window_s / self.live_arms.max(1) as f64
        };
        let load_cores = s.load_cores.len().max(1) as f64;
        Measurement {
            cost_per_connection: if gate.passed {
                per_conn(meter.primary)
            } else {
                None
            },
            gate,
            window_completed: done,
            window_s,
            throughput_cps: done as f64 / active_s,
            syscalls_per_connection: meter.syscalls.and_then(per_conn),
            context_switches_per_connection: per_conn(meter.context_switches),
            sut_busy: meter.task_clock_ns as f64 / (active_s * 1e9),
            generator_busy: Some(self.generator_cpu_s / window_s / load_cores),
            sut_unaccounted: self.sut_unaccounted,
            meter_delta: meter,
            slice_costs: vec![],
            ..Default::default()
        }
        .with_saturation(&meter, self.elapsed, s)
    }
}

/// What an epoch's windows have measured so far, by arm.
pub(super) struct Tally {
    pub trials: Vec<Vec<Measurement>>,
    /// Each arm's evidence in its latest window, which the drain adds to.
    pub evidence: Vec<GateEvidence>,
    pub orders: Vec<Vec<usize>>,
    /// Where each arm's next window's gate counts from.
    pub gate_from: Vec<LoadSnapshot>,
}

impl Tally {
    pub fn new(arms: usize, windows: usize) -> Self {
        Tally {
            trials: vec![Vec::with_capacity(windows); arms],
            evidence: vec![GateEvidence::default(); arms],
            orders: Vec::with_capacity(windows),
            gate_from: vec![LoadSnapshot::default(); arms],
        }
    }

    /// Adds arm `i`'s drain `t` to its last window and judges that again
    /// (a client still stuck at the deadline timed out); every window of
    /// the epoch gets the epoch's latency.
    pub fn close(&mut self, i: usize, t: &LoadTotals, alive: bool, rules: &GateConfig) {
        let drained = t.snapshot.delta(&self.gate_from[i]);
        let e = &mut self.evidence[i];
        e.attempts += drained.attempts;
        e.completed += drained.completed;
        for (f, d) in e.failures.iter_mut().zip(drained.failures) {
            *f += d;
        }
        e.failures[Failure::Timeout.index()] += t.stuck_clients as u64;
        e.alive = alive;
        let last = self.trials[i].last_mut().expect("at least one window");
        last.gate = gate::check(e, rules);
        if !last.gate.passed {
            last.cost_per_connection = None;
        }
        let latency = Latency::of(&t.latency_us);
        for m in self.trials[i].iter_mut() {
            m.latency_us = Some(latency);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(task_clock_ns: u64, off_core_ns: u64) -> Option<MeterReading> {
        Some(MeterReading {
            primary: task_clock_ns,
            task_clock_ns,
            off_core_ns,
            off_core_max_ns: off_core_ns,
            ..Default::default()
        })
    }

    fn load(attempts: u64, completed: u64, resets: u64) -> LoadSnapshot {
        let mut s = LoadSnapshot {
            attempts,
            completed,
            ..Default::default()
        };
        s.failures[Failure::Reset.index()] = resets;
        s
    }

    #[test]
    fn only_an_arm_read_at_both_ends_has_a_sample_and_counts_on_the_core() {
        assert!(window_meter(&None, &reading(5, 0)).is_none());
        assert!(window_meter(&reading(5, 0), &None).is_none());
        let d = window_meter(&reading(100, 10), &reading(400, 30)).unwrap();
        assert_eq!((d.task_clock_ns, d.off_core_ns), (300, 20));
        let from = [reading(100, 10), None, reading(0, 0)];
        let to = [reading(400, 30), reading(9_000, 0), reading(50, 0)];
        assert_eq!(on_sut_ns(&from, &to), 280 + 50);
    }

    #[test]
    fn window_zero_judges_the_warm_up_and_counts_only_its_own_completions() {
        let (epoch_start, start, end) = (load(0, 0, 0), load(120, 100, 2), load(420, 398, 3));
        let meter = reading(1_000, 7).unwrap();
        let e = window_evidence(&epoch_start, &start, &end, true, &meter, 4);
        assert_eq!((e.attempts, e.completed), (420, 398));
        assert_eq!(e.failures[Failure::Reset.index()], 3);
        assert_eq!(e.window_completed, 298);
        assert_eq!((e.off_core_ns, e.held_connections), (7, 4));
        // A later window's gate counts from its own start.
        let e = window_evidence(&start, &start, &end, false, &meter, 0);
        assert_eq!((e.attempts, e.window_completed), (300, 298));
        assert!(!e.alive);
    }

    #[test]
    fn the_drain_is_judged_with_the_last_window_and_latency_is_the_epochs() {
        let rules = GateConfig {
            min_completed: 10,
            ..Default::default()
        };
        let mut tally = Tally::new(1, 2);
        tally.gate_from = vec![load(200, 200, 0)];
        tally.evidence[0] = window_evidence(
            &load(100, 100, 0),
            &load(100, 100, 0),
            &load(200, 200, 0),
            true,
            &MeterReading::default(),
            0,
        );
        let scored = Measurement {
            cost_per_connection: Some(7.0),
            ..Default::default()
        };
        tally.trials[0] = vec![scored.clone(), scored];
        let mut latency_us = hdrhistogram::Histogram::new(3).unwrap();
        latency_us.record(80).unwrap();
        // Clean drain: the last window still passes.
        let t = LoadTotals {
            snapshot: load(230, 230, 0),
            latency_us,
            stuck_clients: 0,
        };
        tally.close(0, &t, true, &rules);
        let last = &tally.trials[0][1];
        assert!(last.gate.passed, "{:?}", last.gate);
        assert_eq!(last.gate.attempts, 130);
        assert_eq!(last.cost_per_connection, Some(7.0));
        assert!(tally.trials[0]
            .iter()
            .all(|m| m.latency_us.is_some_and(|l| l.p50 == 80.0)));
        // A stuck client in the drain fails the last window, not the first.
        tally.evidence[0].attempts = 100;
        tally.evidence[0].completed = 100;
        let t = LoadTotals {
            stuck_clients: 1,
            ..t
        };
        tally.close(0, &t, true, &rules);
        let last = &tally.trials[0][1];
        assert!(!last.gate.passed);
        assert_eq!(last.gate.reasons[&gate::GateReason::Timeout], 1);
        assert_eq!(last.cost_per_connection, None);
        assert_eq!(tally.trials[0][0].cost_per_connection, Some(7.0));
    }

    #[test]
    fn a_window_shares_its_clocks_and_unaccounted_core_time_among_arms() {
        let t0 = Instant::now();
        let mark = |at: Duration, cpu_ms: u64, idle_us: u64, meters| Mark {
            meters,
            load: vec![],
            cpu: Duration::from_millis(cpu_ms),
            idle: (t0 + at, Some(idle_us)),
            ballast_ns: 0,
        };
        // A 1 s window, 400 ms idle: 600 ms busy, 450 ms of it in the arm.
        let from = mark(Duration::ZERO, 100, 1_000, vec![reading(0, 0)]);
        let to = mark(
            Duration::from_secs(1),
            350,
            401_000,
            vec![reading(450_000_000, 0)],
        );
        let w = Window::between(&from, &to, Duration::from_secs(1), 2, false);
        assert!((w.generator_cpu_s - 0.25).abs() < 1e-9);
        assert!((w.sut_unaccounted.unwrap() - 0.25).abs() < 1e-9);
        let s = TrialSettings::defaults(vec![0]);
        let e = GateEvidence {
            window_completed: 2_000,
            alive: true,
            ..Default::default()
        };
        let m = w.measurement(MeterReading::default(), &e, &s);
        // Two arms in slices: each held the load half the window.
        assert_eq!(m.throughput_cps, 4_000.0);
    }
}
