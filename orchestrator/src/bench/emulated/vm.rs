//! One guest machine: QEMU started with the meter plugin, watched until it
//! powers off, and stopped with a named reason when it does not boot, hangs
//! or panics. QEMU dies with the thread that started it (a parent-death
//! signal), so no emulator outlives ratchet, even after SIGKILL; and it has
//! a process group of its own, so a terminal's Ctrl-C reaches ratchet, which
//! stops it.

use anyhow::{Context, Result};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::clock::GuestClock;
use super::image::Image;
use super::marks::Marks;
use super::qmp::Qmp;
use super::{snapshot, window};
use crate::bench::meters::emulator::{Emulator, WorkloadRegime};
use crate::interrupt;

/// How a guest ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// It powered off after ratchet in the guest said it was done.
    PoweredOff,
    /// Its kernel panicked (the console's panic line).
    Panicked(String),
    /// It had not started ratchet after `boot_timeout_s` of the time the
    /// host let it run ([`GuestClock`]).
    NoBoot,
    /// It was still running after `timeout_s` of that time.
    Hung,
    /// QEMU exited on its own without the guest finishing (its stderr).
    QemuFailed(String),
}

impl Ending {
    pub fn describe(&self, e: &Emulator) -> String {
        match self {
            Ending::PoweredOff => "powered off".into(),
            Ending::Panicked(line) => format!("the guest kernel panicked: {line}"),
            Ending::NoBoot => format!(
                "the guest did not boot within {} s (emulator.boot_timeout_s) of the time the host let it run",
                e.config.boot_timeout_s
            ),
            Ending::Hung => format!(
                "the guest was still running after {} s (emulator.timeout_s) of the time the host let it run, and was stopped",
                e.config.timeout_s
            ),
            Ending::QemuFailed(why) => format!("QEMU exited early: {why}"),
        }
    }
}

/// What a guest left behind.
pub struct GuestRun {
    pub ending: Ending,
    /// The lines ratchet in the guest wrote to the host channel.
    pub channel: Vec<String>,
    pub marks: Marks,
    pub marks_path: PathBuf,
    pub wall: Duration,
}

/// Built-in initcalls a guest skips, each CPU-bound under emulation and off
/// every measured path: the jitter entropy source's self-test (the kernel's
/// random generator seeds without it), the parse of the built-in
/// certificate list (no module or key is verified in the guest), and two
/// registrations for BPF programs (struct_ops and congestion control in
/// BPF; no server loads one). Names as the kernel spells them; the guest
/// kernel logs each as "blacklisted" with `initcall_debug`.
const SKIPPED_INITCALLS: [&str; 4] = [
    "jent_mod_init",
    "load_system_certificate_list",
    "bpf_tcp_ca_kfunc_init",
    "bpf_dummy_struct_ops_init",
];

/// The kernel command line: quiet, reboot (so exit) at once on a panic,
/// no self-tests of the crypto API (seconds of boot under emulation),
/// device interrupts on vCPU 0, and a TCP hash table large enough that a
/// lookup's cost does not depend on which sockets share its bucket.
///
/// Four initcalls that no measured path uses are skipped
/// ([`SKIPPED_INITCALLS`]): a bare boot of the guest kernel counted
/// 1.895 G emulated instructions with them and 1.688 G without.
///
/// Backlogs: the server's vCPU is kept free of RCU callbacks (the whole
/// guest is counted, so where they run does not matter). Live: the
/// server's vCPU is isolated from the scheduler's balancing, so nothing
/// but the server runs there, and it runs its own RCU callbacks, as a
/// core does that `perf stat -C` counts.
///
/// A profiled guest's kernel is not relocated, so its code addresses are
/// the kernel image's own (`System.map`); nor are its processes' mappings
/// randomized. QEMU translates x86-64 code position-independently and
/// shares a translation among all virtual addresses of the same physical
/// page, so the plugin names a block by the address it was first
/// translated at: the same binary must load at the same address in every
/// process for that to be this server's.
///
/// With `nohz_full`, a live server's vCPU stops its tick while the server
/// runs alone there, and its RCU callbacks run elsewhere.
fn append(regime: WorkloadRegime, sut: usize, profiled: bool, nohz_full: bool) -> String {
    let common = format!(
        "console=ttyS0 quiet panic=-1 oops=panic cryptomgr.notests rdinit=/init \
         irqaffinity=0 thash_entries=131072 initcall_blacklist={}",
        SKIPPED_INITCALLS.join(",")
    );
    let relocation = if profiled { " nokaslr norandmaps" } else { "" };
    let tick = if nohz_full {
        format!(" nohz_full={sut}")
    } else {
        String::new()
    };
    match regime {
        WorkloadRegime::Live => {
            format!("{common} isolcpus=domain,managed_irq,{sut}{tick}{relocation}")
        }
        _ => format!("{common} rcu_nocbs={sut}{relocation}"),
    }
}

/// Every online core of the host: ratchet pins itself away from the SUT
/// core, but emulated counts do not depend on where the emulator runs.
pub fn host_cores() -> usize {
    (unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).max(1) as usize
}

/// Which vCPUs' markers take snapshots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Markers {
    /// Every vCPU's but the server's: a server cannot open or shift a
    /// window. Every measurement.
    OffTheServer,
    /// Every vCPU's: a guest that runs no server (the attribution
    /// experiment puts a known load on each vCPU in turn).
    Everywhere,
}

/// How QEMU runs the guest's vCPUs.
///
/// Backlogs: one host thread runs every vCPU in turn under icount, so the
/// guest is deterministic; the cost is the whole guest's count, which does
/// not depend on which vCPU an instruction is counted on.
///
/// Live: the cost is one vCPU's count, and under icount QEMU 9.2 and newer
/// count an instruction on the vCPU that *translated* its block, not the
/// one that ran it: translation bakes the translating vCPU's index in as a
/// constant wherever TCG is not parallel, which round-robin is (QEMU's
/// `gen_cpu_index`). A loop pinned on each of six vCPUs in turn was counted
/// on vCPU 0 every time (docs/emulated-meter.md, "Which vCPU ran it").
/// With a thread per vCPU the index is read as the block runs, and every
/// known load lands on its own vCPU; the price is that the guest's timing
/// follows the host's scheduling, so live samples are perturbed by the host
/// and not repeatable to the instruction.
fn accel(regime: WorkloadRegime) -> &'static [&'static str] {
    match regime {
        WorkloadRegime::Live => &[
            "-accel",
            "tcg,thread=multi",
            "-name",
            "ratchet,debug-threads=on",
        ],
        _ => &["-accel", "tcg", "-icount", "shift=0,sleep=off"],
    }
}

/// Where a profiled guest's plugin writes its profiles.
pub const PROFILE_FILE: &str = "profile.log";

fn profiled(e: &Emulator) -> bool {
    e.config.workload() == WorkloadRegime::Live && e.config.profile_connections > 0
}

/// The machine a guest runs on, which a snapshot must match to be restored
/// into it: everything but its seed, its plugin, and how it starts. Files
/// are named in `dir`.
pub(super) fn machine(e: &Emulator, dir: &Path, initrd: &Path) -> Vec<OsString> {
    let mut a: Vec<OsString> = [
        "-M",
        "pc",
        "-cpu",
        "max",
        "-nodefaults",
        "-display",
        "none",
        "-no-reboot",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    a.extend(accel(e.config.workload()).iter().map(OsString::from));
    let s = |x: String| OsString::from(x);
    a.extend([
        s("-smp".into()),
        s(e.config.guest_vcpus().to_string()),
        s("-rtc".into()),
        s("base=2024-01-01T00:00:00,clock=vm".into()),
        s("-m".into()),
        s(e.config.memory_mb.to_string()),
        s("-kernel".into()),
        e.kernel.clone().into_os_string(),
        s("-initrd".into()),
        initrd.as_os_str().to_owned(),
        s("-append".into()),
        s(append(
            e.config.workload(),
            e.config.sut_vcpu(),
            profiled(e),
            e.config.nohz_full,
        )),
        s("-serial".into()),
        s(format!("file:{}", dir.join("console.log").display())),
        s("-serial".into()),
        s(format!("file:{}", dir.join("channel.log").display())),
        s("-device".into()),
        s("pvpanic".into()),
        s("-action".into()),
        s("panic=pause".into()),
        s("-qmp".into()),
        s(format!(
            "unix:{},server=on,wait=off",
            dir.join(QMP).display()
        )),
    ]);
    a.extend(window::qemu_args(&dir.join(WINDOW)).into_iter().map(s));
    a
}

/// The guest's QMP socket and shared window, in its directory.
pub(super) const QMP: &str = "qmp.sock";
pub(super) const WINDOW: &str = "window.img";

/// QEMU for a guest in `dir`: the [`machine`], seeded, with the meter
/// plugin where `markers` asks for it. It dies with the calling thread and
/// has a process group of its own.
pub(super) fn command(
    e: &Emulator,
    dir: &Path,
    initrd: &Path,
    seed: u64,
    markers: Option<Markers>,
) -> Command {
    let mut c = Command::new(&e.qemu);
    c.args(machine(e, dir, initrd))
        .arg("-seed")
        .arg(seed.to_string());
    if let Some(markers) = markers {
        let sut = match markers {
            Markers::OffTheServer => e.config.sut_vcpu() as i64,
            Markers::Everywhere => -1,
        };
        c.arg("-plugin").arg(format!(
            "{},out={},sut={}{}",
            e.plugin.display(),
            dir.join("marks.log").display(),
            sut,
            if profiled(e) {
                format!(",profile={}", dir.join(PROFILE_FILE).display())
            } else {
                String::new()
            }
        ));
    }
    c.stdin(Stdio::null()).stdout(Stdio::null());
    let mut every_core: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for core in 0..host_cores() {
        unsafe { libc::CPU_SET(core, &mut every_core) };
    }
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        c.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            libc::setpgid(0, 0);
            libc::sched_setaffinity(0, std::mem::size_of_val(&every_core), &every_core);
            Ok(())
        });
    }
    c
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read(path)
        .map(|b| {
            String::from_utf8_lossy(&b)
                .lines()
                .map(|l| l.trim_end_matches('\r').to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The host niceness of the server vCPU's thread (see [`yield_server_vcpu`]).
/// At 0 the server with all six changes was busy 70-75% of its windows;
/// at 19 it starved long enough for clients to time out (2 s); at 5 every
/// arm of the study's table was busy at least 97% with no failure.
const SERVER_NICE: i32 = 5;

/// Gives the host thread of the server's vCPU less weight than the
/// clients' vCPUs, so that the clients, which spend three to four times
/// the server's instructions on a connection, keep connections waiting
/// for it: the server is CPU-bound in guest time, as the study's was.
/// The six vCPU threads share this machine's two cores; without it, the
/// host's fair share decided how busy a cheap server was.
fn yield_server_vcpu(qemu: i32, sut: usize) {
    let name = format!("CPU {sut}/TCG");
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let tasks = std::fs::read_dir(format!("/proc/{qemu}/task"))
            .into_iter()
            .flatten();
        for t in tasks.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.trim() == name {
                if let Ok(tid) = t.file_name().to_string_lossy().parse::<u32>() {
                    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, SERVER_NICE) };
                    return;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    tracing::warn!("no host thread named {name:?} in QEMU {qemu}");
}

/// QEMU, killed when its owner is dropped.
pub(super) struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Restores a guest from its machine's warm snapshot in `dir`, gives it
/// `payload` (the arms' files and the plan), and waits for it to end. The
/// calling thread must live until this returns (QEMU's parent-death
/// signal is tied to it).
pub fn run(
    e: &Emulator,
    dir: &Path,
    payload: &Image,
    seed: u64,
    markers: Markers,
) -> Result<GuestRun> {
    let mut archive = Vec::new();
    payload.write_to(&mut archive)?;
    let warm = snapshot::warm(e)?;
    let stderr = dir.join("qemu.stderr");
    let (mut child, clock) = match restore(e, dir, &warm, &archive, seed, markers) {
        Ok(started) => started,
        Err(err) => {
            tracing::warn!("{err:#}: booting the guest kernel afresh");
            snapshot::discard(&warm)?;
            let warm = snapshot::warm(e)?;
            restore(e, dir, &warm, &archive, seed, markers)?
        }
    };
    if e.config.workload() == WorkloadRegime::Live {
        yield_server_vcpu(child.0.id() as i32, e.config.sut_vcpu());
    }
    let channel = dir.join("channel.log");
    let boot = Duration::from_secs(e.config.boot_timeout_s);
    let limit = Duration::from_secs(e.config.timeout_s);
    let mut booted = false;
    let ending = loop {
        if let Some(status) = child.0.try_wait()? {
            let console = std::fs::read_to_string(dir.join("console.log")).unwrap_or_default();
            break if let Some(l) = console.lines().find(|l| l.contains("Kernel panic")) {
                Ending::Panicked(l.trim().to_string())
            } else if lines(&channel).iter().any(|l| l.starts_with("EXIT ")) {
                Ending::PoweredOff
            } else {
                let why = std::fs::read_to_string(&stderr).unwrap_or_default();
                Ending::QemuFailed(format!("{status}: {}", why.trim()))
            };
        }
        interrupt::check()?;
        booted = booted || lines(&channel).iter().any(|l| l.starts_with("UP "));
        if !booted && clock.elapsed() > boot {
            break Ending::NoBoot;
        }
        if clock.elapsed() > limit {
            break Ending::Hung;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(child);
    let marks_path = dir.join("marks.log");
    let marks = if ending == Ending::PoweredOff {
        let marks = Marks::read(&marks_path)?;
        if !marks.complete {
            anyhow::bail!(
                "the meter plugin's output {} has no END line: it was cut short",
                marks_path.display()
            );
        }
        marks
    } else {
        Marks::read(&marks_path).unwrap_or_default()
    };
    Ok(GuestRun {
        marks,
        marks_path,
        channel: lines(&channel),
        ending,
        wall: clock.wall(),
    })
}

/// Starts QEMU from `warm` and, once the guest's memory is loaded, gives
/// it `archive`; a snapshot that does not load is named.
fn restore(
    e: &Emulator,
    dir: &Path,
    warm: &snapshot::Warm,
    archive: &[u8],
    seed: u64,
    markers: Markers,
) -> Result<(Killed, GuestClock)> {
    window::create(&dir.join(WINDOW))?;
    let stderr = dir.join("qemu.stderr");
    let mut c = command(e, dir, &warm.initrd, seed, Some(markers));
    c.arg("-incoming")
        .arg(format!("file:{}", warm.state.display()))
        .arg("-S")
        .stderr(std::fs::File::create(&stderr)?);
    let mut child = Killed(
        c.spawn()
            .with_context(|| format!("starting {}", e.qemu.display()))?,
    );
    let clock = GuestClock::start(child.0.id() as i32);
    if let Err(err) = resume(dir, archive) {
        let _ = child.0.kill();
        let _ = child.0.wait();
        let why = std::fs::read_to_string(&stderr).unwrap_or_default();
        return Err(err).with_context(|| {
            format!(
                "restoring the guest from {}: {}",
                warm.state.display(),
                why.trim()
            )
        });
    }
    Ok((child, clock))
}

/// Once the restored guest's memory is loaded, puts its files in its
/// window and lets it run.
fn resume(dir: &Path, archive: &[u8]) -> Result<()> {
    let mut q = Qmp::connect(&dir.join(QMP), Duration::from_secs(30))?;
    q.until("query-status", |v| v["status"] != "inmigrate")?;
    let status = q.execute("query-migrate", serde_json::json!({}))?;
    if status["status"] == "failed" {
        anyhow::bail!(
            "loading the snapshot failed: {}",
            status["error-desc"].as_str().unwrap_or("no reason given")
        );
    }
    window::deliver(&dir.join(WINDOW), archive)?;
    q.execute("cont", serde_json::json!({}))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_live_guest_asked_to_stops_the_servers_tick() {
        let live = append(WorkloadRegime::Live, 5, false, true);
        assert!(
            live.contains("isolcpus=domain,managed_irq,5 nohz_full=5"),
            "{live}"
        );
        assert!(!append(WorkloadRegime::Live, 5, false, false).contains("nohz_full"));
        assert!(!append(WorkloadRegime::Backlog, 1, false, true).contains("nohz_full"));
        assert!(append(WorkloadRegime::Live, 5, true, false).ends_with("nokaslr norandmaps"));
    }
}
