//! A profile of a server: shares of what the meter counts by DSO group
//! (kernel, libc, liburing, the server's own binary) and the hottest
//! functions, taken in an extra window that no verdict scores. Agents see
//! the champion's; the report sets baseline and champion side by side.
//! Made by `perf record` on the host (`bench/host/perf_profile.rs`) or by the
//! emulated meter's plugin (`bench/emulated/functions.rs`).

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Profile {
    /// Share of samples (0..1) by DSO group: kernel, libc, liburing, server
    /// (the profiled server's own binary, treatment or control), other.
    pub dso_shares: BTreeMap<String, f64>,
    /// The hottest symbols: (share, dso, symbol).
    pub top: Vec<(f64, String, String)>,
    /// The regime the server was profiled in (absent in profiles recorded
    /// before profiles were rationed: those ran unrationed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regime: Option<String>,
    /// The server's context switches per connection while it was profiled:
    /// what shows that the profile is of a busy server (near 0), not of one
    /// sleeping between arrivals (0.7 and more here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_switches_per_connection: Option<f64>,
    /// What the shares are of: absent, cpu-clock samples (perf on the
    /// host); "emulated instructions" from the emulated meter's plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// The profiled window's count per connection, in `unit`, where the
    /// unit is a count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_connection: Option<f64>,
}

impl Profile {
    /// Where the profile of a run's champion is kept, under `results` (the
    /// directory of every run's records): in the run's own directory, so a
    /// run writes nowhere else. The loop writes it, the report reads it.
    pub fn stored_path(results: &Path, run_id: &str, attempt: usize) -> PathBuf {
        results
            .join(run_id)
            .join("profiles")
            .join(format!("{attempt}.json"))
    }

    /// The stored profile, when the run recorded one.
    pub fn load_stored(results: &Path, run_id: &str, attempt: usize) -> Option<Self> {
        let mut p: Self =
            crate::files::read_json(&Self::stored_path(results, run_id, attempt)).ok()?;
        // Older profiles call the server's own binary "treatment",
        // whichever server it was (the committed runs' among them).
        if let Some(share) = p.dso_shares.remove("treatment") {
            p.dso_shares.insert("server".into(), share);
        }
        Some(p)
    }

    /// Stores the profile where [`Profile::load_stored`] finds it.
    pub fn store(&self, results: &Path, run_id: &str, attempt: usize) -> Result<()> {
        let path = Self::stored_path(results, run_id, attempt);
        let dir = path.parent().expect("a file in a directory");
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        crate::files::write_atomic(&path, &serde_json::to_vec_pretty(self)?)
    }
}

/// The group a DSO's share is reported under.
pub fn group(dso: &str) -> &'static str {
    if dso.contains("kernel") || dso.starts_with("[k") {
        "kernel"
    } else if dso.starts_with("libc") || dso.contains("libc.so") {
        "libc"
    } else if dso.contains("liburing") {
        "liburing"
    } else if dso == "server" || dso == "control" {
        "server"
    } else {
        "other"
    }
}

impl Profile {
    /// What the shares are of.
    pub fn unit(&self) -> &str {
        self.unit.as_deref().unwrap_or("cpu-clock samples")
    }

    pub fn render(&self) -> String {
        let mut s = format!(
            "Regime profiled in: {}{}{}\nShare of {} by DSO: ",
            self.regime
                .as_deref()
                .unwrap_or("idle (recorded before profiles were rationed)"),
            self.context_switches_per_connection
                .map(|cs| format!(" ({cs:.3} context switches per connection while profiled)"))
                .unwrap_or_default(),
            self.per_connection
                .map(|n| format!("\n{n:.0} {} per connection while profiled", self.unit()))
                .unwrap_or_default(),
            self.unit()
        );
        s += &self
            .dso_shares
            .iter()
            .map(|(k, v)| format!("{k} {:.1}%", v * 100.0))
            .collect::<Vec<_>>()
            .join(", ");
        s += &format!("\nTop symbols (share of {}):\n", self.unit());
        for (share, dso, sym) in self.top.iter().take(20) {
            s += &format!("  {:5.2}%  {dso:<20} {sym}\n", share * 100.0);
        }
        s
    }
}
