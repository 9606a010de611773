//! `ratchet doctor`: is this machine fit to referee? Each line is OK or a
//! warning that says how to fix it. Nothing here changes the machine except
//! mounting tracefs, which the meter needs for syscall counts.

use std::path::Path;
use std::process::Command;

use crate::bench::environment;
use crate::bench::meters::meter::MeterPlan;
use crate::config::Config;

pub struct Check {
    pub ok: bool,
    pub name: &'static str,
    pub detail: String,
}

fn check(ok: bool, name: &'static str, detail: impl Into<String>) -> Check {
    Check {
        ok,
        name,
        detail: detail.into(),
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Whether the emulated meter works here, how fast, and what is missing:
/// a guest boots and runs the calibration loop, which must be counted to
/// the instruction.
fn emulated_meter(config: &Config) -> Check {
    use crate::bench::emulated::calibrate;
    use crate::bench::meters::emulator::Emulator;
    const TURNS: u64 = 100_000;
    let e = match Emulator::locate(&config.emulator) {
        Ok(e) => e,
        Err(e) => return check(false, "emulated meter", format!("unavailable: {e:#}")),
    };
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            return check(
                false,
                "emulated meter",
                format!("no temporary directory: {e}"),
            )
        }
    };
    match calibrate::calibrate(&e, TURNS, dir.path()) {
        Ok(c) => check(
            c.exact(),
            "emulated meter",
            format!(
                "{}; a loop of {} instructions counted {} (least of {:?}); guest booted, ran and powered off in {:.1} s at {:.0} M emulated instructions/s; \
                 regime {} (emulator.regime = \"{}\")",
                if c.exact() { "exact" } else { "NOT exact" },
                c.expected,
                c.counted.iter().min().unwrap_or(&0),
                c.counted,
                c.wall.as_secs_f64(),
                c.speed() / 1e6,
                config.emulator.workload().name(),
                config.emulator.regime.name()
            ),
        ),
        Err(err) => check(false, "emulated meter", format!("{err:#} ({})", e.describe())),
    }
}

/// Whether the plugin counts each instruction on the vCPU that ran it, in
/// a guest of the live regime's vCPUs: its cost is one vCPU's count.
fn emulated_attribution(config: &Config) -> Check {
    use crate::bench::emulated::attribution;
    use crate::bench::meters::emulator::{Emulator, WorkloadRegime};
    const TURNS: u64 = 20_000;
    let mut live = config.emulator.clone();
    live.regime = WorkloadRegime::Live;
    let label = "emulated attribution";
    let e = match Emulator::locate(&live) {
        Ok(e) => e,
        Err(e) => return check(false, label, format!("unavailable: {e:#}")),
    };
    let run = tempfile::tempdir()
        .map_err(anyhow::Error::from)
        .and_then(|dir| attribution::attribute(&e, TURNS, dir.path()));
    match run {
        Ok(a) => {
            tracing::info!(
                "attribution: {}",
                serde_json::to_string(&a).unwrap_or_default()
            );
            let exact = a.loops_exact() && a.markers_placed();
            let agree = a.own_counts_agree();
            check(
                exact && agree >= 0.98,
                label,
                format!(
                    "a loop of {} instructions on each of {} vCPUs counted {} there; \
                     system calls and vDSO calls counted on the vCPU that made them within {:.1}% of each other",
                    2 * TURNS + 1,
                    e.config.guest_vcpus(),
                    if exact { "exactly" } else { "NOT exactly" },
                    (1.0 - agree) * 100.0
                ),
            )
        }
        Err(err) => check(false, label, format!("{err:#}")),
    }
}

const PROBE_SOURCE: &str = include_str!("../probe/uring_probe.c");

/// Compiles and runs the io_uring probe; one check per feature it reports.
fn uring_features() -> Vec<Check> {
    if !Path::new("/usr/include/liburing.h").exists() {
        return vec![check(
            false,
            "io_uring features",
            "liburing.h missing: apt-get install liburing-dev",
        )];
    }
    let probe = (|| -> anyhow::Result<String> {
        let dir = tempfile::tempdir()?;
        let src = dir.path().join("probe.c");
        let bin = dir.path().join("probe");
        std::fs::write(&src, PROBE_SOURCE)?;
        let cc = Command::new("cc")
            .args(["-O2", "-Wall", "-o"])
            .arg(&bin)
            .arg(&src)
            .arg("-luring")
            .output()?;
        anyhow::ensure!(
            cc.status.success(),
            "{}",
            String::from_utf8_lossy(&cc.stderr)
        );
        Ok(String::from_utf8(Command::new(&bin).output()?.stdout)?)
    })();
    match probe {
        Err(e) => vec![check(
            false,
            "io_uring features",
            format!("probe failed: {e}"),
        )],
        Ok(out) => out
            .lines()
            .filter_map(|l| {
                let (name, rest) = l.split_once(' ')?;
                let label: &'static str = match name {
                    "io_uring" => "io_uring",
                    "single_issuer_defer_taskrun" => "io_uring SINGLE_ISSUER|DEFER_TASKRUN",
                    "sqpoll" => "io_uring SQPOLL",
                    "direct_descriptors" => "io_uring direct descriptors",
                    "multishot_accept" => "io_uring multishot accept",
                    "cqe_skip_success" => "io_uring CQE_SKIP_SUCCESS",
                    _ => return None,
                };
                Some(if rest == "ok" {
                    check(true, label, "supported (probed)")
                } else {
                    check(
                        false,
                        label,
                        format!("not available: {rest}; a newer kernel is needed"),
                    )
                })
            })
            .collect(),
    }
}

/// Whether servers can be measured busy here (see [`crate::bench::host::ration`]).
fn regime(config: &Config, containment: &crate::bench::servers::cgroup::Containment) -> Check {
    use crate::bench::regime::Regime;
    match (config.saturation.regime, containment.cannot_ration()) {
        (Regime::Idle, _) => check(
            false,
            "regime",
            "idle (saturation.regime = \"idle\"): servers sleep between arrivals when the generator is the limit, and every result says so",
        ),
        (Regime::Saturated, Some(why)) => check(
            false,
            "regime",
            format!(
                "cannot reach saturation: {why}; every result will be measured in the idle regime and carry a warning \
                 (run as root on a host with the cpu controller, or delegate it to ratchet's cgroup)"
            ),
        ),
        (Regime::Saturated, None) => check(
            true,
            "regime",
            "saturated: the arms of each measurement share one CPU-bandwidth group, sized by a probe so that the generator keeps headroom",
        ),
    }
}

/// Whether the program that builds the target is here, and the build user
/// can run it. The io_uring probes run only for a target that says it uses
/// io_uring.
fn build_program(config: &Config) -> Check {
    let program = &config.target.build[0];
    if !crate::bench::servers::build::on_path(program) {
        return check(
            false,
            "target build",
            format!("target.build: `{program}` not found on PATH"),
        );
    }
    let toolchain = match config.target.toolchain_dirs() {
        Ok(dirs) => dirs,
        Err(e) => return check(false, "target build", format!("{e:#}")),
    };
    if let Err(e) = crate::bench::servers::build::reachable(program, &toolchain) {
        return check(false, "target build", format!("target.build: {e:#}"));
    }
    let view = match crate::bench::servers::build::view_of(&toolchain) {
        Ok(view) => view,
        Err(e) => return check(false, "target build", format!("{e:#}")),
    };
    let mut passed = if config.target.build_env.is_empty() {
        String::new()
    } else {
        format!("; with {}", config.target.build_env.join(", "))
    };
    if let Some(view) = view {
        passed += &format!("; {}", view.describe());
    }
    check(
        true,
        "target build",
        format!(
            "`{}` ({} server){passed}",
            config.target.build.join(" "),
            config.target.language
        ),
    )
}

pub fn run(config: &Config) -> Vec<Check> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut checks = vec![check(true, "kernel", environment::kernel())];
    checks.push(build_program(config));
    if config.target.io_uring {
        checks.extend(uring_features());
        checks.push(check(
            Path::new("/usr/include/liburing.h").exists(),
            "liburing",
            format!("liburing-dev {}", environment::liburing_version()),
        ));
    }
    match config.sut_core(cores) {
        Ok(sut) => checks.extend(core_checks(config, cores, sut)),
        Err(e) => checks.push(check(false, "cores", format!("{e:#}"))),
    }
    checks.extend(host_checks());
    checks.extend(tool_checks());
    checks
}

/// What depends on the SUT core: the cores, the meter, containment, the
/// regime, the governor and isolation.
fn core_checks(config: &Config, cores: usize, sut: usize) -> Vec<Check> {
    let mut checks = vec![check(
        cores >= 2,
        "cores",
        if cores >= 2 {
            format!("{cores} cores; SUT core {sut}, load generator on the others")
        } else {
            "1 core: the server and the load generator share it; results are not trustworthy".into()
        },
    )];
    checks.extend(meter_checks(config, sut, cores));
    checks.push(emulated_meter(config));
    checks.push(emulated_attribution(config));
    let containment = crate::bench::servers::cgroup::containment();
    checks.push(containment_check(containment));
    checks.push(regime(config, containment));
    checks.push(governor_check(sut));
    checks.push(isolation_check(sut));
    checks
}

fn meter_checks(config: &Config, sut: usize, cores: usize) -> Vec<Check> {
    let plan = match MeterPlan::detect(config.meter.event, &config.emulator, sut, cores) {
        Ok(plan) => plan,
        Err(e) => return vec![check(false, "meter", format!("{e:#}"))],
    };
    vec![
        check(
            plan.event == crate::bench::meters::meter::MeterEvent::Instructions,
            "meter",
            format!(
                "{} ({}); unit {}",
                plan.event.name(),
                plan.reason,
                plan.event.unit()
            ),
        ),
        check(
            plan.syscalls_tracepoint.is_some(),
            "syscall counting",
            if plan.syscalls_tracepoint.is_some() {
                "raw_syscalls:sys_enter tracepoint available".to_string()
            } else {
                "tracefs unavailable: mount -t tracefs nodev /sys/kernel/tracing (as root)".into()
            },
        ),
    ]
}

fn containment_check(containment: &crate::bench::servers::cgroup::Containment) -> Check {
    check(
        containment.warning().is_none(),
        "containment",
        match containment.warning() {
            Some(w) => w,
            None => format!(
                "{}; servers{} confined to the SUT core by a cpuset",
                containment.description,
                if containment.confines_cpu() {
                    ""
                } else {
                    " not"
                }
            ),
        },
    )
}

fn governor_check(sut: usize) -> Check {
    let governor = environment::governor(sut);
    let fine = governor == "performance" || governor.starts_with("none");
    check(
        fine,
        "governor",
        if fine {
            governor
        } else {
            format!("{governor}: set `performance` with cpupower frequency-set -g performance")
        },
    )
}

fn isolation_check(sut: usize) -> Check {
    let cmdline = read("/proc/cmdline").unwrap_or_default();
    let isolated = cmdline.contains("isolcpus") || cmdline.contains("nohz_full");
    check(
        isolated,
        "core isolation",
        if isolated {
            "isolcpus/nohz_full set".to_string()
        } else {
            format!("SUT core {sut} is not isolated: add isolcpus={sut} nohz_full={sut} to the kernel command line for less noise")
        },
    )
}

/// What the host allows ratchet and the code it runs: perf, who untrusted
/// code runs as, interrupts, TIME_WAIT room.
fn host_checks() -> Vec<Check> {
    let paranoid = read("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default();
    let root = unsafe { libc::geteuid() } == 0;
    let privilege = crate::bench::servers::privilege::privilege();
    let irqbalance = Command::new("pgrep").arg("-x").arg("irqbalance").output();
    let irq_running = irqbalance.is_ok_and(|o| o.status.success());
    let tw = read("/proc/sys/net/ipv4/tcp_max_tw_buckets").unwrap_or_default();
    vec![
        check(
            root || paranoid.parse::<i32>().is_ok_and(|p| p <= 1),
            "perf_event_paranoid",
            if root {
                format!("{paranoid} (running as root)")
            } else {
                format!("{paranoid}: run as root or sysctl kernel.perf_event_paranoid=1")
            },
        ),
        check(
            privilege.identity().is_some(),
            "untrusted code",
            privilege.describe(),
        ),
        check(
            !irq_running,
            "irqbalance",
            if irq_running {
                "running: it may move interrupts onto the SUT core; systemctl stop irqbalance"
            } else {
                "not running"
            },
        ),
        check(
            tw.parse::<u64>().is_ok_and(|t| t >= 131_072),
            "tcp_max_tw_buckets",
            format!("{tw} (the server closes first, so TIME_WAIT lands on it; ratchet rotates client addresses over 127.1.0.0/16)"),
        ),
    ]
}

fn tool_checks() -> Vec<Check> {
    [
        ("go", "golang-go"),
        ("perf", "linux-perf"),
        ("make", "make"),
    ]
    .into_iter()
    .map(|(tool, package)| {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        check(
            found,
            "tool",
            if found {
                format!("{tool} found")
            } else {
                format!("{tool} missing: apt-get install {package}")
            },
        )
    })
    .collect()
}
