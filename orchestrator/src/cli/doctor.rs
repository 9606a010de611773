//! `ratchet doctor`: whether this machine can referee, one line per check,
//! each saying how to fix what cannot.

use anyhow::Result;

use super::Cli;
use crate::config::Config;

pub fn run(cli: &Cli) -> Result<()> {
    let config = Config::load(&cli.config)?;
    let checks = crate::doctor::run(&config);
    for c in &checks {
        println!(
            "{} {:<38} {}",
            if c.ok { "OK  " } else { "WARN" },
            c.name,
            c.detail
        );
    }
    Ok(())
}
