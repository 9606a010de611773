//! What every measuring command sets up first: the configuration, the SUT
//! core and the load cores, ratchet's own pinning away from the SUT core, the
//! core lock, and the meter plan. It sits above the bench and the
//! configuration because it is where the two meet: the bench is handed the
//! sections it reads, never the whole file.

pub mod workspace;

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::bench::host::lock::CoreLock;
use crate::bench::host::trial::TrialSettings;
use crate::bench::meters::meter::MeterPlan;
use crate::config::Config;
use crate::referee::judge::Rules;
use workspace::Workspace;

pub struct Session {
    pub workspace: Workspace,
    pub plan: MeterPlan,
    pub load_cores: Vec<usize>,
    _lock: CoreLock,
}

/// The repository root a configuration file belongs to: `paths.root`
/// from the file's directory (by default the directory itself), so a
/// configuration kept beside its server (`examples/x/harness.toml`) still
/// names every other path from the repository's root.
pub fn root_of(config_path: &Path, config: &Config) -> Result<PathBuf> {
    let abs = config_path
        .canonicalize()
        .with_context(|| format!("cannot find configuration {}", config_path.display()))?;
    let dir = abs.parent().map(Path::to_path_buf).unwrap_or(abs);
    dir.join(&config.paths.root)
        .canonicalize()
        .with_context(|| {
            format!(
                "{}: paths.root {:?} is not a directory",
                config_path.display(),
                config.paths.root
            )
        })
}

/// Pins the calling thread, and so every thread and process it starts later,
/// to `cores`.
fn pin_self(cores: &[usize]) {
    if cores.is_empty() {
        return;
    }
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cores {
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
}

impl Session {
    pub fn open(config_path: &Path, config: Config, holder: &str) -> Result<Self> {
        let root = root_of(config_path, &config)?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let sut = config
            .sut_core(cores)
            .with_context(|| format!("{}", config_path.display()))?;
        let load_cores: Vec<usize> = (0..cores).filter(|&c| c != sut || cores == 1).collect();
        if cores == 1 {
            tracing::warn!("this machine has one core: server and load generator share it");
        }
        pin_self(&load_cores);
        let lock = CoreLock::acquire(sut, holder)?;
        let mut plan = MeterPlan::detect(config.meter.event, &config.emulator, sut, cores)?;
        plan.drift = config.meter.drift_of(plan.source);
        if plan.event == crate::bench::meters::meter::MeterEvent::TaskClock {
            tracing::info!("meter: {}", plan.reason);
        }
        Ok(Self {
            workspace: Workspace::new(root, config),
            plan,
            load_cores,
            _lock: lock,
        })
    }

    pub fn config(&self) -> &Config {
        &self.workspace.config
    }

    /// The keep rule's and the smoke run's settings: the loop and replay
    /// judge with the same ones.
    pub fn rules(&self) -> Rules {
        let config = self.config();
        Rules {
            threshold: config.compare.threshold,
            suspicious_gain: config.run.suspicious_gain,
            max_p99_factor: config.compare.max_p99_factor,
            smoke_window: Duration::from_millis(config.run.smoke_window_ms),
        }
    }

    pub fn trial_settings(&self) -> TrialSettings {
        self.config().trial_settings(self.load_cores.clone())
    }
}
