//! Inside the guest: `ratchet guest PLAN` measures the plan's arms with the
//! host's own trial, gate, load generator and saturation probe, executing a
//! marker at both ends of every measured window, and writes what it
//! measured to the guest's second serial port, which the host reads.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::bench::config::Schedule;
use crate::bench::emulated::batch::{self, BatchSettings};
use crate::bench::emulated::live::{self, LiveSettings};
use crate::bench::emulated::window;
use crate::bench::host::schedule::Trial;
use crate::bench::host::trial::{DuetSettings, TrialSettings};
use crate::bench::load::contract::Contract;
use crate::bench::load::gate::GateConfig;
use crate::bench::meters::emulator::WorkloadRegime;
use crate::bench::meters::marker;
use crate::bench::meters::meter::{MeterEvent, MeterPlan, MeterSource};
use crate::bench::regime::{RegimeRecord, SaturationConfig};
use crate::bench::samples::Samples;
use crate::bench::servers::arm::Arm;
use crate::bench::servers::launch::ServerCommand;

/// Where the guest's init puts the plan, and where ratchet is.
pub const PLAN_PATH: &str = "/plan.json";
pub const RATCHET_PATH: &str = "/ratchet";
/// The guest's second serial port: the channel to the host.
pub const CHANNEL: &str = "/dev/ttyS1";

/// Everything the guest measures, as the host decided it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GuestPlan {
    pub arms: Vec<(String, ServerCommand)>,
    pub samples: usize,
    pub seed: u64,
    /// The regime an earlier guest sized, kept for an extension.
    pub regime: Option<RegimeRecord>,
    pub settings: GuestSettings,
    /// Instead of measuring: run the meter's calibration loop of this many
    /// turns, [`CALIBRATION_REPEATS`] times (see [`marker::counted_loop`]).
    #[serde(default)]
    pub calibrate: Option<u64>,
    /// Instead of measuring: run each known load of this many turns on
    /// every vCPU in turn (`bench/emulated/attribution.rs`).
    #[serde(default)]
    pub attribute: Option<u64>,
}

/// Timer interrupts may land in a calibration loop and add to its count;
/// the least of several repeats is the loop alone.
pub const CALIBRATION_REPEATS: usize = 5;

/// The host's trial settings in guest time.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GuestSettings {
    pub vcpus: usize,
    pub ready_timeout_ms: u64,
    pub stop_grace_ms: u64,
    pub regime: WorkloadRegime,
    pub batch: BatchSettings,
    pub live: LiveSettings,
    /// Live: the clients in flight, and how long one may wait for its
    /// answer (guest ms).
    pub connections: usize,
    pub connection_timeout_ms: u64,
    pub gate: GateConfig,
    pub contract: Contract,
    /// The host's limit on open files, which its servers get: the guest
    /// kernel's default of 1,024 failed a 4,096-slot direct descriptor
    /// table.
    pub open_files: u64,
}

impl GuestSettings {
    /// What the host's schedule, launch and load generator read; the timed
    /// load's windows have no use here (see [`batch`] and [`live`]).
    pub fn trial_settings(&self) -> TrialSettings {
        let ms = Duration::from_millis;
        let (connections, connection_timeout) = match self.regime {
            WorkloadRegime::Live => (self.connections, ms(self.connection_timeout_ms)),
            _ => (self.batch.backlog, self.batch.timeout),
        };
        TrialSettings {
            warmup: Duration::ZERO,
            window: Duration::ZERO,
            ready_timeout: ms(self.ready_timeout_ms),
            stop_grace: ms(self.stop_grace_ms),
            connections,
            connection_timeout,
            load_cores: (0..self.vcpus - 1).collect(),
            gate: self.gate.clone(),
            contract: Arc::new(self.contract.clone()),
            schedule: Schedule::Blocks,
            duet: DuetSettings {
                window: Duration::ZERO,
                slice: Duration::ZERO,
                windows_per_epoch: 1,
                shared: false,
            },
            saturation: SaturationConfig::default(),
            ration: None,
            drain_windows: false,
        }
    }

    /// The guest's meter: its own software counters, for the gate and to
    /// see a batch end; the instructions come from the host's plugin. No
    /// system-call tracepoint: it would run on the server's vCPU at every
    /// call, and be counted.
    fn meter_plan(&self) -> MeterPlan {
        MeterPlan {
            event: MeterEvent::TaskClock,
            source: MeterSource::Os,
            reason: "inside the emulated guest".into(),
            syscalls_tracepoint: None,
            sut_core: self.vcpus - 1,
            cores: self.vcpus,
            emulator: None,
            // The host judges the guest's counts, not its clock.
            drift: 0.0,
        }
    }
}

/// One line to the host: `KIND payload`.
fn say(channel: &mut std::fs::File, kind: &str, payload: &str) -> Result<()> {
    writeln!(channel, "{kind} {payload}").context("writing to the host channel")?;
    channel.flush()?;
    Ok(())
}

/// `ratchet guest PLAN`: measures, reports to [`CHANNEL`], and returns;
/// the guest's init powers the machine off. With `receive`, it first
/// stops for the snapshot and, restored, unpacks the host's files (the
/// plan among them) from the shared window.
pub fn run(plan_path: &Path, receive: bool) -> Result<()> {
    if receive {
        window::receive()?;
    }
    let mut channel = std::fs::OpenOptions::new()
        .write(true)
        .open(CHANNEL)
        .with_context(|| format!("opening {CHANNEL}"))?;
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    say(&mut channel, "UP", release.trim())?;
    let text = std::fs::read_to_string(plan_path)
        .with_context(|| format!("reading {}", plan_path.display()))?;
    let plan: GuestPlan =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", plan_path.display()))?;
    reseed(plan.seed)?;
    if let Some(n) = plan.calibrate {
        pin_self(&[0]);
        marker::enable();
        // Reported after the loops: a write to the serial port interrupts.
        let loops: Vec<_> = (0..CALIBRATION_REPEATS)
            .filter_map(|_| marker::counted_loop(n))
            .collect();
        for [b, e] in loops {
            say(&mut channel, "CALIBRATE", &format!("{b} {e}"))?;
        }
        return Ok(());
    }
    if let Some(n) = plan.attribute {
        return attribute(n, plan.settings.vcpus, &mut channel);
    }
    let result = measure(&plan, &mut channel);
    match &result {
        Ok(samples) => say(&mut channel, "RESULT", &serde_json::to_string(samples)?)?,
        Err(e) => say(&mut channel, "ERROR", &format!("{e:#}").replace('\n', " "))?,
    }
    result.map(drop)
}

/// Every guest restored from one snapshot starts with the same kernel
/// random generator; this mixes the plan's seed in and reseeds it, so
/// guests differ where a booted guest's seed made them differ (ports,
/// hashes), and the same seed gives the same guest.
fn reseed(seed: u64) -> Result<()> {
    const RNDRESEEDCRNG: libc::c_ulong = 0x5207;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/urandom")
        .context("opening /dev/urandom")?;
    f.write_all(&seed.to_le_bytes())?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    if unsafe { libc::ioctl(fd, RNDRESEEDCRNG) } != 0 {
        anyhow::bail!(
            "reseeding the guest's random generator: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Each known load on each vCPU in turn, [`CALIBRATION_REPEATS`] times,
/// from a thread pinned there; reported after all of them ran (a write to
/// the serial port interrupts).
fn attribute(n: u64, vcpus: usize, channel: &mut std::fs::File) -> Result<()> {
    marker::enable();
    let mut lines = Vec::new();
    for vcpu in 0..vcpus {
        for load in [
            marker::Load::Loop,
            marker::Load::Syscalls,
            marker::Load::Vdso,
        ] {
            let got = std::thread::spawn(move || {
                pin_self(&[vcpu]);
                (0..CALIBRATION_REPEATS)
                    .filter_map(|_| {
                        let before = unsafe { libc::sched_getcpu() };
                        let marks = marker::known_load(load, n)?;
                        let after = unsafe { libc::sched_getcpu() };
                        Some((marks, before, after))
                    })
                    .collect::<Vec<_>>()
            })
            .join()
            .map_err(|_| anyhow::anyhow!("a known load's thread panicked"))?;
            for ([b, e], before, after) in got {
                lines.push(format!(
                    "{vcpu} {} {b} {e} {before} {after}",
                    serde_json::to_string(&load)?
                ));
            }
        }
    }
    for l in lines {
        say(channel, "ATTRIBUTE", &l)?;
    }
    Ok(())
}

fn measure(plan: &GuestPlan, channel: &mut std::fs::File) -> Result<Samples> {
    let settings = plan.settings.trial_settings();
    let meter = plan.settings.meter_plan();
    let limit = libc::rlimit {
        rlim_cur: plan.settings.open_files,
        rlim_max: plan.settings.open_files,
    };
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        anyhow::bail!(
            "setting the guest's open-file limit to the host's {}: {}",
            plan.settings.open_files,
            std::io::Error::last_os_error()
        );
    }
    pin_self(&settings.load_cores);
    if plan.settings.live.profile_connections > 0 {
        send_kernel_symbols(channel)?;
    }
    let arms: Vec<Arm> = plan
        .arms
        .iter()
        .map(|(label, command)| Arm {
            label: label.clone(),
            command: command.clone(),
            source_hash: None,
            binary_hash: None,
        })
        .collect();
    let batches = &plan.settings.batch;
    let trials = AtomicU64::new(0);
    let trial =
        |server: &ServerCommand, meter: &MeterPlan, s: &TrialSettings| match plan.settings.regime {
            WorkloadRegime::Live => {
                let k = trials.fetch_add(1, Ordering::Relaxed);
                let l = &plan.settings.live;
                let jitter = |n, salt: u64| live::jittered(n, plan.seed ^ (k << 1 | salt));
                let sized = LiveSettings {
                    warmup_connections: jitter(l.warmup_connections, 0),
                    window_connections: jitter(l.window_connections, 1),
                    ..l.clone()
                };
                live::run_trial(server, meter, s, &sized)
            }
            _ => batch::run_trial(server, meter, s, batches),
        };
    warm_each(&arms, &meter, &settings, &trial, channel)?;
    let mut samples = Samples::new(arms.len());
    samples.schedule = Some(Schedule::Blocks);
    samples.regime = plan.regime.clone();
    marker::enable();
    let mut progress = |step: crate::bench::samples::Step<'_>| {
        let _ = say(channel, "STEP", &format!("{} {}", step.block, step.arm));
    };
    samples.run_blocks(
        &arms,
        plan.samples,
        plan.seed,
        &meter,
        &settings,
        &trial,
        &mut progress,
    )?;
    Ok(samples)
}

/// Sends the kernel's text symbols to the host, which names the kernel
/// functions of a profile by them: Debian ships no System.map with its
/// image, and a profiled guest's kernel is not relocated.
fn send_kernel_symbols(channel: &mut std::fs::File) -> Result<()> {
    let text = std::fs::read_to_string("/proc/kallsyms").context("reading /proc/kallsyms")?;
    let mut out = String::with_capacity(text.len() / 2);
    for line in text.lines() {
        let mut w = line.split_whitespace();
        if let (Some(addr), Some(kind), Some(name)) = (w.next(), w.next(), w.next()) {
            if matches!(kind, "t" | "T") && w.next().is_none() {
                out.push_str("SYM ");
                out.push_str(addr);
                out.push(' ');
                out.push_str(name);
                out.push('\n');
            }
        }
    }
    channel.write_all(out.as_bytes())?;
    channel.flush()?;
    Ok(())
}

/// Runs every arm once, unscored, announcing each first. The first trial
/// in a fresh guest cost up to 26% more than the same arm's later ones
/// (the kernel's caches of sockets and pages still growing), so no scored
/// trial is a guest's first. A server that brings the guest down as it
/// starts is named by its announcement.
fn warm_each(
    arms: &[Arm],
    meter: &MeterPlan,
    s: &TrialSettings,
    trial: Trial<'_>,
    channel: &mut std::fs::File,
) -> Result<()> {
    for arm in arms {
        say(channel, "STEP", &format!("0 {}", arm.label))?;
        trial(&arm.command, meter, s)?;
    }
    say(channel, "STEP", "0 -")
}

/// The generator's vCPUs only: ratchet's own work never lands on the
/// server's vCPU, whose instructions are the measurement.
fn pin_self(cores: &[usize]) {
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cores {
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
}

/// The guest's `/init`: mounts what the trial needs (procfs for the gate,
/// cgroup2 with the cpu and cpuset controllers for the ration), brings up
/// loopback, and runs ratchet, which stops the machine for its snapshot
/// (`snapshot.rs`), is given its files when restored, and measures;
/// then it powers off whatever happened. TIME_WAIT is
/// off: guest time never reaches its 60 s, so its table only fills, with
/// sockets of earlier trials, and overflows. No tmpfs on
/// /tmp: the root is in memory already, and an arm built in a host
/// temporary directory is in the image there.
pub fn init_script() -> String {
    format!(
        r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin:/sbin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
mkdir -p /sys/fs/cgroup
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo "+cpu +cpuset" > /sys/fs/cgroup/cgroup.subtree_control
ip link set lo up
echo 0 > /proc/sys/net/ipv4/tcp_max_tw_buckets
stty -F {CHANNEL} raw -echo
{RATCHET_PATH} guest --receive {PLAN_PATH}
echo "EXIT $?" > {CHANNEL}
poweroff -f
"#
    )
}
