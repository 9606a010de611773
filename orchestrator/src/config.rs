//! `harness.toml`: the referee's and the loop's settings. Every section and
//! field has a documented default, unknown fields are refused (a typo must not
//! silently fall back to a default), and every value is range-checked with a
//! message naming the file, the field and the expected form.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use crate::agent::config::AgentsConfig;
use crate::bench::contract::Contract;
use crate::bench::emulated::EmulatorConfig;
use crate::bench::meter::MeterConfig;
use crate::bench::ration::SaturationConfig;

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
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
    pub search: crate::agent::search::SearchConfig,
    pub agents: AgentsConfig,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContractConfig {
    pub request: String,
    pub response: String,
}

impl Default for ContractConfig {
    fn default() -> Self {
        Self {
            request: "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".into(),
            response: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".into(),
        }
    }
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

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct GateConfig {
    pub max_failure_rate: f64,
    pub min_completed: u64,
}

impl Default for GateConfig {
    fn default() -> Self {
        Self {
            max_failure_rate: 0.0001,
            min_completed: 1000,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompareConfig {
    pub schedule: Schedule,
    /// Samples per measurement: windows (duet) or blocks (blocks).
    pub blocks: usize,
    pub threshold: f64,
    /// A keep whose p99 latency is more than this many times the champion's,
    /// measured side by side, is rejected: CPU bought with waiting (timers,
    /// batching) is not a saving.
    pub max_p99_factor: f64,
}

impl Default for CompareConfig {
    fn default() -> Self {
        Self {
            schedule: Schedule::Duet,
            blocks: 12,
            threshold: 0.03,
            max_p99_factor: 2.0,
        }
    }
}

/// How the arms of a measurement share the SUT core over time.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Schedule {
    /// Every arm a live server in the same windows, the load moved between
    /// them in short slices ([`crate::bench::duet`]).
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

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PathsConfig {
    pub treatment: PathBuf,
    pub control: PathBuf,
    pub results: PathBuf,
    pub knowledge_base: PathBuf,
    pub lessons: PathBuf,
}

impl Default for PathsConfig {
    fn default() -> Self {
        Self {
            treatment: "treatment".into(),
            control: "control".into(),
            results: "results".into(),
            knowledge_base: "knowledge-base".into(),
            lessons: "lessons.md".into(),
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    pub agent: String,
    pub allowed_paths: Vec<String>,
    pub max_iterations: usize,
    pub max_wall_minutes: u64,
    pub max_consecutive_failures: usize,
    pub max_cost_usd: f64,
    pub smoke_window_ms: u64,
    pub max_blocks: usize,
    pub drift_warning: f64,
    pub suspicious_gain: f64,
    pub profile: bool,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            agent: "playbook".into(),
            allowed_paths: vec!["treatment/*.c".into(), "treatment/*.h".into()],
            max_iterations: 30,
            max_wall_minutes: 120,
            max_consecutive_failures: 12,
            max_cost_usd: 5.0,
            smoke_window_ms: 500,
            max_blocks: 80,
            drift_warning: 0.05,
            suspicious_gain: 2.0,
            profile: true,
        }
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

    fn validate(&self) -> Result<()> {
        let c = &self.contract;
        if c.request.is_empty() {
            bail!("contract.request must not be empty");
        }
        if c.response.is_empty() {
            bail!("contract.response must not be empty");
        }
        if let CoreChoice::Named(name) = &self.machine.sut_core {
            if name != "last" {
                bail!("machine.sut_core must be \"last\" or a core index, got {name:?}");
            }
        }
        range(
            "load.connections",
            self.load.connections as f64,
            1.0,
            65536.0,
        )?;
        range(
            "load.timeout_ms",
            self.load.timeout_ms as f64,
            1.0,
            600_000.0,
        )?;
        range(
            "trial.window_ms",
            self.trial.window_ms as f64,
            50.0,
            600_000.0,
        )?;
        range(
            "trial.warmup_ms",
            self.trial.warmup_ms as f64,
            0.0,
            600_000.0,
        )?;
        range(
            "trial.ready_timeout_ms",
            self.trial.ready_timeout_ms as f64,
            10.0,
            600_000.0,
        )?;
        range(
            "gate.max_failure_rate",
            self.gate.max_failure_rate,
            0.0,
            1.0,
        )?;
        validate_emulator(&self.emulator)?;
        // Fewer samples give no interval with a stated coverage (see stats).
        range("compare.blocks", self.compare.blocks as f64, 6.0, 1000.0)?;
        range(
            "duet.window_ms",
            self.duet.window_ms as f64,
            50.0,
            600_000.0,
        )?;
        range("duet.slice_ms", self.duet.slice_ms as f64, 1.0, 10_000.0)?;
        if self.duet.slice_ms > self.duet.window_ms {
            bail!(
                "duet.slice_ms ({}) must not be longer than duet.window_ms ({})",
                self.duet.slice_ms,
                self.duet.window_ms
            );
        }
        range(
            "duet.windows_per_epoch",
            self.duet.windows_per_epoch as f64,
            1.0,
            1000.0,
        )?;
        range("compare.threshold", self.compare.threshold, 0.0, 0.99)?;
        range(
            "saturation.generator_target",
            self.saturation.generator_target,
            0.05,
            0.95,
        )?;
        range(
            "saturation.min_allotment_used",
            self.saturation.min_allotment_used,
            0.0,
            1.0,
        )?;
        range(
            "saturation.max_context_switches",
            self.saturation.max_context_switches,
            0.0,
            1000.0,
        )?;
        range(
            "saturation.probe_ms",
            self.saturation.probe_ms as f64,
            100.0,
            60_000.0,
        )?;
        range(
            "compare.max_p99_factor",
            self.compare.max_p99_factor,
            1.0,
            1000.0,
        )?;
        range(
            "build.timeout_s",
            self.build.timeout_s as f64,
            1.0,
            86_400.0,
        )?;
        range("run.max_blocks", self.run.max_blocks as f64, 1.0, 1000.0)?;
        range(
            "meter.task_clock_drift",
            self.meter.task_clock_drift,
            0.0,
            0.5,
        )?;
        range("run.suspicious_gain", self.run.suspicious_gain, 1.0, 1e6)?;
        range(
            "run.smoke_window_ms",
            self.run.smoke_window_ms as f64,
            50.0,
            600_000.0,
        )?;
        self.search.validate()?;
        if self.run.allowed_paths.is_empty() {
            bail!(
                "run.allowed_paths must name at least one pattern, for example \"treatment/*.c\""
            );
        }
        Ok(())
    }

    pub fn contract(&self) -> Contract {
        Contract {
            request: self.contract.request.as_bytes().to_vec(),
            response: self.contract.response.as_bytes().to_vec(),
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

/// `[emulator]`: the bounds QEMU, the guest kernel and the generator set.
fn validate_emulator(e: &EmulatorConfig) -> Result<()> {
    range("emulator.vcpus", e.vcpus as f64, 2.0, 64.0)?;
    range("emulator.memory_mb", e.memory_mb as f64, 256.0, 65536.0)?;
    range("emulator.backlog", e.backlog as f64, 1.0, 4096.0)?;
    range("emulator.batches", e.batches as f64, 1.0, 1000.0)?;
    range(
        "emulator.warmup_batches",
        e.warmup_batches as f64,
        0.0,
        1000.0,
    )?;
    range(
        "emulator.batch_timeout_ms",
        e.batch_timeout_ms as f64,
        10.0,
        600_000.0,
    )?;
    range(
        "emulator.boot_timeout_s",
        e.boot_timeout_s as f64,
        1.0,
        86_400.0,
    )?;
    range("emulator.timeout_s", e.timeout_s as f64, 1.0, 86_400.0)
}

fn range(field: &str, value: f64, lo: f64, hi: f64) -> Result<()> {
    if !(lo..=hi).contains(&value) || value.is_nan() {
        bail!("{field} must be between {lo} and {hi}, got {value}");
    }
    Ok(())
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
        assert_eq!(c.compare.blocks, 12);
        assert_eq!(c.compare.schedule, Schedule::Duet);
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
