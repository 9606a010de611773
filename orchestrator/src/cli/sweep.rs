//! `ratchet sweep`: cost, throughput and p99 latency of each arm against
//! connections in flight, recorded with a chart.

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;

use super::measure::{MeasureArgs, TrialArgs};
use super::store::store;
use super::{arms, Cli};
use crate::bench::meaning::{self, Setting};
use crate::config::Config;
use crate::files;
use crate::review::sweep;
use crate::session::{self, Session};

#[derive(Args)]
pub struct SweepArgs {
    /// Arms, as for compare; ratios are to the first.
    #[arg(required = true, num_args = 1..)]
    arms: Vec<String>,
    /// Connections in flight at each level, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "16,64,256,1024")]
    connections: Vec<usize>,
    #[command(flatten)]
    trial: TrialArgs,
    /// Where to write the chart (default: results/sweeps/<time>.svg).
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Seed for the order of arms inside blocks.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the JSON document on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

impl SweepArgs {
    /// Every level checked as `load.connections` would be; the last one's
    /// configuration opens the session, and the sweep sets each level itself.
    fn settings(&self, base: Config) -> Result<Config> {
        let mut config = None;
        for &level in &self.connections {
            let measure = MeasureArgs {
                trial: self.trial.clone(),
                connections: Some(level),
                threshold: None,
                schedule: None,
                regime: None,
            };
            config = Some(measure.apply(base.clone())?);
        }
        config.context("--connections names no level")
    }
}

pub fn run(cli: &Cli, args: &SweepArgs) -> Result<()> {
    let config = args.settings(Config::load(&cli.config)?)?;
    arms::check(&args.arms)?;
    let results = session::root_of(&cli.config, &config)?.join(&config.paths.results);
    let session = Session::open(&cli.config, config, "sweep")?;
    let mut given = args.trial.given();
    given.push(("--connections", Setting::Connections));
    meaning::refuse_ignored(&session.plan, &given)?;
    let arms = arms::prepare(&session, &args.arms)?;
    let env = arms::fingerprint(&session, &arms);
    let record = sweep::sweep(&session, &arms, &args.connections, args.seed, env)?;
    let path = store(&results.join("sweeps"), &record)?;
    let svg = args
        .svg
        .clone()
        .unwrap_or_else(|| path.with_extension("svg"));
    files::write_atomic(&svg, sweep::chart(&record).as_bytes())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&record)?);
    } else {
        print!("{}", sweep::render(&record));
        println!(
            "\nrecorded in {}; chart in {}",
            path.display(),
            svg.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{parse, Command};
    use super::*;

    fn sweep(args: &[&str]) -> Result<SweepArgs, clap::Error> {
        let mut all = vec!["sweep"];
        all.extend(args);
        parse(&all).map(|c| match c {
            Command::Sweep(a) => a,
            _ => unreachable!(),
        })
    }

    #[test]
    fn the_levels_default_to_four_and_split_on_commas() {
        assert_eq!(
            sweep(&["control"]).unwrap().connections,
            [16, 64, 256, 1024]
        );
        let a = sweep(&["control", "--connections", "8,32"]).unwrap();
        assert_eq!(a.connections, [8, 32]);
        assert!(sweep(&["control", "--connections", "8,x"]).is_err());
        assert!(sweep(&[]).is_err());
    }

    #[test]
    fn every_level_is_checked_and_the_last_opens_the_session() {
        let a = sweep(&["control", "--connections", "8,32", "--window-ms", "500"]).unwrap();
        let c = a.settings(Config::default()).unwrap();
        assert_eq!((c.load.connections, c.trial.window_ms), (32, 500));
        let a = sweep(&["control", "--connections", "0,32"]).unwrap();
        let err = format!("{:#}", a.settings(Config::default()).unwrap_err());
        assert!(err.contains("load.connections"), "{err}");
    }

    #[test]
    fn sweep_takes_no_schedule_or_threshold() {
        assert!(sweep(&["control", "--schedule", "blocks"]).is_err());
        assert!(sweep(&["control", "--threshold", "0.05"]).is_err());
    }
}
