//! Measurement settings given on the command line: each overrides its
//! harness.toml field for one command and is checked as that field is.

use anyhow::Result;
use clap::{Args, ValueEnum};

use crate::bench::config::Schedule;
use crate::bench::meaning::{self, Setting};
use crate::bench::meters::meter::MeterChoice;
use crate::bench::regime::Regime;
use crate::config::Config;
use crate::session::Session;

/// `--meter`: what to count, spelled as `meter.event` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Meter {
    Auto,
    Instructions,
    Emulated,
    TaskClock,
}

impl From<Meter> for MeterChoice {
    fn from(m: Meter) -> Self {
        match m {
            Meter::Auto => MeterChoice::Auto,
            Meter::Instructions => MeterChoice::Instructions,
            Meter::Emulated => MeterChoice::Emulated,
            Meter::TaskClock => MeterChoice::TaskClock,
        }
    }
}

/// `--schedule`: how arms share the SUT core, spelled as `compare.schedule` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ScheduleArg {
    Duet,
    Blocks,
}

impl From<ScheduleArg> for Schedule {
    fn from(s: ScheduleArg) -> Self {
        match s {
            ScheduleArg::Duet => Schedule::Duet,
            ScheduleArg::Blocks => Schedule::Blocks,
        }
    }
}

/// `--regime`: whether servers are rationed, spelled as `saturation.regime` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RegimeArg {
    Saturated,
    Idle,
}

impl From<RegimeArg> for Regime {
    fn from(r: RegimeArg) -> Self {
        match r {
            RegimeArg::Saturated => Regime::Saturated,
            RegimeArg::Idle => Regime::Idle,
        }
    }
}

/// The length of a measurement, overriding harness.toml for one command.
#[derive(Args, Clone)]
pub struct TrialArgs {
    /// Samples per measurement (each measures every arm once): windows of a
    /// duet, or blocks; at least 6. `--blocks` is its old name.
    #[arg(long, alias = "blocks")]
    pub samples: Option<usize>,
    /// The measured window of each sample, in ms (a duet window, or a trial's).
    #[arg(long)]
    pub window_ms: Option<u64>,
    /// The unscored warm-up of each trial, in ms.
    #[arg(long)]
    pub warmup_ms: Option<u64>,
    /// What to count (overrides meter.event): auto, instructions (the
    /// hardware PMU), emulated (instructions in an emulated guest) or
    /// task-clock.
    #[arg(long, value_enum)]
    pub meter: Option<Meter>,
}

impl TrialArgs {
    /// The settings given, by flag, for the measuring host to refuse where
    /// it would ignore them.
    pub fn given(&self) -> Vec<(&'static str, Setting)> {
        let mut given = Vec::new();
        if self.window_ms.is_some() {
            given.push(("--window-ms", Setting::WindowMs));
        }
        if self.warmup_ms.is_some() {
            given.push(("--warmup-ms", Setting::WarmupMs));
        }
        given
    }

    pub fn apply(&self, config: &mut Config) {
        if let Some(b) = self.samples {
            config.compare.samples = b;
        }
        if let Some(w) = self.window_ms {
            config.trial.window_ms = w;
            config.duet.window_ms = w;
        }
        if let Some(w) = self.warmup_ms {
            config.trial.warmup_ms = w;
        }
        if let Some(m) = self.meter {
            config.meter.event = m.into();
        }
    }
}

/// Measurement settings that override harness.toml for one command.
#[derive(Args, Clone)]
pub struct MeasureArgs {
    #[command(flatten)]
    pub trial: TrialArgs,
    /// Connections in flight at each server.
    #[arg(long)]
    pub connections: Option<usize>,
    /// The smallest improvement that counts (0.03 = 3%).
    #[arg(long)]
    pub threshold: Option<f64>,
    /// How arms share the SUT core: duet (every arm live in the same
    /// windows, the load moved between them in slices) or blocks (one
    /// server at a time).
    #[arg(long, value_enum)]
    pub schedule: Option<ScheduleArg>,
    /// saturated (every server rationed so it always has work: its busy
    /// cost) or idle (unrationed: servers sleep between arrivals when the
    /// generator is the bottleneck).
    #[arg(long, value_enum)]
    pub regime: Option<RegimeArg>,
}

impl MeasureArgs {
    pub fn given(&self) -> Vec<(&'static str, Setting)> {
        let mut given = self.trial.given();
        if self.connections.is_some() {
            given.push(("--connections", Setting::Connections));
        }
        if self.schedule == Some(ScheduleArg::Duet) {
            given.push(("--schedule duet", Setting::ScheduleDuet));
        }
        if self.regime == Some(RegimeArg::Idle) {
            given.push(("--regime idle", Setting::RegimeIdle));
        }
        given
    }

    /// Refuses a flag the session's measuring host would ignore.
    pub fn refuse_ignored(&self, session: &Session) -> Result<()> {
        meaning::refuse_ignored(&session.plan, &self.given())
    }

    /// Applies the overrides and re-validates, so a bad flag gets the same
    /// clear error as a bad field.
    pub fn apply(&self, mut config: Config) -> Result<Config> {
        self.trial.apply(&mut config);
        if let Some(c) = self.connections {
            config.load.connections = c;
        }
        if let Some(t) = self.threshold {
            config.compare.threshold = t;
        }
        if let Some(s) = self.schedule {
            config.compare.schedule = s.into();
        }
        if let Some(r) = self.regime {
            config.saturation.regime = r.into();
        }
        let text = toml::to_string(&config)?;
        Config::parse(&text, std::path::Path::new("command-line options"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        measure: MeasureArgs,
    }

    fn flags(args: &[&str]) -> Result<MeasureArgs, clap::Error> {
        Flags::try_parse_from(std::iter::once("x").chain(args.iter().copied())).map(|f| f.measure)
    }

    fn applied(args: &[&str]) -> Result<Config> {
        flags(args).unwrap().apply(Config::default())
    }

    /// The command line spells each choice as harness.toml does.
    #[test]
    fn the_choices_are_spelled_as_in_harness_toml() {
        for m in Meter::value_variants() {
            let name = m.to_possible_value().unwrap().get_name().to_string();
            let field = serde_json::to_value(MeterChoice::from(*m)).unwrap();
            assert_eq!(field, serde_json::Value::String(name));
        }
        for s in ScheduleArg::value_variants() {
            let name = s.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(Schedule::from(*s).name(), name);
        }
        for r in RegimeArg::value_variants() {
            let name = r.to_possible_value().unwrap().get_name().to_string();
            let field = serde_json::to_value(Regime::from(*r)).unwrap();
            assert_eq!(field, serde_json::Value::String(name));
        }
    }

    #[test]
    fn the_regime_overrides_its_field() {
        let c = applied(&["--regime", "idle"]).unwrap();
        assert_eq!(c.saturation.regime, Regime::Idle);
        assert_eq!(applied(&[]).unwrap().saturation.regime, Regime::Saturated);
    }

    #[test]
    fn meter_and_schedule_override_their_fields() {
        let c = applied(&["--meter", "task-clock", "--schedule", "blocks"]).unwrap();
        assert_eq!(c.meter.event, MeterChoice::TaskClock);
        assert_eq!(c.compare.schedule, Schedule::Blocks);
        let c = applied(&["--meter", "emulated", "--schedule", "duet"]).unwrap();
        assert_eq!(c.meter.event, MeterChoice::Emulated);
        assert_eq!(c.compare.schedule, Schedule::Duet);
    }

    #[test]
    fn an_unknown_meter_or_schedule_is_refused_by_the_parser() {
        for bad in [["--meter", "cycles"], ["--schedule", "round-robin"]] {
            let err = flags(&bad).err().expect("refused").to_string();
            assert!(err.contains("possible values"), "{err}");
        }
    }

    #[test]
    fn no_flag_leaves_the_configuration_as_it_is() {
        let c = applied(&[]).unwrap();
        let d = Config::default();
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            serde_json::to_value(&d).unwrap()
        );
    }

    #[test]
    fn a_window_sets_both_the_duet_and_the_trial_window() {
        let c = applied(&["--window-ms", "500", "--warmup-ms", "200", "--blocks", "8"]).unwrap();
        assert_eq!((c.trial.window_ms, c.duet.window_ms), (500, 500));
        assert_eq!(c.trial.warmup_ms, 200);
        assert_eq!(c.compare.samples, 8);
    }

    #[test]
    fn an_override_is_checked_as_its_field_is() {
        let err = applied(&["--blocks", "2"]).unwrap_err();
        let err = format!("{err:#}");
        assert!(
            err.contains("command-line options") && err.contains("compare.samples"),
            "{err}"
        );
    }
}
