//! `ratchet serve`: the runs in `results/` in a browser, each run's page
//! following the run as it is decided.

use anyhow::Result;
use clap::Args;
use std::net::IpAddr;

use super::recorded::Review;
use super::Cli;
use crate::review::serve;

#[derive(Args)]
pub struct ServeArgs {
    /// The runs to serve (directories of results/); every run if none.
    runs: Vec<String>,
    /// The port to listen on; 0 picks a free one (the address is printed).
    #[arg(long, default_value_t = 8321)]
    port: u16,
    /// The address to listen on. Anything but loopback shows every run to
    /// whoever can reach this machine: prefer SSH port forwarding.
    #[arg(long, default_value = "127.0.0.1")]
    address: IpAddr,
}

pub fn run(cli: &Cli, args: &ServeArgs) -> Result<()> {
    let review = Review::open(cli)?;
    serve::serve(serve::Options {
        address: args.address,
        port: args.port,
        results: review.root.join(&review.config.paths.results),
        repo: review.root.clone(),
        runs: args.runs.clone(),
    })
}
