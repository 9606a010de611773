//! The meter: CPU counters on the server process, user and kernel, over every
//! thread and child it ever has. Counters are opened on the child after fork
//! and before exec with `inherit`, so threads the Go runtime starts at once are
//! covered too (see [`crate::bench::servers::launch`]).
//!
//! The primary event is hardware instructions where a PMU exists; elsewhere
//! (VMs without a PMU) instructions counted in an emulated guest where one is
//! set up, else software task-clock in nanoseconds. The unit is
//! carried with every number, so a figure is never printed in a unit it was not
//! measured in.

use anyhow::{bail, Context, Result};
use perf_event::events::{Hardware, Software, Tracepoint};
use perf_event::{Builder, Counter};
use serde::{Deserialize, Serialize};

use std::sync::Arc;

use crate::bench::meters::emulator::{Emulator, EmulatorConfig};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MeterEvent {
    Instructions,
    TaskClock,
}

impl MeterEvent {
    pub fn name(self) -> &'static str {
        match self {
            MeterEvent::Instructions => "instructions",
            MeterEvent::TaskClock => "task-clock",
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            MeterEvent::Instructions => "instructions",
            MeterEvent::TaskClock => "ns",
        }
    }
}

/// `[meter]` in harness.toml: which event to count (see [`MeterPlan::detect`]).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum MeterChoice {
    Auto,
    Instructions,
    Emulated,
    TaskClock,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MeterConfig {
    pub event: MeterChoice,
    /// How far one pair's task-clock ratio moves between measurements
    /// minutes apart on this machine, as a standard deviation of its log:
    /// spread that more windows in one measurement never shrink (the VM's
    /// speed, the host's neighbours), so every task-clock interval adds it.
    /// Measured with `benchmarks/drift.sh` and `benchmarks/coverage.py`
    /// (docs/referee.md); 0 leaves the intervals to the windows alone.
    pub task_clock_drift: f64,
}

impl Default for MeterConfig {
    fn default() -> Self {
        Self {
            event: MeterChoice::Auto,
            task_clock_drift: DEFAULT_TASK_CLOCK_DRIFT,
        }
    }
}

/// [`MeterConfig::task_clock_drift`] as measured on the project's 2-vCPU
/// VM: 12 compares of one pair over 86 minutes spread 3.3% (sd of their log
/// medians; benchmarks/runs/drift-20261205T163630Z and
/// drift-20261205T175205Z), rounded up.
pub const DEFAULT_TASK_CLOCK_DRIFT: f64 = 0.035;

impl MeterConfig {
    pub fn validate(&self) -> Result<()> {
        crate::check::range("meter.task_clock_drift", self.task_clock_drift, 0.0, 0.5)
    }

    /// The between-measurement spread to add to intervals of `source`:
    /// the software clock's, or none (instruction counts do not move with
    /// the machine's speed; the emulated meter's A/A medians spread 0.16%,
    /// well inside their intervals).
    pub fn drift_of(&self, source: MeterSource) -> f64 {
        match source {
            MeterSource::Os => self.task_clock_drift,
            MeterSource::Pmu | MeterSource::Emulated => 0.0,
        }
    }
}

/// Where the primary count comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MeterSource {
    /// The host's hardware counters.
    Pmu,
    /// The meter plugin of an emulated guest (see [`crate::bench::emulated`]).
    Emulated,
    /// The operating system's software clock.
    Os,
}

impl MeterSource {
    pub fn name(self) -> &'static str {
        match self {
            MeterSource::Pmu => "pmu",
            MeterSource::Emulated => "emulated",
            MeterSource::Os => "os",
        }
    }
}

/// What the meter will count on this machine, decided once per command.
#[derive(Clone, Debug)]
pub struct MeterPlan {
    pub event: MeterEvent,
    pub source: MeterSource,
    /// Why the event was chosen (shown by `doctor` and recorded in results).
    pub reason: String,
    /// `raw_syscalls:sys_enter` tracepoint id, when tracefs is available.
    pub syscalls_tracepoint: Option<u64>,
    pub sut_core: usize,
    pub cores: usize,
    /// The emulator, when the source is emulated.
    pub emulator: Option<Arc<Emulator>>,
    /// The between-measurement spread its intervals add (see
    /// [`MeterConfig::drift_of`]).
    pub drift: f64,
}

impl MeterPlan {
    pub fn detect(
        choice: MeterChoice,
        emulator: &EmulatorConfig,
        sut_core: usize,
        cores: usize,
    ) -> Result<Self> {
        let plan = |event, source, reason: String, emulator: Option<Emulator>| Self {
            event,
            source,
            reason,
            syscalls_tracepoint: syscalls_tracepoint_id(),
            sut_core,
            cores,
            emulator: emulator.map(Arc::new),
            drift: 0.0,
        };
        let emulated = |e: Emulator, why: &str| {
            let reason = format!(
                "{why}: instructions counted in an emulated guest ({})",
                e.describe()
            );
            plan(
                MeterEvent::Instructions,
                MeterSource::Emulated,
                reason,
                Some(e),
            )
        };
        Ok(match choice {
            MeterChoice::TaskClock => plan(
                MeterEvent::TaskClock,
                MeterSource::Os,
                "forced by meter.event".into(),
                None,
            ),
            MeterChoice::Instructions => match probe_instructions() {
                Ok(()) => plan(MeterEvent::Instructions, MeterSource::Pmu, "hardware PMU present".into(), None),
                Err(e) => bail!(
                    "meter.event = \"instructions\" but hardware instruction counters cannot be opened ({e}); \
                     this machine has no usable PMU: use \"auto\", \"emulated\" or \"task-clock\""
                ),
            },
            MeterChoice::Emulated => {
                let e = Emulator::locate(emulator).context(
                    "meter.event = \"emulated\" but the emulated meter cannot be set up",
                )?;
                emulated(e, "forced by meter.event")
            }
            MeterChoice::Auto => match probe_instructions() {
                Ok(()) => plan(MeterEvent::Instructions, MeterSource::Pmu, "hardware PMU present".into(), None),
                Err(pmu) => match Emulator::locate(emulator) {
                    Ok(e) => emulated(e, &format!("no hardware PMU ({pmu})")),
                    Err(e) => plan(
                        MeterEvent::TaskClock,
                        MeterSource::Os,
                        format!(
                            "no hardware PMU ({pmu}) and no emulated meter ({e:#}); falling back to task-clock, unit ns"
                        ),
                        None,
                    ),
                },
            },
        })
    }

    /// The event the host's own counters count: where instructions come
    /// from an emulated guest, a trial on the host (a smoke run, a profile)
    /// counts task-clock, and its cost is never a score.
    pub fn host_event(&self) -> MeterEvent {
        match self.source {
            MeterSource::Emulated => MeterEvent::TaskClock,
            _ => self.event,
        }
    }
}

fn probe_instructions() -> std::io::Result<()> {
    Builder::new(Hardware::INSTRUCTIONS)
        .observe_self()
        .any_cpu()
        .include_kernel()
        .build()
        .map(drop)
}

const TRACEFS: &str = "/sys/kernel/tracing";

/// Finds the `raw_syscalls:sys_enter` tracepoint id, mounting tracefs first
/// when it is missing and we are allowed to.
pub fn syscalls_tracepoint_id() -> Option<u64> {
    let id_path = format!("{TRACEFS}/events/raw_syscalls/sys_enter/id");
    if !std::path::Path::new(&id_path).exists() {
        let _ = std::process::Command::new("mount")
            .args(["-t", "tracefs", "nodev", TRACEFS])
            .stderr(std::process::Stdio::null())
            .status();
    }
    std::fs::read_to_string(id_path).ok()?.trim().parse().ok()
}

/// One reading of every counter, taken back to back.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct MeterReading {
    pub primary: u64,
    pub task_clock_ns: u64,
    pub context_switches: u64,
    pub syscalls: Option<u64>,
    /// Task-clock the server's threads spent on any core but the SUT core:
    /// all of it minus what ran on the SUT core, so no CPU the kernel has
    /// (whatever `taskset` or a quota lets ratchet see) is left out. The
    /// least there can have been: the SUT counter is read after the total.
    pub off_core_ns: u64,
    /// The most off-core time there can have been at this reading, with the
    /// SUT counter read before the total: a server running between the
    /// reads puts the truth between the two. A delta subtracts this bound
    /// from the later reading's least, so a server busy on its core while
    /// it is read never shows off-core time it did not run.
    #[serde(skip)]
    pub off_core_max_ns: u64,
    /// CPU time of the server's cgroup (see [`crate::bench::servers::cgroup`]): the
    /// cross-check that nothing ran in it unmetered.
    #[serde(default)]
    pub cgroup_ns: Option<u64>,
    /// Bandwidth periods of a rationed server's cgroup: how often it spent
    /// its whole quota (see [`crate::bench::host::ration`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttling: Option<Throttling>,
}

impl MeterReading {
    /// Task-clock the server spent on the SUT core.
    pub fn on_sut_ns(&self) -> u64 {
        self.task_clock_ns.saturating_sub(self.off_core_ns)
    }

    pub fn delta(&self, earlier: &MeterReading) -> MeterReading {
        MeterReading {
            primary: self.primary - earlier.primary,
            task_clock_ns: self.task_clock_ns - earlier.task_clock_ns,
            context_switches: self.context_switches - earlier.context_switches,
            syscalls: self.syscalls.zip(earlier.syscalls).map(|(a, b)| a - b),
            off_core_ns: self.off_core_ns.saturating_sub(earlier.off_core_max_ns),
            off_core_max_ns: self.off_core_max_ns.saturating_sub(earlier.off_core_ns),
            cgroup_ns: self
                .cgroup_ns
                .zip(earlier.cgroup_ns)
                .map(|(a, b)| a.saturating_sub(b)),
            throttling: self
                .throttling
                .zip(earlier.throttling)
                .map(|(a, b)| a.delta(&b)),
        }
    }
}

/// The open counters of one server process.
pub struct ServerCounters {
    primary: Option<Counter>,
    task_clock: Counter,
    context_switches: Counter,
    syscalls: Option<Counter>,
    on_sut: Counter,
}

/// Every counter starts at the server's exec, all at the same instant.
/// Enabled as each was opened, they started microseconds apart while the
/// forked child still ran ratchet's pre-exec code, and an honest pinned
/// server showed 7-73 us of "off-core" time (all task-clock minus the SUT
/// cpu's) in 4 of 9 replays here, which failed its gate.
fn counting(builder: &mut Builder<'_>, pid: i32) -> std::io::Result<Counter> {
    builder
        .observe_pid(pid)
        .inherit(true)
        .include_kernel()
        .enabled(false)
        .enable_on_exec(true)
        .build()
}

impl ServerCounters {
    /// Opens every counter on `pid`, a child that has not exec'd yet (all
    /// threads, inherited by every thread and process it creates).
    pub fn open(plan: &MeterPlan, pid: i32) -> Result<Self> {
        let primary = match plan.host_event() {
            MeterEvent::Instructions => Some(
                counting(Builder::new(Hardware::INSTRUCTIONS).any_cpu(), pid)
                    .context("opening the instructions counter")?,
            ),
            MeterEvent::TaskClock => None,
        };
        let task_clock = counting(Builder::new(Software::TASK_CLOCK).any_cpu(), pid)
            .context("opening the task-clock counter")?;
        let context_switches = counting(Builder::new(Software::CONTEXT_SWITCHES).any_cpu(), pid)
            .context("opening the context-switches counter")?;
        let syscalls = plan
            .syscalls_tracepoint
            .and_then(|id| counting(Builder::new(Tracepoint::with_id(id)).any_cpu(), pid).ok());
        let on_sut = counting(
            Builder::new(Software::TASK_CLOCK).one_cpu(plan.sut_core),
            pid,
        )
        .with_context(|| {
            format!(
                "opening the task-clock counter on the SUT cpu {}",
                plan.sut_core
            )
        })?;
        Ok(Self {
            primary,
            task_clock,
            context_switches,
            syscalls,
            on_sut,
        })
    }

    pub fn task_clock_ns(&mut self) -> Result<u64> {
        Ok(self.task_clock.read()?)
    }

    pub fn read(&mut self) -> Result<MeterReading> {
        let sut_before = self.on_sut.read()?;
        let task_clock_ns = self.task_clock.read()?;
        let primary = match &mut self.primary {
            Some(c) => c.read()?,
            None => task_clock_ns,
        };
        let context_switches = self.context_switches.read()?;
        let syscalls = match &mut self.syscalls {
            Some(c) => Some(c.read()?),
            None => None,
        };
        let on_sut = self.on_sut.read()?;
        Ok(MeterReading {
            primary,
            task_clock_ns,
            context_switches,
            syscalls,
            off_core_ns: task_clock_ns.saturating_sub(on_sut),
            off_core_max_ns: task_clock_ns.saturating_sub(sut_before),
            cgroup_ns: None,
            throttling: None,
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    #[test]
    fn a_server_read_while_running_on_its_core_shows_no_off_core_delta() {
        // Read mid-run: 60 us ran on the SUT core between the two reads of
        // its counter, so anything from 0 to 60 us may be off-core.
        let a = MeterReading {
            task_clock_ns: 1_000_060,
            off_core_ns: 0,
            off_core_max_ns: 60,
            ..Default::default()
        };
        let idle = MeterReading {
            task_clock_ns: 2_000_000,
            off_core_ns: 60,
            off_core_max_ns: 60,
            ..Default::default()
        };
        assert_eq!(idle.delta(&a).off_core_ns, 0);
        let moved = MeterReading {
            off_core_ns: 100_060,
            off_core_max_ns: 100_060,
            ..idle
        };
        assert_eq!(moved.delta(&a).off_core_ns, 100_000);
    }

    /// A child that burns 50 ms of CPU between the counters' opening and its
    /// exec: none of it is the server's.
    #[test]
    fn counting_starts_at_exec_not_when_the_counters_open() {
        let plan = MeterPlan {
            event: MeterEvent::TaskClock,
            source: MeterSource::Os,
            emulator: None,
            reason: "test".into(),
            syscalls_tracepoint: None,
            sut_core: 0,
            cores: 1,
            drift: 0.0,
        };
        let mut fds = [0; 2];
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let [go_r, go_w] = fds;
        let prog = CString::new("/bin/sleep").unwrap();
        let arg = CString::new("0.05").unwrap();
        let argv = [prog.as_ptr(), arg.as_ptr(), std::ptr::null()];
        // SAFETY: the child only makes async-signal-safe calls before exec.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            unsafe {
                let mut b = 0u8;
                libc::read(go_r, &mut b as *mut u8 as *mut libc::c_void, 1);
                let mut t: libc::timespec = std::mem::zeroed();
                loop {
                    libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t);
                    if t.tv_sec > 0 || t.tv_nsec > 50_000_000 {
                        break;
                    }
                }
                libc::execv(prog.as_ptr(), argv.as_ptr());
                libc::_exit(127);
            }
        }
        let mut counters = ServerCounters::open(&plan, pid).unwrap();
        let mut status = 0;
        unsafe {
            libc::write(go_w, b"g".as_ptr() as *const libc::c_void, 1);
            libc::waitpid(pid, &mut status, 0);
            libc::close(go_r);
            libc::close(go_w);
        }
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        let counted = counters.read().unwrap().task_clock_ns;
        assert!(counted < 20_000_000, "{counted} ns counted before exec");
    }
}
