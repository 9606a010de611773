//! The bench's sections of `harness.toml` that its hosts read: the load,
//! one trial's timing, the duet and the build. They live in the stage that
//! reads them, so the bench compiles without knowing the whole file;
//! `crate::config` composes them. The contract's and the gate's sections
//! live lower, beside what reads them (`bench/load/`). The schedule is here
//! too: it is a setting (`compare.schedule`) before it is a way of running
//! arms.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::bench::load::contract::ContractConfig;
use crate::bench::load::gate::GateConfig;
use crate::bench::regime::SaturationConfig;
use crate::check::range;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoadConfig {
    pub connections: usize,
    pub timeout_ms: u64,
}

impl Default for LoadConfig {
    fn default() -> Self {
        Self {
            connections: 256,
            timeout_ms: 2000,
        }
    }
}

impl LoadConfig {
    pub fn validate(&self) -> Result<()> {
        range("load.connections", self.connections as f64, 1.0, 65536.0)?;
        range("load.timeout_ms", self.timeout_ms as f64, 1.0, 600_000.0)
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrialConfig {
    pub warmup_ms: u64,
    pub window_ms: u64,
    pub ready_timeout_ms: u64,
    pub stop_grace_ms: u64,
}

impl Default for TrialConfig {
    fn default() -> Self {
        Self {
            warmup_ms: 1000,
            window_ms: 3000,
            ready_timeout_ms: 5000,
            stop_grace_ms: 1000,
        }
    }
}

impl TrialConfig {
    pub fn validate(&self) -> Result<()> {
        range("trial.window_ms", self.window_ms as f64, 50.0, 600_000.0)?;
        range("trial.warmup_ms", self.warmup_ms as f64, 0.0, 600_000.0)?;
        range(
            "trial.ready_timeout_ms",
            self.ready_timeout_ms as f64,
            10.0,
            600_000.0,
        )
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DuetConfig {
    /// One sample per arm per window.
    pub window_ms: u64,
    /// How long one arm holds the whole load before the next takes it.
    pub slice_ms: u64,
    /// Windows between restarts of every server.
    pub windows_per_epoch: usize,
    pub load: DuetLoad,
}

/// How a duet shares the generator's load between its live arms.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum DuetLoad {
    /// One arm holds the whole load at a time, in short slices.
    Slices,
    /// Every arm holds its share of the clients all the time.
    Shared,
}

impl Default for DuetConfig {
    fn default() -> Self {
        Self {
            window_ms: 1000,
            slice_ms: 2,
            windows_per_epoch: 6,
            load: DuetLoad::Slices,
        }
    }
}

impl DuetConfig {
    pub fn validate(&self) -> Result<()> {
        range("duet.window_ms", self.window_ms as f64, 50.0, 600_000.0)?;
        range("duet.slice_ms", self.slice_ms as f64, 1.0, 10_000.0)?;
        if self.slice_ms > self.window_ms {
            bail!(
                "duet.slice_ms ({}) must not be longer than duet.window_ms ({})",
                self.slice_ms,
                self.window_ms
            );
        }
        range(
            "duet.windows_per_epoch",
            self.windows_per_epoch as f64,
            1.0,
            1000.0,
        )
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BuildConfig {
    pub timeout_s: u64,
}

impl Default for BuildConfig {
    fn default() -> Self {
        Self { timeout_s: 120 }
    }
}

impl BuildConfig {
    pub fn validate(&self) -> Result<()> {
        range("build.timeout_s", self.timeout_s as f64, 1.0, 86_400.0)
    }
}

/// The sections a trial reads, handed over by the configuration: the
/// bench sees these and nothing of the loop's or the agents' settings.
#[derive(Clone, Debug, Default)]
pub struct TrialSections {
    pub contract: ContractConfig,
    pub load: LoadConfig,
    pub trial: TrialConfig,
    pub gate: GateConfig,
    pub schedule: Schedule,
    pub duet: DuetConfig,
    pub saturation: SaturationConfig,
}

/// How the arms of a measurement share the SUT core over time.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Schedule {
    /// Every arm a live server in the same windows, the load moved between
    /// them in short slices ([`crate::bench::host::duet`]).
    #[default]
    Duet,
    /// One fresh server at a time: blocks of sequential trials.
    Blocks,
}

impl Schedule {
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Duet => "duet",
            Schedule::Blocks => "blocks",
        }
    }
}
