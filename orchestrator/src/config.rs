//! `harness.toml`: the referee's and the loop's settings. Every section and
//! field has a documented default, unknown fields are refused (a typo must not
//! silently fall back to a default), and every value is range-checked with a
//! message naming the file, the field and the expected form.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use crate::agent::config::AgentsConfig;
use crate::agent::search::SearchConfig;
use crate::agent::PlaybookSettings;
use crate::bench::config::{BuildConfig, DuetConfig, LoadConfig, TrialConfig, TrialSections};
use crate::bench::host::trial::TrialSettings;
use crate::bench::load::contract::ContractConfig;
use crate::bench::load::gate::GateConfig;
use crate::bench::meters::emulator::EmulatorConfig;
use crate::bench::meters::meter::MeterConfig;
use crate::bench::regime::SaturationConfig;
use crate::bench::servers::arm::ArmSpec;
use crate::bench::servers::target::TargetConfig;
use crate::check::range;
use crate::glob::Globs;
use crate::referee::config::CompareConfig;

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub target: TargetConfig,
    pub contract: ContractConfig,
    pub machine: MachineConfig,
    pub load: LoadConfig,
    pub trial: TrialConfig,
    pub gate: GateConfig,
    pub meter: MeterConfig,
    pub compare: CompareConfig,
    pub duet: DuetConfig,
    pub saturation: SaturationConfig,
    pub emulator: EmulatorConfig,
    pub build: BuildConfig,
    pub paths: PathsConfig,
    pub run: RunConfig,
    pub search: SearchConfig,
    pub agents: AgentsConfig,
}

/// Which core the server under test is pinned to: `"last"` or an index.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum CoreChoice {
    Named(String),
    Index(usize),
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MachineConfig {
    pub sut_core: CoreChoice,
}

impl Default for MachineConfig {
    fn default() -> Self {
        Self {
            sut_core: CoreChoice::Named("last".into()),
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PathsConfig {
    /// The repository's root, from this file's directory; every other
    /// path is from the root.
    pub root: PathBuf,
    pub treatment: PathBuf,
    pub control: PathBuf,
    pub results: PathBuf,
    pub knowledge_base: PathBuf,
}

impl Default for PathsConfig {
    fn default() -> Self {
        Self {
            root: ".".into(),
            treatment: "treatment".into(),
            control: "control".into(),
            results: "results".into(),
            knowledge_base: "knowledge-base".into(),
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    pub agent: String,
    /// The frozen reference measured beside every attempt: "control" (the
    /// Go server in paths.control, at the run's base commit), "none", or a
    /// fixed arm, `rev:<git-rev>` or `cmd:<command line>`.
    pub control: String,
    pub allowed_paths: Vec<String>,
    pub max_iterations: usize,
    pub max_wall_minutes: u64,
    pub max_consecutive_failures: usize,
    pub max_cost_usd: f64,
    pub smoke_window_ms: u64,
    /// Read as `max_blocks` too, its name until 2026-12-05.
    #[serde(alias = "max_blocks")]
    pub max_samples: usize,
    pub drift_warning: f64,
    pub suspicious_gain: f64,
    pub profile: bool,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            agent: "playbook".into(),
            control: "control".into(),
            allowed_paths: vec!["treatment/*.c".into(), "treatment/*.h".into()],
            max_iterations: 30,
            max_wall_minutes: 120,
            max_consecutive_failures: 12,
            max_cost_usd: 5.0,
            smoke_window_ms: 500,
            max_samples: 80,
            drift_warning: 0.05,
            suspicious_gain: 2.0,
            profile: true,
        }
    }
}

impl MachineConfig {
    fn validate(&self) -> Result<()> {
        if let CoreChoice::Named(name) = &self.sut_core {
            if name != "last" {
                bail!("machine.sut_core must be \"last\" or a core index, got {name:?}");
            }
        }
        Ok(())
    }
}

impl RunConfig {
    fn validate(&self) -> Result<()> {
        range("run.max_samples", self.max_samples as f64, 1.0, 1000.0)?;
        range("run.suspicious_gain", self.suspicious_gain, 1.0, 1e6)?;
        range(
            "run.smoke_window_ms",
            self.smoke_window_ms as f64,
            50.0,
            600_000.0,
        )?;
        Globs::new("run.allowed_paths", &self.allowed_paths)?;
        let fixed = matches!(
            ArmSpec::parse(&self.control),
            Ok(ArmSpec::Control | ArmSpec::Rev(_) | ArmSpec::Cmd(_))
        );
        if !fixed && self.has_control() {
            bail!(
                "run.control must be \"control\", \"none\", rev:<git-rev> or cmd:<command line> \
                 (a reference that cannot move during the run), got {:?}",
                self.control
            );
        }
        Ok(())
    }

    /// False for `run.control = "none"`: no reference beside the attempts.
    pub fn has_control(&self) -> bool {
        self.control != "none"
    }
}

impl Config {
    /// Loads and validates `path`. A missing file is an error: the harness
    /// never guesses where the user meant its configuration to be.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read configuration {}", path.display()))?;
        Self::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let config: Config = toml::from_str(text)
            .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.to_string().trim_end()))?;
        config
            .validate()
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(config)
    }

    /// Every section checks its own fields where it is defined; the
    /// sections the loop owns are checked here.
    fn validate(&self) -> Result<()> {
        self.target.validate()?;
        self.contract.validate()?;
        self.machine.validate()?;
        self.load.validate()?;
        self.trial.validate()?;
        self.gate.validate()?;
        self.emulator.validate()?;
        self.compare.validate()?;
        self.duet.validate()?;
        self.saturation.validate()?;
        self.build.validate()?;
        self.meter.validate()?;
        self.run.validate()?;
        self.search.validate()
    }

    /// What a trial reads, and nothing else: see [`TrialSections`].
    pub fn trial_settings(&self, load_cores: Vec<usize>) -> TrialSettings {
        let sections = TrialSections {
            contract: self.contract.clone(),
            load: self.load.clone(),
            trial: self.trial.clone(),
            gate: self.gate.clone(),
            schedule: self.compare.schedule,
            duet: self.duet.clone(),
            saturation: self.saturation.clone(),
        };
        TrialSettings::from_sections(&sections, load_cores)
    }

    pub fn playbook_settings(&self) -> PlaybookSettings {
        PlaybookSettings {
            dir: self.paths.knowledge_base.join("playbook"),
            search: self.search.clone(),
            threshold: self.compare.threshold,
        }
    }

    /// Resolves `machine.sut_core` against the cores this machine has.
    pub fn sut_core(&self, cores: usize) -> Result<usize> {
        match &self.machine.sut_core {
            CoreChoice::Index(i) if *i < cores => Ok(*i),
            CoreChoice::Index(i) => bail!(
                "machine.sut_core = {i}, but this machine has cores 0..{} only",
                cores - 1
            ),
            CoreChoice::Named(_) => Ok(cores - 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(text, Path::new("harness.toml"))
    }

    #[test]
    fn empty_file_gives_documented_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c.load.connections, 256);
        assert_eq!(c.compare.threshold, 0.03);
        assert_eq!(c.gate.max_failure_rate, 0.0001);
        assert_eq!(c.trial.warmup_ms, 1000);
        assert_eq!(c.trial.window_ms, 3000);
        assert_eq!(c.compare.samples, 12);
        assert_eq!(c.compare.schedule, crate::bench::config::Schedule::Duet);
        assert!(c.contract.response.ends_with("\r\n\r\nok"));
    }

    #[test]
    fn shipped_harness_toml_parses_to_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../harness.toml");
        // Every field, since its header promises that each one shown is the
        // built-in default: a default changed in one place only fails here.
        let shipped = serde_json::to_value(Config::load(&path).unwrap()).unwrap();
        let default = serde_json::to_value(Config::default()).unwrap();
        assert_eq!(shipped, default);
    }

    /// Every field of the configuration appears in the shipped
    /// harness.toml, which is the configuration reference: a field added to
    /// the code and not there fails here. Fields without a default value
    /// (an agent's optional settings) need not be shown.
    #[test]
    fn every_field_is_shown_in_the_shipped_harness_toml() {
        fn missing(
            d: &serde_json::Value,
            shown: Option<&toml::Value>,
            at: &str,
            out: &mut Vec<String>,
        ) {
            match d {
                serde_json::Value::Object(fields) => {
                    for (k, v) in fields {
                        let path = if at.is_empty() {
                            k.clone()
                        } else {
                            format!("{at}.{k}")
                        };
                        missing(v, shown.and_then(|t| t.get(k)), &path, out);
                    }
                }
                serde_json::Value::Null => {}
                _ if shown.is_none() => out.push(at.to_string()),
                _ => {}
            }
        }
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../harness.toml");
        let shown: toml::Value = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut out = Vec::new();
        missing(
            &serde_json::to_value(Config::default()).unwrap(),
            Some(&shown),
            "",
            &mut out,
        );
        assert!(out.is_empty(), "harness.toml does not show {out:?}");
    }

    #[test]
    fn unknown_field_is_named() {
        let err = parse("[load]\nconections = 5\n").unwrap_err().to_string();
        assert!(
            err.contains("harness.toml") && err.contains("conections"),
            "{err}"
        );
    }

    #[test]
    fn wrong_type_names_the_field() {
        let err = parse("[compare]\nblocks = \"five\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("blocks"), "{err}");
    }

    #[test]
    fn out_of_range_value_names_field_and_range() {
        let err = parse("[gate]\nmax_failure_rate = 2.0\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("gate.max_failure_rate") && err.contains("2"),
            "{err}"
        );
    }

    #[test]
    fn the_control_is_fixed_or_none() {
        for ok in ["control", "none", "rev:v1", "cmd:./frozen --fast"] {
            let c = parse(&format!("[run]\ncontrol = {ok:?}\n")).unwrap();
            assert_eq!(c.run.control, ok);
        }
        for moving in ["treatment", "playbook:a", "champion:x", "contrl"] {
            let err = parse(&format!("[run]\ncontrol = {moving:?}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("run.control") && err.contains(moving), "{err}");
        }
    }

    #[test]
    fn sut_core_choices() {
        assert_eq!(parse("").unwrap().sut_core(2).unwrap(), 1);
        assert_eq!(
            parse("[machine]\nsut_core = 0\n")
                .unwrap()
                .sut_core(2)
                .unwrap(),
            0
        );
        assert!(parse("[machine]\nsut_core = 7\n")
            .unwrap()
            .sut_core(2)
            .is_err());
        assert!(parse("[machine]\nsut_core = \"first\"\n").is_err());
    }
}
