//! `ratchet check`: does each server honour the contract here? The arms
//! measured as compare would, in `--samples` samples, each arm's gate and
//! costs shown and no ratio judged (no interval has a stated coverage below
//! 6 samples). Fails when a gate does.

use anyhow::Result;
use clap::Args;

use super::measure::MeasureArgs;
use super::{arms, Cli};
use crate::bench::host::endurance;
use crate::bench::samples::Samples;
use crate::config::Config;
use crate::referee::{format, report};
use crate::review::progress;
use crate::session::Session;

#[derive(Args)]
pub struct CheckArgs {
    /// Arms, as for compare.
    #[arg(required = true, num_args = 1..)]
    arms: Vec<String>,
    /// `--samples` (default 2) counts samples of every arm: too few for an
    /// interval, enough to see the gate.
    #[command(flatten)]
    measure: MeasureArgs,
    /// Print the JSON document on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

impl CheckArgs {
    /// A check's own sample count: it judges no interval, so it may take
    /// fewer than the 6 a comparison needs.
    fn samples(&self) -> Result<usize> {
        let n = self.measure.trial.samples.unwrap_or(2);
        if !(1..=100).contains(&n) {
            anyhow::bail!("check --samples must be between 1 and 100, got {n}");
        }
        Ok(n)
    }

    /// The configuration with every override but the sample count, which
    /// is the check's own and not `compare.samples`.
    fn config(&self, loaded: Config) -> Result<Config> {
        let mut measure = self.measure.clone();
        measure.trial.samples = None;
        measure.apply(loaded)
    }
}

pub fn run(cli: &Cli, args: &CheckArgs) -> Result<()> {
    let n = args.samples()?;
    let config = args.config(Config::load(&cli.config)?)?;
    arms::check(&args.arms)?;
    let session = Session::open(&cli.config, config, "check")?;
    args.measure.refuse_ignored(&session)?;
    let arms = arms::prepare(&session, &args.arms)?;
    let mut samples = Samples::new(arms.len());
    progress::measure(
        &session,
        &session.trial_settings(),
        &arms,
        n,
        1,
        &mut samples,
        "",
    )?;
    let mut report = report::report(
        &arms.iter().map(|a| a.label.clone()).collect::<Vec<_>>(),
        &samples,
        session.config().compare.threshold,
        &session.plan,
        arms::fingerprint(&session, &arms),
    );
    report.comparisons.clear();
    for (summary, arm) in report.arms.iter_mut().zip(&arms) {
        summary.endurance = endurance::run(&arm.command, &session.plan, &session.trial_settings())?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", format::compare_table(&report));
        println!(
            "\ngate check: {n} samples of every arm; no interval or verdict below 6 samples (use compare)"
        );
        report
            .arms
            .iter()
            .for_each(|a| print!("{}", format::endurance_line(a).unwrap_or_default()));
    }
    if let Some(a) = report.arms.iter().find(|a| !a.gate.passed) {
        anyhow::bail!("the gate failed for {}", a.arm);
    }
    match report
        .arms
        .iter()
        .find(|a| a.endurance.as_ref().is_some_and(|e| !e.gate.passed))
    {
        Some(a) => anyhow::bail!("the endurance run failed its gate for {}", a.arm),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{parse, Command};
    use super::CheckArgs;
    use crate::config::Config;

    fn check(args: &[&str]) -> Result<CheckArgs, clap::Error> {
        let mut all = vec!["check"];
        all.extend(args);
        parse(&all).map(|c| match c {
            Command::Check(a) => a,
            _ => unreachable!(),
        })
    }

    #[test]
    fn samples_default_to_two_and_stay_between_1_and_100() {
        let n = |args: &[&str]| check(args).unwrap().samples();
        assert_eq!(n(&["control"]).unwrap(), 2);
        assert_eq!(n(&["control", "--samples", "1"]).unwrap(), 1);
        assert_eq!(n(&["control", "--samples", "100"]).unwrap(), 100);
        // The old name is the same flag.
        assert_eq!(n(&["control", "--blocks", "3"]).unwrap(), 3);
        for bad in ["0", "101"] {
            let err = n(&["control", "--samples", bad]).unwrap_err().to_string();
            assert!(err.contains("between 1 and 100"), "{err}");
        }
        assert!(check(&[]).is_err());
    }

    #[test]
    fn a_few_samples_are_the_checks_own_not_the_comparisons() {
        let a = check(&["control", "--samples", "2", "--window-ms", "500"]).unwrap();
        let c = a.config(Config::default()).unwrap();
        assert_eq!(c.compare.samples, Config::default().compare.samples);
        assert_eq!(c.trial.window_ms, 500);
    }
}
