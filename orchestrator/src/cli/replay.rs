//! `ratchet replay`: a recorded run's lineage re-measured on this machine,
//! and with `--decisions` its attempts decided again.

use anyhow::Result;
use clap::Args;

use super::recorded::{remeasure, RecordedArgs};
use super::Cli;
use crate::review::replay;

#[derive(Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub recorded: RecordedArgs,
    /// Also re-apply every recorded attempt in order and decide it again.
    #[arg(long)]
    decisions: bool,
    /// With --decisions: re-decide only these attempts (e.g. 6,7), each
    /// against the champion it was recorded against.
    #[arg(
        long,
        value_delimiter = ',',
        requires = "decisions",
        value_name = "N,..."
    )]
    attempts: Vec<usize>,
}

pub fn run(cli: &Cli, args: &ReplayArgs) -> Result<()> {
    let r = &args.recorded;
    remeasure(
        cli,
        r,
        "replays",
        |session, repo, run| {
            replay::Replayer {
                session,
                repo,
                run,
                seed: r.seed,
            }
            .replay(args.decisions, &args.attempts)
        },
        replay::render,
    )
}

#[cfg(test)]
mod tests {
    use super::super::{parse, Command};
    use super::ReplayArgs;

    fn replay(args: &[&str]) -> Result<ReplayArgs, clap::Error> {
        let mut all = vec!["replay"];
        all.extend(args);
        parse(&all).map(|c| match c {
            Command::Replay(a) => a,
            _ => unreachable!(),
        })
    }

    #[test]
    fn attempts_need_decisions() {
        assert!(replay(&["r1", "--attempts", "6,7"]).is_err());
        let a = replay(&["r1", "--decisions", "--attempts", "6,7"]).unwrap();
        assert!(a.decisions);
        assert_eq!(a.attempts, [6, 7]);
        assert_eq!(a.recorded.run, "r1");
        assert!(replay(&["r1"]).unwrap().attempts.is_empty());
        assert!(replay(&[]).is_err());
    }
}
