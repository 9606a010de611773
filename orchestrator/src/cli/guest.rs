//! `ratchet guest` (hidden): inside an emulated guest, measure the plan the
//! host wrote.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct GuestArgs {
    plan: PathBuf,
    /// First wait for the host's files in the shared window.
    #[arg(long)]
    receive: bool,
}

pub fn run(args: &GuestArgs) -> Result<()> {
    crate::bench::emulated::guest::run(&args.plan, args.receive)
}
