//! What the commands on a recorded run share: opening the repository and
//! the run, and, for replay and ablate, re-measuring it with its own
//! settings on this machine and keeping the record.

use crate::bench::meters::emulator::WorkloadRegime;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

use super::measure::MeasureArgs;
use super::store::store;
use super::Cli;
use crate::config::Config;
use crate::record::recorded::RecordedRun;
use crate::session::{self, Session};

/// What the review commands read: the repository a configuration belongs
/// to, and the configuration (which names its `results/` and knowledge base).
pub struct Review {
    pub repo: git2::Repository,
    pub config: Config,
    pub root: PathBuf,
}

impl Review {
    pub fn open(cli: &Cli) -> Result<Self> {
        let config = Config::load(&cli.config)?;
        let root = session::root_of(&cli.config, &config)?;
        let repo = git2::Repository::open(&root).map_err(|e| {
            anyhow::anyhow!(
                "{} is not a git repository: {}",
                root.display(),
                e.message()
            )
        })?;
        Ok(Self { repo, config, root })
    }

    /// The run `id` in `results/`, or the latest.
    pub fn run(&self, id: Option<&str>) -> Result<RecordedRun> {
        RecordedRun::open(&self.root.join(&self.config.paths.results), id)
    }
}

/// What every command that re-measures a recorded run takes.
#[derive(Args)]
pub struct RecordedArgs {
    /// The run id (a directory of results/).
    pub run: String,
    /// Seed for the order of arms inside blocks.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the JSON document on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Overrides of the recorded run's settings (blocks default to the run's own).
    #[command(flatten)]
    pub measure: MeasureArgs,
}

/// The settings a recorded run was measured with, on this machine: its
/// measurement sections (`recorded`, with the `blocks` it settled on), the
/// current configuration's machine, paths and build, then the command-line
/// overrides.
fn recorded_settings(
    current: Config,
    recorded: &Config,
    sample_count: usize,
    measure: &MeasureArgs,
) -> Result<Config> {
    let mut config = recorded.clone();
    // Runs recorded before the live regime say nothing of it: they served
    // backlogs.
    if config.emulator.regime == WorkloadRegime::Auto {
        config.emulator.regime = WorkloadRegime::Backlog;
    }
    config.machine = current.machine;
    config.paths = current.paths;
    config.build = current.build;
    config.compare.samples = sample_count;
    measure.apply(config)
}

/// Opens a recorded run, re-measures it with `measure`, stores the record
/// under `results/<run>/<kind>/` and prints it.
pub fn remeasure<T: serde::Serialize>(
    cli: &Cli,
    args: &RecordedArgs,
    kind: &str,
    measure: impl FnOnce(&Session, &git2::Repository, &RecordedRun) -> Result<T>,
    render: impl FnOnce(&T) -> String,
) -> Result<()> {
    let review = Review::open(cli)?;
    let run = review.run(Some(&args.run))?;
    let config = recorded_settings(
        review.config,
        &run.run.config,
        run.run.sample_count,
        &args.measure,
    )?;
    let session = Session::open(&cli.config, config, kind)?;
    args.measure.refuse_ignored(&session)?;
    let record = measure(&session, &review.repo, &run)?;
    let path = store(&run.dir.join(kind), &record)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&record)?);
    } else {
        print!("{}", render(&record));
        println!("\nrecorded in {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{parse, Command};
    use super::*;

    fn measure(args: &[&str]) -> MeasureArgs {
        let mut all = vec!["replay", "r1"];
        all.extend(args);
        match parse(&all).unwrap() {
            Command::Replay(a) => a.recorded.measure,
            _ => unreachable!(),
        }
    }

    /// A run recorded elsewhere: its own threshold, window and machine.
    fn recorded() -> Config {
        let mut c = Config::default();
        c.compare.threshold = 0.05;
        c.trial.window_ms = 700;
        c.paths.results = "elsewhere".into();
        c.build.timeout_s = 600;
        c
    }

    #[test]
    fn the_run_measures_as_recorded_on_this_machine() {
        let here = Config::default();
        let c = recorded_settings(here.clone(), &recorded(), 18, &measure(&[])).unwrap();
        assert_eq!(c.compare.threshold, 0.05);
        assert_eq!(c.trial.window_ms, 700);
        assert_eq!(c.compare.samples, 18);
        assert_eq!(c.paths.results, here.paths.results);
        assert_eq!(c.build.timeout_s, here.build.timeout_s);
    }

    #[test]
    fn a_run_is_remeasured_in_the_regime_it_was_measured_in() {
        let mut live_here = Config::default();
        live_here.emulator.regime = WorkloadRegime::Live;
        let mut run = recorded();
        run.emulator.regime = WorkloadRegime::Live;
        let c = recorded_settings(Config::default(), &run, 18, &measure(&[])).unwrap();
        assert_eq!(c.emulator.regime, WorkloadRegime::Live);
        // Recorded before the live regime: it served backlogs, whatever
        // `auto` means on this machine today.
        let c = recorded_settings(live_here, &recorded(), 18, &measure(&[])).unwrap();
        assert_eq!(c.emulator.regime, WorkloadRegime::Backlog);
    }

    #[test]
    fn the_command_line_overrides_the_recorded_settings() {
        let flags = measure(&["--blocks", "8", "--threshold", "0.02"]);
        let c = recorded_settings(Config::default(), &recorded(), 18, &flags).unwrap();
        assert_eq!((c.compare.samples, c.compare.threshold), (8, 0.02));
        assert_eq!(c.trial.window_ms, 700);
    }
}
