//! `ratchet compare`: servers measured side by side, each judged against
//! the first.

use anyhow::Result;
use clap::Args;

use super::measure::MeasureArgs;
use super::{arms, Cli};
use crate::bench::samples::Samples;
use crate::config::Config;
use crate::referee::{format, report};
use crate::review::progress;
use crate::session::Session;

#[derive(Args)]
pub struct CompareArgs {
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

pub fn run(cli: &Cli, args: &CompareArgs) -> Result<()> {
    let config = args.measure.apply(Config::load(&cli.config)?)?;
    arms::check(&args.arms)?;
    let session = Session::open(&cli.config, config, "compare")?;
    args.measure.refuse_ignored(&session)?;
    let arms = arms::prepare(&session, &args.arms)?;
    let settings = session.trial_settings();
    let sample_count = session.config().compare.samples;
    let mut samples = Samples::new(arms.len());
    progress::measure(
        &session,
        &settings,
        &arms,
        sample_count,
        args.seed,
        &mut samples,
        "",
    )?;
    if let Some(unscored) = samples.unscored_short_of_an_interval() {
        eprintln!(
            "ratchet: {unscored} of {sample_count} samples were not scored (an arm ran out of work in them), \
             too few left for an interval: measuring {sample_count} more, once, as the loop does"
        );
        progress::measure(
            &session,
            &settings,
            &arms,
            sample_count,
            args.seed.wrapping_add(1),
            &mut samples,
            "extending: ",
        )?;
    }
    let env = arms::fingerprint(&session, &arms);
    let labels: Vec<String> = arms.iter().map(|a| a.label.clone()).collect();
    let report = report::report(
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

#[cfg(test)]
mod tests {
    use super::super::{parse, Command};

    fn compare(args: &[&str]) -> Result<super::CompareArgs, clap::Error> {
        let mut all = vec!["compare"];
        all.extend(args);
        parse(&all).map(|c| match c {
            Command::Compare(a) => a,
            _ => unreachable!(),
        })
    }

    #[test]
    fn compare_needs_a_baseline_and_one_more_arm() {
        assert!(compare(&["control"]).is_err());
        let a = compare(&["control", "treatment", "cmd:./srv --fast"]).unwrap();
        assert_eq!(a.arms, ["control", "treatment", "cmd:./srv --fast"]);
        assert_eq!((a.seed, a.json), (1, false));
    }
}
