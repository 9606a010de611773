//! The command line: the top-level parser, the commands, and the dispatch
//! that hands each command's arguments to its file (`cli/<command>.rs`),
//! which checks them, opens what it needs and hands over to the stage that
//! does the work.

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

mod ablate;
mod agent;
mod arms;
mod check;
mod compare;
mod doctor;
mod guest;
mod log;
mod measure;
mod profile;
mod propose;
mod recorded;
mod replay;
mod report;
mod run;
mod serve;
mod store;
mod sweep;

#[derive(Parser)]
#[command(
    name = "ratchet",
    version,
    about = "Benchmark-optimization loop with an honest referee"
)]
pub struct Cli {
    /// The configuration file; the repository root is its `paths.root`, from its directory.
    #[arg(long, global = true, default_value = "harness.toml")]
    config: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure servers side by side and judge each against the first.
    Compare(compare::CompareArgs),
    /// Does each server honour the contract here? Its gate, in a few samples, with no verdict.
    Check(check::CheckArgs),
    /// Run the optimization loop: propose, judge, keep or discard, repeat.
    Run(run::RunArgs),
    /// Where one server spends what the meter counts: by function, emulated.
    Profile(profile::ProfileArgs),
    /// Check that this machine can referee, and say how to fix what cannot.
    Doctor,
    /// A run's champion lineage from git: ratios, intervals, cumulative gains.
    Log(log::LogArgs),
    /// One self-contained HTML report of a run, with SVG charts.
    Report(report::ReportArgs),
    /// A read-only web server for the runs in results/; a run's page follows it live.
    Serve(serve::ServeArgs),
    /// Re-measure a recorded run's lineage on this machine, side by side.
    Replay(replay::ReplayArgs),
    /// Revert each kept change from the final champion and measure what it contributes.
    Ablate(ablate::AblateArgs),
    /// Cost, throughput and p99 latency against connections in flight, per arm.
    Sweep(sweep::SweepArgs),
    /// Ask an agent for proposals on the current treatment and build them, measuring nothing.
    Propose(propose::ProposeArgs),
    /// Inside an emulated guest: measure the plan the host wrote (internal).
    #[command(hide = true)]
    Guest(guest::GuestArgs),
}

/// Runs the command the user asked for.
pub fn dispatch(cli: &Cli) -> Result<()> {
    match &cli.command {
        Command::Compare(args) => compare::run(cli, args),
        Command::Check(args) => check::run(cli, args),
        Command::Run(args) => run::run(cli, args),
        Command::Profile(args) => profile::run(cli, args),
        Command::Doctor => doctor::run(cli),
        Command::Log(args) => log::run(cli, args),
        Command::Report(args) => report::run(cli, args),
        Command::Serve(args) => serve::run(cli, args),
        Command::Replay(args) => replay::run(cli, args),
        Command::Ablate(args) => ablate::run(cli, args),
        Command::Sweep(args) => sweep::run(cli, args),
        Command::Propose(args) => propose::run(cli, args),
        Command::Guest(args) => guest::run(args),
    }
}

/// The command a command line parses to, as the tests of each command's
/// checks see it.
#[cfg(test)]
fn parse(args: &[&str]) -> Result<Command, clap::Error> {
    Cli::try_parse_from(std::iter::once("ratchet").chain(args.iter().copied())).map(|c| c.command)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_config_flag_defaults_and_goes_anywhere() {
        let cli = Cli::try_parse_from(["ratchet", "doctor"]).unwrap();
        assert_eq!(cli.config, PathBuf::from("harness.toml"));
        let cli = Cli::try_parse_from(["ratchet", "doctor", "--config", "x/h.toml"]).unwrap();
        assert_eq!(cli.config, PathBuf::from("x/h.toml"));
    }

    #[test]
    fn the_guest_command_is_hidden_but_parses() {
        let help = Cli::command().render_help().to_string();
        assert!(
            help.contains("compare") && !help.contains("guest"),
            "{help}"
        );
        assert!(matches!(
            parse(&["guest", "plan.json"]),
            Ok(Command::Guest(_))
        ));
        assert!(parse(&["guest"]).is_err());
    }

    #[test]
    fn an_unknown_command_is_refused() {
        assert!(parse(&["compair", "control", "treatment"]).is_err());
        assert!(parse(&[]).is_err());
    }
}
