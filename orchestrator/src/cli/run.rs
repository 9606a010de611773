//! `ratchet run`: the optimization loop's limits and agent from the command
//! line, handed to [`crate::run`].

use anyhow::Result;
use clap::Args;

use super::agent::AgentKind;
use super::measure::MeasureArgs;
use super::Cli;
use crate::config::Config;

#[derive(Args)]
pub struct RunArgs {
    /// Agent: playbook (offline default), openai, anthropic, local (the
    /// model server of `scripts/local-model.sh`), command.
    #[arg(long, value_enum)]
    agent: Option<AgentKind>,
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

impl RunArgs {
    /// The configuration with the measurement settings and the limits given.
    fn settings(&self, config: Config) -> Result<Config> {
        let mut config = self.measure.apply(config)?;
        if let Some(n) = self.max_iterations {
            config.run.max_iterations = n;
        }
        if let Some(m) = self.max_wall_minutes {
            config.run.max_wall_minutes = m;
        }
        Ok(config)
    }
}

pub fn run(cli: &Cli, args: &RunArgs) -> Result<()> {
    let config = args.settings(Config::load(&cli.config)?)?;
    crate::run::run(
        &cli.config,
        config,
        crate::run::RunOptions {
            resume: args.resume.clone(),
            agent: args.agent.map(|a| a.name().to_string()),
            given: args.measure.given(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::super::{parse, Command};
    use super::*;

    fn run_args(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let mut all = vec!["run"];
        all.extend(args);
        parse(&all).map(|c| match c {
            Command::Run(a) => a,
            _ => unreachable!(),
        })
    }

    #[test]
    fn the_limits_override_the_configuration() {
        let a = run_args(&["--max-iterations", "3", "--max-wall-minutes", "20"]).unwrap();
        let c = a.settings(Config::default()).unwrap();
        assert_eq!((c.run.max_iterations, c.run.max_wall_minutes), (3, 20));
        let d = Config::default();
        let c = run_args(&[]).unwrap().settings(Config::default()).unwrap();
        assert_eq!(c.run.max_iterations, d.run.max_iterations);
        assert_eq!(c.run.max_wall_minutes, d.run.max_wall_minutes);
    }

    #[test]
    fn the_agent_is_one_the_factory_knows_or_left_to_the_run() {
        assert_eq!(run_args(&[]).unwrap().agent, None);
        let a = run_args(&["--agent", "local", "--resume", "r1"]).unwrap();
        assert_eq!(a.agent, Some(AgentKind::Local));
        assert_eq!(a.resume.as_deref(), Some("r1"));
        assert!(run_args(&["--agent", "gpt"]).is_err());
    }
}
