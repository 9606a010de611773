//! `ratchet log`: a run's champion lineage from git, as a table or JSON.

use anyhow::Result;
use clap::Args;

use super::recorded::Review;
use super::Cli;
use crate::review::log as history;

#[derive(Args)]
pub struct LogArgs {
    /// The run id (a directory of results/); the latest run by default.
    run: Option<String>,
    /// Also list the attempts that were not kept, with their verdicts and refs.
    #[arg(long)]
    all: bool,
    /// Print the JSON document on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn run(cli: &Cli, args: &LogArgs) -> Result<()> {
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
