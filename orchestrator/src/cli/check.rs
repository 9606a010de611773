//! `ratchet check`: does each server honour the contract here? The arms
//! measured as compare would, in `--samples` samples, each arm's gate and
//! costs shown and no ratio judged (no interval has a stated coverage below
//! 6 samples). Fails when a gate does.

use anyhow::Result;
use clap::Args;

use super::measure::MeasureArgs;
use super::{arms, Cli};
use crate::bench::samples::Samples;
use crate::bench::session::Session;
use crate::config::Config;
use crate::referee::{compare, format};
use crate::review::progress;

#[derive(Args)]
pub struct CheckArgs {
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

impl CheckArgs {
    /// A check judges no interval, so it takes no `--blocks`.
    fn refuse_blocks(&self) -> Result<()> {
        if self.measure.trial.blocks.is_some() {
            anyhow::bail!("check takes --samples, not --blocks: it judges no interval");
        }
        Ok(())
    }
}

pub fn run(cli: &Cli, args: &CheckArgs) -> Result<()> {
    args.refuse_blocks()?;
    let config = args.measure.apply(Config::load(&cli.config)?)?;
    arms::check(&args.arms)?;
    let session = Session::open(&cli.config, config, "check")?;
    let arms = arms::prepare(&session, &args.arms)?;
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
        arms::fingerprint(&session, &arms),
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

#[cfg(test)]
mod tests {
    use super::super::{parse, Command};
    use super::CheckArgs;

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
        assert_eq!(check(&["control"]).unwrap().samples, 2);
        assert_eq!(check(&["control", "--samples", "1"]).unwrap().samples, 1);
        assert_eq!(
            check(&["control", "--samples", "100"]).unwrap().samples,
            100
        );
        assert!(check(&["control", "--samples", "0"]).is_err());
        assert!(check(&["control", "--samples", "101"]).is_err());
        assert!(check(&[]).is_err());
    }

    #[test]
    fn blocks_are_refused_before_anything_is_read() {
        let a = check(&["control", "--blocks", "6"]).unwrap();
        let err = a.refuse_blocks().unwrap_err().to_string();
        assert_eq!(
            err,
            "check takes --samples, not --blocks: it judges no interval"
        );
        check(&["control", "--window-ms", "500"])
            .unwrap()
            .refuse_blocks()
            .unwrap();
    }
}
