//! The champion's profile on the host: `perf record -e cpu-clock -g` on
//! the server in an extra window, never a scored one, reduced to the top
//! symbols and the shares by DSO.
//!
//! The server is profiled in the regime it is measured in: rationed by the
//! probe's allotment in the saturated regime. Unrationed here it sleeps
//! between arrivals, and the profile showed what a server half asleep
//! spends (`finish_task_switch` alone 15-21% of the samples), not what the
//! referee scores. `perf record` runs on the generator's cores (ratchet
//! pins itself there), so the clients fall behind a little more often
//! than in a scored window: a profile's context switches per connection
//! say how near to saturated it was.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::bench::host::ballast::Ballast;
use crate::bench::host::probe;
use crate::bench::host::trial::TrialSettings;
use crate::bench::load::loadgen::LoadGen;
use crate::bench::meters::meter::MeterPlan;
use crate::bench::meters::profile::{group, Profile};
use crate::bench::servers::arm::Arm;
use crate::bench::servers::cgroup::RationGroup;
use crate::bench::servers::launch::RunningServer;
use crate::bench::servers::port::free_port;
use crate::bench::servers::secrets;

/// One `perf report --stdio` line: its percentage and the columns after it.
fn report_line(line: &str) -> Option<(f64, &str)> {
    let (pct, rest) = line.trim().split_once('%')?;
    Some((pct.trim().parse::<f64>().ok()?, rest.trim()))
}

/// The shares by DSO group, from a `perf report --sort dso` taken with no
/// percentage cut: summed from a symbol list with a cut, the long tail of
/// small kernel symbols would land nowhere, and the kernel's share (the
/// floor the original study found) would read low.
pub fn parse_dso_report(text: &str) -> BTreeMap<String, f64> {
    let mut shares = BTreeMap::new();
    for (pct, dso) in text.lines().filter_map(report_line) {
        *shares.entry(group(dso).to_string()).or_default() += pct / 100.0;
    }
    shares
}

/// The hottest symbols, from `perf report --sort dso,sym` output (which may
/// carry a cut: only its head is kept).
pub fn parse_symbol_report(text: &str) -> Vec<(f64, String, String)> {
    let mut top = Vec::new();
    for (pct, rest) in text.lines().filter_map(report_line) {
        let Some((dso, sym)) = rest.split_once(char::is_whitespace) else {
            continue;
        };
        let sym = sym
            .trim()
            .trim_start_matches("[k] ")
            .trim_start_matches("[.] ")
            .to_string();
        top.push((pct / 100.0, dso.to_string(), sym));
        if top.len() == 25 {
            break;
        }
    }
    top
}

/// Runs the server under load and profiles it with perf for `duration`.
pub fn record(
    arm: &Arm,
    plan: &MeterPlan,
    s: &TrialSettings,
    duration: Duration,
) -> Result<Profile> {
    if Command::new("perf").arg("--version").output().is_err() {
        bail!("perf not found: install the Debian package linux-perf");
    }
    let regime = probe::regime(std::slice::from_ref(arm), &mut [None], plan, s)?;
    let group = regime
        .allotment
        .map(|a| RationGroup::create(a, 1))
        .transpose()?;
    let _ballast = Ballast::start_if(group.is_some() && s.saturation.ballast, plan.sut_core)?;
    let port = free_port()?;
    let mut running = RunningServer::start(&arm.command, port, plan, group.as_ref())?;
    running.wait_listening(s.ready_timeout)?;
    let load = LoadGen::start(s.load_spec(&[arm.command.address(port)]))?;
    std::thread::sleep(s.warmup.min(Duration::from_millis(500)));
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("perf.data");
    let (m0, l0) = (running.read()?, load.snapshot(0).completed);
    let rec = secrets::minimal_env(&mut Command::new("perf"))
        .args(["record", "-q", "-e", "cpu-clock", "-g", "-o"])
        .arg(&data)
        .args(["-p", &running.pid.to_string(), "--", "sleep"])
        .arg(format!("{:.3}", duration.as_secs_f64()))
        .output()
        .context("running perf record")?;
    let switches = running.read()?.delta(&m0).context_switches;
    let completed = load.snapshot(0).completed.saturating_sub(l0);
    load.finish();
    running.stop(s.stop_grace)?;
    if !rec.status.success() {
        bail!(
            "perf record failed: {}",
            String::from_utf8_lossy(&rec.stderr).trim()
        );
    }
    let dsos = perf_report(&data, &["--sort", "dso", "--percent-limit", "0"])?;
    let symbols = perf_report(&data, &["--sort", "dso,sym", "--percent-limit", "0.3"])?;
    Ok(Profile {
        dso_shares: parse_dso_report(&dsos),
        top: parse_symbol_report(&symbols),
        regime: Some(regime.describe()),
        context_switches_per_connection: (completed > 0)
            .then(|| switches as f64 / completed as f64),
        unit: None,
        per_connection: None,
    })
}

fn perf_report(data: &Path, sort: &[&str]) -> Result<String> {
    let rep = secrets::minimal_env(&mut Command::new("perf"))
        .args(["report", "--stdio", "--no-children", "-g", "none"])
        .args(sort)
        .arg("-i")
        .arg(data)
        .output()
        .context("running perf report")?;
    if !rep.status.success() {
        bail!(
            "perf report {} failed: {}",
            sort.join(" "),
            String::from_utf8_lossy(&rep.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&rep.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_perf_report_lines() {
        let dsos = "# header\n\n    40.00%  [kernel.kallsyms]\n    10.00%  libc.so.6\n     5.00%  server\n     1.00%  liburing.so.2.3\n";
        let syms = "# header\n\n    40.00%  [kernel.kallsyms]  [k] tcp_v4_rcv\n    10.00%  libc.so.6  [.] malloc\n";
        let p = Profile {
            dso_shares: parse_dso_report(dsos),
            top: parse_symbol_report(syms),
            regime: None,
            context_switches_per_connection: None,
            ..Default::default()
        };
        assert!((p.dso_shares["kernel"] - 0.40).abs() < 1e-9);
        assert!((p.dso_shares["libc"] - 0.10).abs() < 1e-9);
        assert!((p.dso_shares["server"] - 0.05).abs() < 1e-9);
        assert!((p.dso_shares["liburing"] - 0.01).abs() < 1e-9);
        assert_eq!(p.top[0].2, "tcp_v4_rcv");
        assert_eq!(
            p.top[1],
            (0.10, "libc.so.6".to_string(), "malloc".to_string())
        );
        assert!(p.render().contains("kernel 40.0%"));
        assert!(p
            .render()
            .contains("recorded before profiles were rationed"));
    }

    /// A kernel spread over hundreds of symbols each under perf's cut: the
    /// symbol list sees a third of it, the DSO report all of it.
    #[test]
    fn a_long_kernel_tail_counts_as_kernel() {
        let mut syms = String::from("    30.00%  [kernel.kallsyms]  [k] finish_task_switch\n");
        for i in 0..5 {
            syms += &format!("     1.00%  [kernel.kallsyms]  [k] big_{i}\n");
        }
        syms += "     3.00%  server  [.] main\n";
        let dsos = "    94.00%  [kernel.kallsyms]\n     3.00%  server\n     2.50%  liburing.so.2.3\n     0.50%  [vdso]\n";
        let shares = parse_dso_report(dsos);
        assert!((shares["kernel"] - 0.94).abs() < 1e-9, "{shares:?}");
        assert!((shares["other"] - 0.005).abs() < 1e-9, "{shares:?}");
        assert!((shares.values().sum::<f64>() - 1.0).abs() < 1e-9);
        let top = parse_symbol_report(&syms);
        assert_eq!(top.len(), 7);
        assert_eq!(top[0].2, "finish_task_switch");
    }
}
