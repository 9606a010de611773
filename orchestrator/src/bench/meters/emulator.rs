//! The emulated meter's instruments and settings: what it needs on the
//! host, found and checked once per command (QEMU 9.2 or newer, the guest
//! kernel, a static busybox, and the meter plugin, compiled from the source
//! built into ratchet and cached by its hash), and `[emulator]`, the guests
//! it counts in. The guests themselves are the emulated measuring host
//! (`bench/emulated/`).

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::check::range;

/// The plugin's source: part of ratchet, so a result names the plugin that
/// counted it by this source's hash.
pub const PLUGIN_SOURCE: &str = include_str!("plugin.c");

#[derive(Clone, Debug)]
pub struct Emulator {
    pub qemu: PathBuf,
    /// `qemu-system-x86_64 --version`'s first line.
    pub qemu_version: String,
    pub kernel: PathBuf,
    /// The Debian package the kernel came from, where setup recorded it.
    pub kernel_package: String,
    pub busybox: PathBuf,
    pub plugin: PathBuf,
    pub plugin_sha256: String,
    pub config: EmulatorConfig,
}

impl Emulator {
    /// Everything the emulated meter needs, or an error naming what is
    /// missing and how to get it.
    pub fn locate(config: &EmulatorConfig) -> Result<Self> {
        let qemu = which(&config.qemu).with_context(|| {
            format!(
                "emulator.qemu: {} not found: run scripts/setup.sh (QEMU from bookworm-backports)",
                config.qemu.display()
            )
        })?;
        let qemu_version = version_line(&qemu)?;
        check_qemu_version(&qemu_version)
            .with_context(|| format!("emulator.qemu: {}", qemu.display()))?;
        if !config.kernel.is_file() {
            bail!(
                "emulator.kernel: {} does not exist: run scripts/setup.sh (it unpacks Debian's kernel image there)",
                config.kernel.display()
            );
        }
        let kernel_package =
            std::fs::read_to_string(config.kernel.with_file_name("kernel-package"))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown package".into());
        if !config.busybox.is_file() {
            bail!(
                "emulator.busybox: {} does not exist: apt-get install busybox-static",
                config.busybox.display()
            );
        }
        let (plugin, plugin_sha256) = build_plugin()?;
        Ok(Self {
            qemu,
            qemu_version,
            kernel: config.kernel.clone(),
            kernel_package,
            busybox: config.busybox.clone(),
            plugin,
            plugin_sha256,
            config: config.clone(),
        })
    }

    /// One line for fingerprints and `doctor`.
    pub fn describe(&self) -> String {
        format!(
            "{}; guest kernel {} ({}); meter plugin sha256 {}",
            self.qemu_version,
            self.kernel_package,
            self.kernel.display(),
            &self.plugin_sha256[..16]
        )
    }
}

/// `name` as given when it has a slash, else found on PATH.
fn which(name: &Path) -> Result<PathBuf> {
    if name.components().count() > 1 {
        return name
            .is_file()
            .then(|| name.to_path_buf())
            .with_context(|| format!("{} does not exist", name.display()));
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .with_context(|| format!("{} is not on PATH", name.display()))
}

fn version_line(qemu: &Path) -> Result<String> {
    let out = Command::new(qemu)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version", qemu.display()))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string())
}

/// QEMU 9.2 brought plugin API v4, which the plugin is built for; 7.2
/// (Debian 12's own) also hangs a 2-vCPU guest under icount.
pub fn check_qemu_version(line: &str) -> Result<()> {
    let version = line
        .split_whitespace()
        .skip_while(|w| *w != "version")
        .nth(1)
        .with_context(|| format!("cannot read a version from {line:?}"))?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) < (9, 2) {
        bail!(
            "QEMU {version} is too old: the meter needs 9.2 or newer (Debian: bookworm-backports)"
        );
    }
    Ok(())
}

/// Where built plugins are cached: beside the kernel when that is writable
/// is not assumed; ratchet's own cache directory is.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("ratchet")
}

/// Compiles the plugin once per source; returns its path and the source's
/// hash.
fn build_plugin() -> Result<(PathBuf, String)> {
    let sha = format!("{:x}", Sha256::digest(PLUGIN_SOURCE.as_bytes()));
    let dir = cache_dir().join("meter-plugin");
    let so = dir.join(format!("meter-{}.so", &sha[..16]));
    if so.is_file() {
        return Ok((so, sha));
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let src = dir.join(format!("meter-{}.c", &sha[..16]));
    std::fs::write(&src, PLUGIN_SOURCE).with_context(|| format!("writing {}", src.display()))?;
    let tmp = so.with_extension("so.tmp");
    let out = Command::new("cc")
        .args(["-O2", "-shared", "-fPIC", "-fvisibility=hidden"])
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&tmp)
        .arg(&src)
        .output()
        .context("running cc to build the meter plugin (apt-get install gcc)")?;
    if !out.status.success() {
        bail!(
            "building the meter plugin {} failed: {}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::rename(&tmp, &so)?;
    Ok((so, sha))
}

/// `[emulator]` in harness.toml. Times marked "guest" are guest time: one
/// guest second is 10^9 emulated instructions, about 10 s on the host.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmulatorConfig {
    /// QEMU 9.2 or newer (7.2 hangs a 2-vCPU guest under icount).
    pub qemu: PathBuf,
    /// An x86_64 kernel image (scripts/setup.sh unpacks Debian's 6.12 from
    /// bookworm-backports).
    pub kernel: PathBuf,
    /// A static busybox: the guest's shell and tools.
    pub busybox: PathBuf,
    /// What a server serves while it is counted: live clients beside it,
    /// or backlogs queued while it was stopped (see [`WorkloadRegime`]).
    pub regime: WorkloadRegime,
    /// Guest vCPUs: the last holds the server, the others the generator;
    /// 0: the regime's own (2 for backlogs, [`LIVE_VCPUS`] live).
    pub vcpus: usize,
    pub memory_mb: u64,
    /// Live: connections each trial completes before its window, unscored
    /// (the server's pools and the kernel's caches fill)...
    pub warmup_connections: u64,
    /// ...and in its window, scored.
    pub window_connections: u64,
    /// Live: after the scored window, an unscored one of this many
    /// connections profiled by code address (0: none; profiling slows the
    /// emulator, not the guest).
    pub profile_connections: u64,
    /// Live: stop the scheduler tick on the server's vCPU while the server
    /// runs alone there (`nohz_full`). The guest's tick keeps the host's
    /// time while the vCPU's speed follows the host's load, so the ticks a
    /// connection pays move with the host; this takes them out, and moves
    /// that vCPU's RCU callbacks to the clients' vCPUs, where they are not
    /// counted.
    pub nohz_full: bool,
    /// Connections queued for a stopped server before each batch (see
    /// `bench/emulated/batch.rs`); within the server's listen backlog.
    pub backlog: usize,
    /// Scored batches per trial.
    pub batches: usize,
    /// Unscored batches at the start of every trial.
    pub warmup_batches: usize,
    /// A batch the server has not served by then is over, and what it has
    /// not answered timed out (guest ms).
    pub batch_timeout_ms: u64,
    /// Guests run at once; 0: one per host core. Emulated counts do not
    /// depend on the host's load, so guests share the host freely.
    pub guests: usize,
    /// A guest that has not started ratchet by then did not boot (host s).
    pub boot_timeout_s: u64,
    /// A guest still running then is stopped as hung (host s).
    pub timeout_s: u64,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        Self {
            qemu: "qemu-system-x86_64".into(),
            kernel: "/var/cache/ratchet/emulator/vmlinuz".into(),
            busybox: "/bin/busybox".into(),
            regime: WorkloadRegime::Auto,
            vcpus: 0,
            warmup_connections: 1024,
            window_connections: 3072,
            profile_connections: 0,
            nohz_full: false,
            memory_mb: 512,
            backlog: 256,
            batches: 4,
            warmup_batches: 1,
            batch_timeout_ms: 5000,
            guests: 0,
            boot_timeout_s: 120,
            timeout_s: 1200,
        }
    }
}

/// What a server serves in the emulated guest while it is counted.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadRegime {
    /// The regime that agrees with a real client: backlog, until the live
    /// regime is shown to agree better (docs/emulated-meter.md, "The live
    /// regime").
    #[default]
    Auto,
    /// Closed-loop clients on their own vCPUs hold `load.connections` in
    /// flight while the server runs alone on an isolated vCPU; the cost is
    /// that vCPU's instructions, as `perf stat -C` counts a core
    /// (`bench/emulated/live.rs`).
    Live,
    /// Clients queued while the server is stopped, served alone; the cost
    /// is the whole guest's instructions (`bench/emulated/batch.rs`).
    Backlog,
}

/// Guest vCPUs in the live regime: the server's, and five for clients,
/// which spend three to four times the server's instructions on a
/// connection (docs/emulated-meter.md, "The live regime").
pub const LIVE_VCPUS: usize = 6;

impl WorkloadRegime {
    /// The name `harness.toml` gives it.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadRegime::Auto => "auto",
            WorkloadRegime::Live => "live",
            WorkloadRegime::Backlog => "backlog",
        }
    }

    /// `auto` resolved.
    pub fn resolved(self) -> Self {
        match self {
            WorkloadRegime::Auto => WorkloadRegime::Backlog,
            r => r,
        }
    }
}

impl EmulatorConfig {
    /// The regime this configuration measures in, `auto` resolved.
    pub fn workload(&self) -> WorkloadRegime {
        self.regime.resolved()
    }

    /// Guest vCPUs, the regime's own where not configured.
    pub fn guest_vcpus(&self) -> usize {
        match (self.vcpus, self.workload()) {
            (0, WorkloadRegime::Live) => LIVE_VCPUS,
            (0, _) => 2,
            (n, _) => n,
        }
    }

    /// The server's vCPU: the last.
    pub fn sut_vcpu(&self) -> usize {
        self.guest_vcpus() - 1
    }

    /// The bounds QEMU, the guest kernel and the generator set.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.vcpus != 0 {
            range("emulator.vcpus", self.vcpus as f64, 2.0, 64.0)?;
        }
        range(
            "emulator.warmup_connections",
            self.warmup_connections as f64,
            0.0,
            10_000_000.0,
        )?;
        range(
            "emulator.window_connections",
            self.window_connections as f64,
            100.0,
            10_000_000.0,
        )?;
        range("emulator.memory_mb", self.memory_mb as f64, 256.0, 65536.0)?;
        range("emulator.backlog", self.backlog as f64, 1.0, 4096.0)?;
        range("emulator.batches", self.batches as f64, 1.0, 1000.0)?;
        range(
            "emulator.warmup_batches",
            self.warmup_batches as f64,
            0.0,
            1000.0,
        )?;
        range(
            "emulator.batch_timeout_ms",
            self.batch_timeout_ms as f64,
            10.0,
            600_000.0,
        )?;
        range(
            "emulator.boot_timeout_s",
            self.boot_timeout_s as f64,
            1.0,
            86_400.0,
        )?;
        range("emulator.timeout_s", self.timeout_s as f64, 1.0, 86_400.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_before_9_2_is_refused_with_the_reason() {
        assert!(check_qemu_version("QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2)").is_ok());
        assert!(check_qemu_version("QEMU emulator version 9.2.0").is_ok());
        let old = check_qemu_version("QEMU emulator version 7.2.19 (Debian 1:7.2+dfsg-7)")
            .unwrap_err()
            .to_string();
        assert!(old.contains("7.2.19") && old.contains("9.2"), "{old}");
        assert!(check_qemu_version("no version here").is_err());
    }
}
