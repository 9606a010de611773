//! The command line: arguments, their checks, and one function per command
//! that opens what it needs and hands over to the stage that does the work.

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use std::path::{Path, PathBuf};

use crate::bench::samples::Samples;
use crate::bench::session::{self, Session};
use crate::bench::{arm, environment};
use crate::clock;
use crate::config::Config;
use crate::files;
use crate::record::{lineage, recorded};
use crate::referee::{compare, format};
use crate::review::{ablate, log as history, progress, replay, report, sweep};
use crate::{doctor, run};

mod measure;
mod propose;
use measure::{MeasureArgs, TrialArgs};

#[derive(Parser)]
#[command(
    name = "ratchet",
    version,
    about = "Benchmark-optimization loop with an honest referee"
)]
pub struct Cli {
    /// The configuration file; its directory is the repository root.
    #[arg(long, global = true, default_value = "harness.toml")]
    config: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure servers side by side and judge each against the first.
    Compare(CompareArgs),
    /// Does each server honour the contract here? Its gate, in a few samples, with no verdict.
    Check(CheckArgs),
    /// Run the optimization loop: propose, judge, keep or discard, repeat.
    Run(RunArgs),
    /// Check that this machine can referee, and say how to fix what cannot.
    Doctor,
    /// A run's champion lineage from git: ratios, intervals, cumulative gains.
    Log(LogArgs),
    /// One self-contained HTML report of a run, with SVG charts.
    Report(ReportArgs),
    /// Re-measure a recorded run's lineage on this machine, side by side.
    Replay(ReplayArgs),
    /// Revert each kept change from the final champion and measure what it contributes.
    Ablate(AblateArgs),
    /// Cost, throughput and p99 latency against connections in flight, per arm.
    Sweep(SweepArgs),
    /// Ask an agent for proposals on the current treatment and build them, measuring nothing.
    Propose(propose::ProposeArgs),
    /// Inside an emulated guest: measure the plan the host wrote (internal).
    #[command(hide = true)]
    Guest { plan: PathBuf },
}

#[derive(Args)]
struct SweepArgs {
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

#[derive(Args)]
struct AblateArgs {
    #[command(flatten)]
    recorded: RecordedArgs,
    /// Leave out the pairs (each pair of kept changes reverted together).
    #[arg(long)]
    no_pairs: bool,
}

/// What every command that re-measures a recorded run takes.
#[derive(Args)]
struct RecordedArgs {
    /// The run id (a directory of results/).
    run: String,
    /// Seed for the order of arms inside blocks.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the JSON document on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Overrides of the recorded run's settings (blocks default to the run's own).
    #[command(flatten)]
    measure: MeasureArgs,
}

#[derive(Args)]
struct ReplayArgs {
    #[command(flatten)]
    recorded: RecordedArgs,
    /// Also re-apply every recorded attempt in order and decide it again.
    #[arg(long)]
    decisions: bool,
    /// With --decisions: re-decide only these attempts (e.g. 6,7), each
    /// against the champion it was recorded against.
    #[arg(
        long,
        value_delimiter = ',',
        requires = "decisions",
        value_name = "N,..."
    )]
    attempts: Vec<usize>,
}

#[derive(Args)]
struct ReportArgs {
    /// The run id; the latest run by default.
    run: Option<String>,
    /// Where to write the report (default: results/<run>/report.html).
    #[arg(long, short)]
    output: Option<PathBuf>,
}

#[derive(Args)]
struct LogArgs {
    /// The run id (a directory of results/); the latest run by default.
    run: Option<String>,
    /// Also list the attempts that were not kept, with their verdicts and refs.
    #[arg(long)]
    all: bool,
    /// Print the JSON document on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RunArgs {
    /// Agent: playbook (offline default), openai, anthropic, local (the
    /// model server of `scripts/local-model.sh`), command.
    #[arg(long)]
    agent: Option<String>,
    /// Continue a stopped or interrupted run.
    #[arg(long, value_name = "RUN_ID")]
    resume: Option<String>,
    /// Stop after this many attempts in all (overrides run.max_iterations).
    #[arg(long)]
    max_iterations: Option<usize>,
    /// Start no new attempt after this many minutes (overrides run.max_wall_minutes).
    #[arg(long)]
    max_wall_minutes: Option<u64>,
    #[command(flatten)]
    measure: MeasureArgs,
}

#[derive(Args)]
struct CompareArgs {
    /// Arms: control, treatment, rev:<git-rev>, champion:<run-id>, cmd:<command line>. The first is the baseline.
    #[arg(required = true, num_args = 2..)]
    arms: Vec<String>,
    #[command(flatten)]
    measure: MeasureArgs,
    /// Seed for the order of arms inside blocks.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the JSON document on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct CheckArgs {
    /// Arms, as for compare.
    #[arg(required = true, num_args = 1..)]
    arms: Vec<String>,
    /// Samples of every arm: too few for an interval, enough to see the gate.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=100))]
    samples: u64,
    #[command(flatten)]
    measure: MeasureArgs,
    /// Print the JSON document on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

/// Checks every arm spec, so a typo in the last is named before the first
/// is built.
fn parse_arms(specs: &[String]) -> Result<()> {
    for a in specs {
        arm::ArmSpec::parse(a)?;
    }
    Ok(())
}

/// Builds every arm; a `champion:<run>` arm is the final tree of that
/// recorded run's lineage, from git or rebuilt from its journal.
fn prepare_arms(session: &Session, specs: &[String]) -> Result<Vec<arm::Arm>> {
    let workspace = &session.workspace;
    specs
        .iter()
        .map(|label| match arm::ArmSpec::parse(label)? {
            arm::ArmSpec::Champion(id) => {
                let repo = git2::Repository::open(&workspace.root)?;
                let results = workspace.root.join(&workspace.config.paths.results);
                let run = recorded::RecordedRun::open(&results, Some(&id))?;
                let (_, trees) = lineage::with_trees(&repo, &run)?;
                let tree = *trees.last().expect("a lineage has its base");
                workspace.prepare_tree(&repo, tree, label)
            }
            _ => workspace.prepare(label),
        })
        .collect()
}

/// The environment fingerprint, with the sources of the control and the
/// treatment when they are among `arms`.
fn fingerprint_of(session: &Session, arms: &[arm::Arm]) -> environment::Fingerprint {
    let hash_of = |label: &str| {
        arms.iter()
            .find(|a| a.label == label)
            .and_then(|a| a.source_hash.clone())
    };
    environment::fingerprint(&session.plan, hash_of("control"), hash_of("treatment"))
}

fn compare(cli: &Cli, args: &CompareArgs) -> Result<()> {
    let config = args.measure.apply(Config::load(&cli.config)?)?;
    parse_arms(&args.arms)?;
    let session = Session::open(&cli.config, config, "compare")?;
    let arms = prepare_arms(&session, &args.arms)?;
    let settings = session.trial_settings();
    let blocks = session.config().compare.blocks;
    let mut samples = Samples::new(arms.len());
    progress::measure(
        &session,
        &settings,
        &arms,
        blocks,
        args.seed,
        &mut samples,
        "",
    )?;
    let env = fingerprint_of(&session, &arms);
    let labels: Vec<String> = arms.iter().map(|a| a.label.clone()).collect();
    let report = compare::report(
        &labels,
        &samples,
        session.config().compare.threshold,
        &session.plan,
        env,
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", format::compare_table(&report));
    }
    Ok(())
}

/// A gate check: the arms measured as compare would, in `--samples`
/// samples, each arm's gate and costs shown and no ratio judged (no
/// interval has a stated coverage below 6 samples). Fails when a gate does.
fn check(cli: &Cli, args: &CheckArgs) -> Result<()> {
    if args.measure.trial.blocks.is_some() {
        anyhow::bail!("check takes --samples, not --blocks: it judges no interval");
    }
    let config = args.measure.apply(Config::load(&cli.config)?)?;
    parse_arms(&args.arms)?;
    let session = Session::open(&cli.config, config, "check")?;
    let arms = prepare_arms(&session, &args.arms)?;
    let mut samples = Samples::new(arms.len());
    progress::measure(
        &session,
        &session.trial_settings(),
        &arms,
        args.samples as usize,
        1,
        &mut samples,
        "",
    )?;
    let mut report = compare::report(
        &arms.iter().map(|a| a.label.clone()).collect::<Vec<_>>(),
        &samples,
        session.config().compare.threshold,
        &session.plan,
        fingerprint_of(&session, &arms),
    );
    report.comparisons.clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", format::compare_table(&report));
        println!(
            "\ngate check: {} samples of every arm; no interval or verdict below 6 samples (use compare)",
            args.samples
        );
    }
    match report.arms.iter().find(|a| !a.gate.passed) {
        Some(a) => anyhow::bail!("the gate failed for {}", a.arm),
        None => Ok(()),
    }
}

fn run_loop(cli: &Cli, args: &RunArgs) -> Result<()> {
    let mut config = args.measure.apply(Config::load(&cli.config)?)?;
    if let Some(n) = args.max_iterations {
        config.run.max_iterations = n;
    }
    if let Some(m) = args.max_wall_minutes {
        config.run.max_wall_minutes = m;
    }
    run::run(
        &cli.config,
        config,
        run::RunOptions {
            resume: args.resume.clone(),
            agent: args.agent.clone(),
        },
    )
}

fn doctor(cli: &Cli) -> Result<()> {
    let config = Config::load(&cli.config)?;
    let checks = doctor::run(&config);
    for c in &checks {
        println!(
            "{} {:<38} {}",
            if c.ok { "OK  " } else { "WARN" },
            c.name,
            c.detail
        );
    }
    Ok(())
}

/// What the review commands read: the repository a configuration belongs
/// to, and the configuration (which names its `results/` and knowledge base).
struct Review {
    repo: git2::Repository,
    config: Config,
    root: PathBuf,
}

impl Review {
    fn open(cli: &Cli) -> Result<Self> {
        let config = Config::load(&cli.config)?;
        let root = session::root_of(&cli.config)?;
        let repo = git2::Repository::open(&root).map_err(|e| {
            anyhow::anyhow!(
                "{} is not a git repository: {}",
                root.display(),
                e.message()
            )
        })?;
        Ok(Self { repo, config, root })
    }

    fn run(&self, id: Option<&str>) -> Result<recorded::RecordedRun> {
        recorded::RecordedRun::open(&self.root.join(&self.config.paths.results), id)
    }
}

fn log(cli: &Cli, args: &LogArgs) -> Result<()> {
    let review = Review::open(cli)?;
    let run = review.run(args.run.as_deref())?;
    let h = history::read(&review.repo, &run, args.all)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&h)?);
    } else {
        print!("{}", history::render(&h));
    }
    Ok(())
}

fn report(cli: &Cli, args: &ReportArgs) -> Result<()> {
    let review = Review::open(cli)?;
    let run = review.run(args.run.as_deref())?;
    let out = args
        .output
        .clone()
        .unwrap_or_else(|| run.dir.join("report.html"));
    let kb = review.root.join(&review.config.paths.knowledge_base);
    report::write(&review.repo, &run, &kb, &out)?;
    println!("{}", out.display());
    Ok(())
}

/// The settings a recorded run was measured with, on this machine: its
/// measurement sections, the current configuration's machine and paths,
/// then the command-line overrides.
fn recorded_settings(
    current: Config,
    run: &recorded::RecordedRun,
    measure: &MeasureArgs,
) -> Result<Config> {
    let mut config = run.run.config.clone();
    config.machine = current.machine;
    config.paths = current.paths;
    config.build = current.build;
    config.compare.blocks = run.run.blocks;
    measure.apply(config)
}

/// Writes a command's record into `dir`, named by the time; returns its path.
fn store(dir: &Path, value: &impl serde::Serialize) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let stamp = clock::now_utc().replace(['-', ':'], "");
    let path = dir.join(format!("{stamp}.json"));
    files::write_atomic(&path, &serde_json::to_vec_pretty(value)?)?;
    Ok(path)
}

/// Opens a recorded run, re-measures it with `measure`, stores the record
/// under `results/<run>/<kind>/` and prints it.
fn remeasure<T: serde::Serialize>(
    cli: &Cli,
    args: &RecordedArgs,
    kind: &str,
    measure: impl FnOnce(&Session, &git2::Repository, &recorded::RecordedRun) -> Result<T>,
    render: impl FnOnce(&T) -> String,
) -> Result<()> {
    let review = Review::open(cli)?;
    let run = review.run(Some(&args.run))?;
    let config = recorded_settings(review.config, &run, &args.measure)?;
    let session = Session::open(&cli.config, config, kind)?;
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

fn replay(cli: &Cli, args: &ReplayArgs) -> Result<()> {
    let r = &args.recorded;
    remeasure(
        cli,
        r,
        "replays",
        |session, repo, run| {
            replay::Replayer {
                session,
                repo,
                run,
                seed: r.seed,
            }
            .replay(args.decisions, &args.attempts)
        },
        replay::render,
    )
}

fn ablate(cli: &Cli, args: &AblateArgs) -> Result<()> {
    let r = &args.recorded;
    remeasure(
        cli,
        r,
        "ablations",
        |session, repo, run| {
            ablate::Ablation {
                session,
                repo,
                run,
                seed: r.seed,
                pairs: !args.no_pairs,
            }
            .run()
        },
        ablate::render,
    )
}

fn sweep(cli: &Cli, args: &SweepArgs) -> Result<()> {
    let base = Config::load(&cli.config)?;
    // Every level is checked as `load.connections` would be; the last one's
    // configuration opens the session, and the sweep sets each level itself.
    let mut config = None;
    for &level in &args.connections {
        let measure = MeasureArgs {
            trial: args.trial.clone(),
            connections: Some(level),
            threshold: None,
            schedule: None,
        };
        config = Some(measure.apply(base.clone())?);
    }
    let config = config.context("--connections names no level")?;
    parse_arms(&args.arms)?;
    let results = session::root_of(&cli.config)?.join(&config.paths.results);
    let session = Session::open(&cli.config, config, "sweep")?;
    let arms = prepare_arms(&session, &args.arms)?;
    let env = fingerprint_of(&session, &arms);
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

/// Runs the command the user asked for.
pub fn dispatch(cli: &Cli) -> Result<()> {
    match &cli.command {
        Command::Compare(args) => compare(cli, args),
        Command::Check(args) => check(cli, args),
        Command::Run(args) => run_loop(cli, args),
        Command::Doctor => doctor(cli),
        Command::Log(args) => log(cli, args),
        Command::Report(args) => report(cli, args),
        Command::Replay(args) => replay(cli, args),
        Command::Ablate(args) => ablate(cli, args),
        Command::Sweep(args) => sweep(cli, args),
        Command::Propose(args) => propose::propose(&cli.config, args),
        Command::Guest { plan } => crate::bench::emulated::guest::run(plan),
    }
}
