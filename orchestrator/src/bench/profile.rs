//! Profiles of the champion: `perf record -e cpu-clock -g` on the server in
//! an extra window, never a scored one, reduced to the top symbols and the
//! shares by DSO (kernel, libc, liburing, treatment). Agents see them; the
//! report compares baseline and champion.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::bench::launch::{free_port, RunningServer, ServerCommand};
use crate::bench::loadgen::LoadGen;
use crate::bench::meter::MeterPlan;
use crate::bench::secrets;
use crate::bench::trial::TrialSettings;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Profile {
    /// Share of samples (0..1) by DSO group: kernel, libc, liburing, treatment, other.
    pub dso_shares: BTreeMap<String, f64>,
    /// The hottest symbols: (share, dso, symbol).
    pub top: Vec<(f64, String, String)>,
}

impl Profile {
    /// Where the profile of a run's champion is kept in the knowledge base
    /// `kb`: the loop writes it there, the report reads it back.
    pub fn stored_path(kb: &Path, run_id: &str, attempt: usize) -> PathBuf {
        kb.join("profiles").join(format!("{run_id}-{attempt}.json"))
    }

    /// The stored profile, when the run recorded one.
    pub fn load_stored(kb: &Path, run_id: &str, attempt: usize) -> Option<Self> {
        crate::files::read_json(&Self::stored_path(kb, run_id, attempt)).ok()
    }

    /// Stores the profile where [`Profile::load_stored`] finds it.
    pub fn store(&self, kb: &Path, run_id: &str, attempt: usize) -> Result<()> {
        let path = Self::stored_path(kb, run_id, attempt);
        let dir = path.parent().expect("a file in a directory");
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        crate::files::write_atomic(&path, &serde_json::to_vec_pretty(self)?)
    }
}

fn group(dso: &str) -> &'static str {
    if dso.contains("kernel") || dso.starts_with("[k") {
        "kernel"
    } else if dso.starts_with("libc") || dso.contains("libc.so") {
        "libc"
    } else if dso.contains("liburing") {
        "liburing"
    } else if dso == "server" || dso == "control" {
        "treatment"
    } else {
        "other"
    }
}

/// Parses `perf report --stdio --sort dso,sym` output.
pub fn parse_report(text: &str) -> Profile {
    let mut p = Profile::default();
    for line in text.lines() {
        let line = line.trim();
        let Some((pct, rest)) = line.split_once('%') else {
            continue;
        };
        let Ok(pct) = pct.trim().parse::<f64>() else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let Some(dso) = parts.next() else { continue };
        let sym: Vec<&str> = parts.collect();
        let sym = sym.join(" ");
        let sym = sym
            .trim_start_matches("[k] ")
            .trim_start_matches("[.] ")
            .to_string();
        *p.dso_shares.entry(group(dso).to_string()).or_default() += pct / 100.0;
        if p.top.len() < 25 {
            p.top.push((pct / 100.0, dso.to_string(), sym));
        }
    }
    p
}

impl Profile {
    pub fn render(&self) -> String {
        let mut s = String::from("Share of cpu-clock samples by DSO: ");
        s += &self
            .dso_shares
            .iter()
            .map(|(k, v)| format!("{k} {:.1}%", v * 100.0))
            .collect::<Vec<_>>()
            .join(", ");
        s += "\nTop symbols:\n";
        for (share, dso, sym) in self.top.iter().take(20) {
            s += &format!("  {:5.2}%  {dso:<20} {sym}\n", share * 100.0);
        }
        s
    }
}

/// Runs the server under load and profiles it with perf for `duration`.
pub fn record(
    server: &ServerCommand,
    plan: &MeterPlan,
    s: &TrialSettings,
    duration: Duration,
) -> Result<Profile> {
    if Command::new("perf").arg("--version").output().is_err() {
        bail!("perf not found: install the Debian package linux-perf");
    }
    let port = free_port()?;
    let mut running = RunningServer::start(server, port, plan, None)?;
    running.wait_listening(s.ready_timeout)?;
    let load = LoadGen::start(s.load_spec(&[port]))?;
    std::thread::sleep(s.warmup.min(Duration::from_millis(500)));
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("perf.data");
    let rec = secrets::minimal_env(&mut Command::new("perf"))
        .args(["record", "-q", "-e", "cpu-clock", "-g", "-o"])
        .arg(&data)
        .args(["-p", &running.pid.to_string(), "--", "sleep"])
        .arg(format!("{:.3}", duration.as_secs_f64()))
        .output()
        .context("running perf record")?;
    load.finish();
    running.stop(s.stop_grace)?;
    if !rec.status.success() {
        bail!(
            "perf record failed: {}",
            String::from_utf8_lossy(&rec.stderr).trim()
        );
    }
    let rep = secrets::minimal_env(&mut Command::new("perf"))
        .args([
            "report",
            "--stdio",
            "--no-children",
            "--sort",
            "dso,sym",
            "-g",
            "none",
            "--percent-limit",
            "0.3",
            "-i",
        ])
        .arg(&data)
        .output()
        .context("running perf report")?;
    if !rep.status.success() {
        bail!(
            "perf report failed: {}",
            String::from_utf8_lossy(&rep.stderr).trim()
        );
    }
    Ok(parse_report(&String::from_utf8_lossy(&rep.stdout)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_perf_report_lines() {
        let text = "# header\n\n    40.00%  [kernel.kallsyms]  [k] tcp_v4_rcv\n    10.00%  libc.so.6  [.] malloc\n     5.00%  server  [.] on_completion\n     1.00%  liburing.so.2.3  [.] io_uring_submit\n";
        let p = parse_report(text);
        assert!((p.dso_shares["kernel"] - 0.40).abs() < 1e-9);
        assert!((p.dso_shares["libc"] - 0.10).abs() < 1e-9);
        assert!((p.dso_shares["treatment"] - 0.05).abs() < 1e-9);
        assert!((p.dso_shares["liburing"] - 0.01).abs() < 1e-9);
        assert_eq!(p.top[0].2, "tcp_v4_rcv");
        assert!(p.render().contains("kernel 40.0%"));
    }
}
