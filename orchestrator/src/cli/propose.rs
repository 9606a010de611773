//! `ratchet propose`: an agent's proposals on the current treatment, each
//! classified and built, nothing measured.

use anyhow::{Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};

use crate::agent::config::ReplyFormat;
use crate::agent::sample::{self, Sample};
use crate::agent::{api_agent, make_agent, ProposalContext};
use crate::bench::{build, session};
use crate::config::Config;
use crate::files::write_atomic;
use crate::record::knowledge;
use crate::run::scope;

#[derive(Args)]
pub struct ProposeArgs {
    /// The agent: local, openai, anthropic or command.
    #[arg(long, default_value = "local")]
    agent: String,
    /// How many proposals to ask for, one after another.
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// Override the API agent's reply format: auto, json or text.
    #[arg(long, value_parser = parse_format)]
    reply_format: Option<ReplyFormat>,
    /// Write every sample and the shares as JSON to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Only build the API agent's prompt for its context window and print
    /// its size by the server's tokenizer, as JSON; send nothing.
    #[arg(long)]
    prompt_only: bool,
}

fn parse_format(s: &str) -> Result<ReplyFormat, String> {
    match s {
        "auto" => Ok(ReplyFormat::Auto),
        "json" => Ok(ReplyFormat::Json),
        "text" => Ok(ReplyFormat::Text),
        _ => Err(format!("{s:?}: expected auto, json or text")),
    }
}

pub fn propose(config_path: &Path, args: &ProposeArgs) -> Result<()> {
    let mut config = Config::load(config_path)?;
    if let Some(f) = args.reply_format {
        for a in [
            &mut config.agents.openai,
            &mut config.agents.anthropic,
            &mut config.agents.local,
        ] {
            a.reply_format = f;
        }
    }
    let root = session::root_of(config_path)?;
    let treatment = root.join(&config.paths.treatment);
    let prefix = config.paths.treatment.display().to_string();
    let ctx = context(&root, &config, &treatment, &prefix)?;
    if args.prompt_only {
        let preview = api_agent(&args.agent, &config)?
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
        let mut agent = make_agent(&args.agent, &config)?;
        let s = sample::sample(agent.as_mut(), &ctx, &treatment, &prefix, &cache)?;
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
                "agent": args.agent,
                "reply_format": args.reply_format,
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
    let kb = knowledge::at(root, &config.paths.knowledge_base, &config.paths.lessons);
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
        contract_request: config.contract.request.clone(),
        contract_response: config.contract.response.clone(),
        allowed_paths: config.run.allowed_paths.clone(),
        worktree: root.to_path_buf(),
    })
}
