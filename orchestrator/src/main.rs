//! ratchet: an autonomous benchmark-optimization loop with an honest referee.
//!
//! The stages, with imports running one way: `bench` (build, launch, load,
//! meter, trial, gate) <- `referee` (statistics, comparison, verdict, keep
//! rule, the judging sequence) <- `agent` (proposals) <- `config` (composes
//! every stage's section of harness.toml) <- `record` (journal, trailers,
//! git, lineage, knowledge) <- `session` (cores, lock, meter plan) <- `run`
//! and `review`. `tests/layout.rs` holds the order.

mod agent;
mod bench;
mod check;
mod cli;
mod clock;
mod config;
mod doctor;
mod files;
mod glob;
mod interrupt;
mod record;
mod referee;
mod review;
mod run;
mod session;

use clap::Parser;

fn main() {
    bench::servers::secrets::protect_self();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RATCHET_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    interrupt::install();
    let cli = cli::Cli::parse();
    let result = cli::dispatch(&cli);
    if let Err(e) = result {
        eprintln!("ratchet: error: {e:#}");
        std::process::exit(if e.is::<interrupt::Interrupted>() {
            130
        } else if let Some(u) = e.downcast_ref::<run::Undecided>() {
            u.code
        } else {
            1
        });
    }
}
