//! The environment fingerprint recorded with every result: raw costs from
//! two different fingerprints are never compared, only ratios.

use serde::{Deserialize, Serialize};
use std::process::Command;

use crate::bench::meters::meter::MeterPlan;

/// The format of the records ratchet writes (a run's `run.json`, a
/// `compare --json` document), raised when a reader of an older one would
/// misread a newer one. Records older than the field are schema 0 and read
/// the same; a record newer than this ratchet is refused by name.
pub const RECORD_SCHEMA: u32 = 1;

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Fingerprint {
    /// See [`RECORD_SCHEMA`]; 0 in records made before it.
    #[serde(default)]
    pub schema: u32,
    /// The crate's version and the git revision it was built from.
    pub ratchet_version: String,
    pub kernel: String,
    pub cpu_model: String,
    pub cores: usize,
    pub sut_core: usize,
    pub meter_event: String,
    /// `pmu`, `emulated` or `os`; empty in records older than the
    /// emulated meter (which were `pmu` or `os` by their event).
    #[serde(default)]
    pub meter_source: String,
    pub meter_reason: String,
    /// The emulator, guest kernel and meter plugin that counted, for an
    /// emulated meter: counts from different ones are never compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulator: Option<String>,
    pub liburing: String,
    pub gcc: String,
    pub go: String,
    pub governor: String,
    /// How servers were contained (see [`crate::bench::servers::cgroup`]); a
    /// `warning:` prefix when a server could escape its trial.
    #[serde(default)]
    pub containment: String,
    /// Who servers, builds and command agents ran as (see
    /// [`crate::bench::servers::privilege`]); a `warning:` prefix when they could
    /// reach ratchet itself. Empty in records older than the drop.
    #[serde(default)]
    pub privilege: String,
    pub control_source_sha256: Option<String>,
    pub treatment_source_sha256: Option<String>,
}

fn first_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

pub fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

pub fn liburing_version() -> String {
    first_line("dpkg-query", &["-W", "-f=${Version}", "liburing-dev"])
}

pub fn governor(core: usize) -> String {
    std::fs::read_to_string(format!(
        "/sys/devices/system/cpu/cpu{core}/cpufreq/scaling_governor"
    ))
    .map(|s| s.trim().to_string())
    .unwrap_or_else(|_| "none (no cpufreq)".into())
}

pub fn fingerprint(
    plan: &MeterPlan,
    control_source: Option<String>,
    treatment_source: Option<String>,
) -> Fingerprint {
    Fingerprint {
        schema: RECORD_SCHEMA,
        ratchet_version: format!(
            "{} ({})",
            env!("CARGO_PKG_VERSION"),
            env!("RATCHET_GIT_REV")
        ),
        kernel: kernel(),
        cpu_model: cpu_model(),
        cores: plan.cores,
        sut_core: plan.sut_core,
        meter_event: plan.event.name().into(),
        meter_source: plan.source.name().into(),
        meter_reason: plan.reason.clone(),
        emulator: plan.emulator.as_ref().map(|e| e.describe()),
        liburing: liburing_version(),
        gcc: first_line("gcc", &["--version"]),
        go: first_line("go", &["version"]),
        governor: governor(plan.sut_core),
        containment: {
            let c = crate::bench::servers::cgroup::containment();
            c.warning().map_or(c.description.clone(), |w| {
                format!("warning: containment: {w}")
            })
        },
        privilege: {
            let p = crate::bench::servers::privilege::privilege();
            match p.identity() {
                Some(_) => p.describe(),
                None => format!("warning: {}", p.describe()),
            }
        },
        control_source_sha256: control_source,
        treatment_source_sha256: treatment_source,
    }
}
