//! `ratchet profile`: where an arm spends what the meter counts, in an
//! extra window that no verdict scores; under the emulated meter, in
//! emulated instructions by function on the server's own vCPU.

use anyhow::Result;
use clap::Args;

use super::measure::MeasureArgs;
use super::{arms, Cli};
use crate::bench::profiling;
use crate::config::Config;
use crate::session::Session;

#[derive(Args)]
pub struct ProfileArgs {
    /// The arm, as for compare.
    arm: String,
    #[command(flatten)]
    measure: MeasureArgs,
    /// Seed for the emulated guest's window lengths.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the JSON document on stdout instead of the text.
    #[arg(long)]
    json: bool,
}

pub fn run(cli: &Cli, args: &ProfileArgs) -> Result<()> {
    let config = args.measure.apply(Config::load(&cli.config)?)?;
    let names = [args.arm.clone()];
    arms::check(&names)?;
    let session = Session::open(&cli.config, config, "profile")?;
    let arm = arms::prepare(&session, &names)?.remove(0);
    let p = profiling::profile(&arm, &session.plan, &session.trial_settings(), args.seed)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
    } else {
        print!("{}: {}", arm.label, p.render());
    }
    Ok(())
}
