//! `ratchet report`: one self-contained HTML report of a run, written
//! beside its record unless told where.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

use super::recorded::Review;
use super::Cli;
use crate::review::report;

#[derive(Args)]
pub struct ReportArgs {
    /// The run id; the latest run by default.
    run: Option<String>,
    /// Where to write the report (default: results/<run>/report.html).
    #[arg(long, short)]
    output: Option<PathBuf>,
}

pub fn run(cli: &Cli, args: &ReportArgs) -> Result<()> {
    let review = Review::open(cli)?;
    let run = review.run(args.run.as_deref())?;
    let out = args
        .output
        .clone()
        .unwrap_or_else(|| run.dir.join("report.html"));
    let results = review.root.join(&review.config.paths.results);
    report::write(&review.repo, &run, &results, &out)?;
    println!("{}", out.display());
    Ok(())
}
