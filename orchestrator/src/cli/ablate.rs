//! `ratchet ablate`: each kept change of a recorded run reverted from its
//! final champion, and what it contributes measured.

use anyhow::Result;
use clap::Args;

use super::recorded::{remeasure, RecordedArgs};
use super::Cli;
use crate::review::ablate;

#[derive(Args)]
pub struct AblateArgs {
    #[command(flatten)]
    recorded: RecordedArgs,
    /// Leave out the pairs (each pair of kept changes reverted together).
    #[arg(long)]
    no_pairs: bool,
}

pub fn run(cli: &Cli, args: &AblateArgs) -> Result<()> {
    let r = &args.recorded;
    remeasure(
        cli,
        r,
        "ablations",
        |session, repo, run| {
            ablate::Ablation {
                session,
                repo,
                run,
                seed: r.seed,
                pairs: !args.no_pairs,
            }
            .run()
        },
        ablate::render,
    )
}
