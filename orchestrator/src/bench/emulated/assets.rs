//! What the emulated meter needs on the host, found and checked once per
//! command: QEMU (9.2 or newer), the guest kernel, a static busybox, and the
//! meter plugin, compiled from the source built into ratchet and cached by
//! its hash.

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::EmulatorConfig;
use crate::bench::servers::build::hex;

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
fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("ratchet")
}

/// Compiles the plugin once per source; returns its path and the source's
/// hash.
fn build_plugin() -> Result<(PathBuf, String)> {
    let sha = hex(&Sha256::digest(PLUGIN_SOURCE.as_bytes()));
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
