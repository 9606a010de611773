//! The `command` agent: an external coding-agent CLI (a headless `claude -p`,
//! `codex exec`, or any script) run in the candidate worktree. Its edit is
//! whatever it changed there. It runs with a minimal environment (no API keys
//! of other agents, a throwaway HOME), under a wall-time limit that kills its
//! whole process group.

use anyhow::Result;
use std::process::Command;
use std::time::Duration;

use super::{prompt, Agent, AgentFailure, ProposalContext, Proposed, Usage};
use crate::build::run_bounded;
use crate::config::CommandAgentConfig;

pub struct CommandAgent {
    config: CommandAgentConfig,
}

impl CommandAgent {
    pub fn new(config: CommandAgentConfig) -> Self {
        Self { config }
    }
}

const FORMAT: &str = "Edit the files in the current directory directly. Then print one line \
                      `HYPOTHESIS: <one sentence>` (and optionally `CATEGORY: <word>`) on stdout.";

/// Environment variables passed through to the CLI; everything else,
/// API keys included, is withheld unless named in `agents.command.pass_env`.
const BASE_ENV: &[&str] = &["PATH", "LANG", "LC_ALL", "TERM"];

impl Agent for CommandAgent {
    fn name(&self) -> &str {
        "command"
    }

    fn propose(&mut self, ctx: &ProposalContext) -> Result<Proposed> {
        let unavailable = |message: String| AgentFailure::Unavailable {
            message,
            usage: Usage::default(),
        };
        let Some((program, args)) = self.config.argv.split_first() else {
            return Err(unavailable("agents.command.argv is empty".into()).into());
        };
        let scratch = tempfile::tempdir()?;
        let prompt_file = scratch.path().join("prompt.md");
        let text = prompt::build(ctx, FORMAT);
        std::fs::write(&prompt_file, &text)?;
        let expand = |a: &String| {
            a.replace("{prompt_file}", &prompt_file.display().to_string())
                .replace("{prompt}", &text)
        };
        let mut cmd = Command::new(expand(program));
        cmd.args(args.iter().map(expand))
            .current_dir(&ctx.worktree)
            .env_clear();
        for var in BASE_ENV
            .iter()
            .map(|s| s.to_string())
            .chain(self.config.pass_env.iter().cloned())
        {
            if let Some(v) = std::env::var_os(&var) {
                cmd.env(&var, v);
            }
        }
        let home = scratch.path().join("home");
        std::fs::create_dir_all(&home)?;
        cmd.env("HOME", &home)
            .env("RATCHET_PROMPT_FILE", &prompt_file);
        let (status, output) = run_bounded(cmd, Duration::from_secs(self.config.timeout_s))
            .map_err(|e| unavailable(format!("could not start {program}: {e:#}")))?;
        match status {
            None => {
                return Err(
                    unavailable(format!("timed out after {} s", self.config.timeout_s)).into(),
                )
            }
            Some(s) if !s.success() => {
                let tail: Vec<&str> = output.lines().rev().take(10).collect();
                return Err(unavailable(format!(
                    "exited with {s}: {}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                ))
                .into());
            }
            Some(_) => {}
        }
        let field = |name: &str| {
            output
                .lines()
                .find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim().to_string()))
                .filter(|v| !v.is_empty())
        };
        Ok(Proposed::WorktreeChanged {
            hypothesis: field("HYPOTHESIS:")
                .unwrap_or_else(|| "(the command agent gave no hypothesis)".into()),
            category: field("CATEGORY:").unwrap_or_else(|| "uncategorized".into()),
        })
    }
}
