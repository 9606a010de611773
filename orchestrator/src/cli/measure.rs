//! Measurement settings given on the command line: each overrides its
//! harness.toml field for one command and is checked as that field is.

use anyhow::Result;
use clap::Args;

use crate::config::{Config, Schedule};

/// The length of a measurement, overriding harness.toml for one command.
#[derive(Args, Clone)]
pub struct TrialArgs {
    /// Samples per measurement (each measures every arm once): windows of a
    /// duet, or blocks; at least 6.
    #[arg(long)]
    pub blocks: Option<usize>,
    /// The measured window of each sample, in ms (a duet window, or a trial's).
    #[arg(long)]
    pub window_ms: Option<u64>,
    /// The unscored warm-up of each trial, in ms.
    #[arg(long)]
    pub warmup_ms: Option<u64>,
    /// What to count (overrides meter.event): auto, instructions (the
    /// hardware PMU), emulated (instructions in an emulated guest) or
    /// task-clock.
    #[arg(long, value_parser = ["auto", "instructions", "emulated", "task-clock"])]
    pub meter: Option<String>,
}

impl TrialArgs {
    pub fn apply(&self, config: &mut Config) -> Result<()> {
        if let Some(b) = self.blocks {
            config.compare.blocks = b;
        }
        if let Some(w) = self.window_ms {
            config.trial.window_ms = w;
            config.duet.window_ms = w;
        }
        if let Some(w) = self.warmup_ms {
            config.trial.warmup_ms = w;
        }
        if let Some(m) = &self.meter {
            config.meter.event = serde_json::from_value(serde_json::Value::String(m.clone()))?;
        }
        Ok(())
    }
}

/// Measurement settings that override harness.toml for one command.
#[derive(Args)]
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
    #[arg(long, value_parser = ["duet", "blocks"])]
    pub schedule: Option<String>,
}

impl MeasureArgs {
    /// Applies the overrides and re-validates, so a bad flag gets the same
    /// clear error as a bad field.
    pub fn apply(&self, mut config: Config) -> Result<Config> {
        self.trial.apply(&mut config)?;
        if let Some(c) = self.connections {
            config.load.connections = c;
        }
        if let Some(t) = self.threshold {
            config.compare.threshold = t;
        }
        if let Some(s) = &self.schedule {
            config.compare.schedule = if s == "duet" {
                Schedule::Duet
            } else {
                Schedule::Blocks
            };
        }
        let text = toml::to_string(&config)?;
        Config::parse(&text, std::path::Path::new("command-line options"))
    }
}
