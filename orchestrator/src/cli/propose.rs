//! `ratchet propose`: an agent's proposals on the current treatment, each
//! classified and built, nothing measured.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};

use super::agent::AgentKind;
use super::Cli;
use crate::agent::config::ReplyFormat;
use crate::agent::sample::{self, Sample};
use crate::agent::{api_agent, make_agent, ProposalContext};
use crate::bench::servers::build;
use crate::config::Config;
use crate::files::write_atomic;
use crate::record::knowledge;
use crate::run::scope;
use crate::session;

#[derive(Args)]
pub struct ProposeArgs {
    /// The agent: local, openai, anthropic, command or playbook.
    #[arg(long, value_enum, default_value = "local")]
    agent: AgentKind,
    /// How many proposals to ask for, one after another.
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// Override the API agent's reply format: auto, json or text.
    #[arg(long, value_enum)]
    reply_format: Option<ReplyFormatArg>,
    /// Write every sample and the shares as JSON to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Only build the API agent's prompt for its context window and print
    /// its size by the server's tokenizer, as JSON; send nothing.
    #[arg(long)]
    prompt_only: bool,
}

/// `--reply-format`, spelled as an agent's `reply_format` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ReplyFormatArg {
    Auto,
    Json,
    Text,
}

impl From<ReplyFormatArg> for ReplyFormat {
    fn from(f: ReplyFormatArg) -> Self {
        match f {
            ReplyFormatArg::Auto => ReplyFormat::Auto,
            ReplyFormatArg::Json => ReplyFormat::Json,
            ReplyFormatArg::Text => ReplyFormat::Text,
        }
    }
}

pub fn run(cli: &Cli, args: &ProposeArgs) -> Result<()> {
    let config_path = cli.config.as_path();
    let agent_name = args.agent.name();
    let reply_format = args.reply_format.map(ReplyFormat::from);
    let mut config = Config::load(config_path)?;
    if let Some(f) = reply_format {
        for a in [
            &mut config.agents.openai,
            &mut config.agents.anthropic,
            &mut config.agents.local,
        ] {
            a.reply_format = f;
        }
    }
    let root = session::root_of(config_path, &config)?;
    let treatment = root.join(&config.paths.treatment);
    let prefix = config.paths.treatment.display().to_string();
    let ctx = context(&root, &config, &treatment, &prefix)?;
    if args.prompt_only {
        let preview = api_agent(agent_name, &config.agents)?
            .preview(&ctx)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        println!("{}", serde_json::to_string_pretty(&preview)?);
        return Ok(());
    }
    let cache = build::cache_dir()?;
    let mut samples: Vec<Sample> = vec![];
    let base = config.agents.local.seed.unwrap_or(0);
    for n in 1..=args.count {
        // A seed per proposal: with the server's fixed default, the same
        // prompt would get the same reply every time.
        for a in [
            &mut config.agents.openai,
            &mut config.agents.anthropic,
            &mut config.agents.local,
        ] {
            a.seed = Some(base + n as u64);
        }
        let mut agent = make_agent(agent_name, &config.agents, &config.playbook_settings())?;
        let s = sample::sample(
            agent.as_mut(),
            &ctx,
            &treatment,
            &prefix,
            &config.target,
            &cache,
        )?;
        println!(
            "#{n} {} (first round {}, {} rounds, builds {}) {:.0} s: {}",
            s.outcome,
            s.first_round.as_deref().unwrap_or("-"),
            s.rounds.len(),
            s.builds.map_or("-".into(), |b| b.to_string()),
            s.seconds,
            s.hypothesis
                .as_deref()
                .or(s.error.as_deref())
                .unwrap_or("")
                .lines()
                .next()
                .unwrap_or("")
        );
        samples.push(s);
        if let Some(out) = &args.out {
            let doc = serde_json::json!({
                "agent": agent_name,
                "reply_format": reply_format,
                "shares": sample::shares(&samples),
                "samples": samples,
            });
            write_atomic(out, serde_json::to_string_pretty(&doc)?.as_bytes())
                .with_context(|| format!("cannot write {}", out.display()))?;
        }
    }
    let s = sample::shares(&samples);
    println!(
        "{} proposals: {} well formed, {} apply, {} build, {} agent errors \
         (first round: {} well formed, {} apply)",
        s.proposals,
        s.well_formed,
        s.applies,
        s.builds,
        s.agent_errors,
        s.first_round_well_formed,
        s.first_round_applies
    );
    Ok(())
}

/// What a run's first attempt would see: the treatment's allowed files and
/// the lessons digest; no history, no profile.
fn context(
    root: &Path,
    config: &Config,
    treatment: &Path,
    prefix: &str,
) -> Result<ProposalContext> {
    let files = scope::allowed_files(treatment, prefix, &config.run.allowed_paths)
        .with_context(|| format!("cannot read {}", treatment.display()))?;
    let kb = knowledge::at(root, &config.paths.knowledge_base, &config.paths.results);
    Ok(ProposalContext {
        files,
        champion_commit: "HEAD".into(),
        kept_ids: vec![],
        kept_ideas: vec![],
        lineage: vec!["HEAD".into()],
        history: vec![],
        pool: vec![],
        retries_left: 0,
        lessons: kb.digest(),
        profile: None,
        contract: config.contract.clone(),
        target: config.target.clone(),
        allowed_paths: config.run.allowed_paths.clone(),
        build: crate::bench::servers::build::described(treatment, &config.target),
        worktree: root.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::{parse, Command};
    use super::*;

    fn propose(args: &[&str]) -> Result<ProposeArgs, clap::Error> {
        let mut all = vec!["propose"];
        all.extend(args);
        parse(&all).map(|c| match c {
            Command::Propose(a) => a,
            _ => unreachable!(),
        })
    }

    #[test]
    fn the_local_agent_once_by_default() {
        let a = propose(&[]).unwrap();
        assert_eq!(
            (a.agent, a.count, a.reply_format),
            (AgentKind::Local, 1, None)
        );
        assert!(propose(&["--agent", "gpt"]).is_err());
    }

    /// The flag takes what an agent's `reply_format` field takes, and the
    /// samples file names it the same way.
    #[test]
    fn the_reply_format_is_spelled_as_in_harness_toml() {
        for f in ReplyFormatArg::value_variants() {
            let name = f.to_possible_value().unwrap().get_name().to_string();
            let a = propose(&["--reply-format", name.as_str()]).unwrap();
            assert_eq!(a.reply_format, Some(*f));
            let field = serde_json::to_value(ReplyFormat::from(*f)).unwrap();
            assert_eq!(field, serde_json::Value::String(name));
        }
        assert!(propose(&["--reply-format", "yaml"]).is_err());
    }
}
