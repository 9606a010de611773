//! The `command` agent: an external coding-agent CLI (a headless `claude -p`,
//! `codex exec`, or any script) run on a copy of the candidate worktree
//! ([`scratch`]), as the unprivileged user. Its edit is whatever it changed
//! there, carried back. It runs with a minimal environment (no API keys of
//! other agents, a throwaway HOME), under a wall-time limit that kills its
//! whole process group.

use anyhow::Result;
use std::process::Command;
use std::time::Duration;

use super::{prompt, reply, Agent, AgentFailure, ProposalContext, Proposed, Usage};
use crate::agent::budget::{Budget, Tokens};
use crate::agent::config::CommandAgentConfig;
use crate::agent::scratch;
use crate::bench::servers::build::run_bounded;
use crate::bench::servers::privilege;
use std::os::unix::fs::PermissionsExt;

pub struct CommandAgent {
    config: CommandAgentConfig,
}

impl CommandAgent {
    pub fn new(config: CommandAgentConfig) -> Self {
        Self { config }
    }
}

const FORMAT: &str = "Edit the files in the current directory directly; do not run git \
                      (any change to the git directory rejects the attempt). Then print one line \
                      `HYPOTHESIS: <one sentence>` (and optionally `CATEGORY: <word>`) on stdout. \
                      Or, to have ratchet merge earlier attempts onto the champion instead of \
                      editing, print `STACK: <attempt numbers>` or `RETRY: <attempt number>`.";

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
        let owner = privilege::privilege().identity();
        // Searchable, not listable: the agent reaches its own three entries.
        std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o711))?;
        let work = scratch.path().join("work");
        scratch::copy_tree(&ctx.worktree, &work, owner)?;
        let prompt_file = scratch.path().join("prompt.md");
        let budget = self.config.context_tokens.map(|t| Budget {
            tokens: t as usize,
            counter: Tokens::CONSERVATIVE,
        });
        let text = prompt::build(ctx, FORMAT, budget.as_ref())
            .map_err(|o| unavailable(format!("not started: {o}")))?;
        std::fs::write(&prompt_file, &text)?;
        let expand = |a: &String| {
            a.replace("{prompt_file}", &prompt_file.display().to_string())
                .replace("{prompt}", &text)
        };
        let mut cmd = Command::new(expand(program));
        cmd.args(args.iter().map(expand))
            .current_dir(&work)
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
        if let Some(id) = owner {
            privilege::give(&home, id)?;
        }
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
        scratch::carry_back(&work, &ctx.worktree)?;
        let field = |name: &str| {
            output
                .lines()
                .find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim().to_string()))
                .filter(|v| !v.is_empty())
        };
        let moves: String = output
            .lines()
            .filter(|l| l.trim().starts_with("STACK:") || l.trim().starts_with("RETRY:"))
            .collect::<Vec<_>>()
            .join("\n");
        if !moves.is_empty() {
            let r = reply::parse(&moves).map_err(|e| AgentFailure::Malformed {
                message: format!("{e:#}"),
                usage: Usage::default(),
            })?;
            return Ok(match r.retry {
                Some(of) => Proposed::Retry { of, usage: None },
                None => Proposed::Stack {
                    parts: r.stack,
                    usage: None,
                },
            });
        }
        Ok(Proposed::WorktreeChanged {
            hypothesis: field("HYPOTHESIS:")
                .unwrap_or_else(|| "(the command agent gave no hypothesis)".into()),
            category: field("CATEGORY:").unwrap_or_else(|| "uncategorized".into()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn context(worktree: &std::path::Path) -> ProposalContext {
        ProposalContext::for_tests(BTreeMap::new(), worktree)
    }

    fn agent(script: &str, timeout_s: u64) -> CommandAgent {
        CommandAgent::new(CommandAgentConfig {
            argv: vec![
                "sh".into(),
                "-c".into(),
                script.into(),
                "agent".into(),
                "{prompt_file}".into(),
            ],
            timeout_s,
            pass_env: vec![],
            context_tokens: None,
        })
    }

    #[test]
    fn runs_in_the_worktree_with_the_prompt_and_reports_its_hypothesis() {
        let wt = tempfile::tempdir().unwrap();
        let mut a = agent("grep -q 'Champion source' \"$1\" && echo edited > changed.txt && echo 'HYPOTHESIS: touch a file'", 10);
        let Proposed::WorktreeChanged { hypothesis, .. } = a.propose(&context(wt.path())).unwrap()
        else {
            panic!()
        };
        assert_eq!(hypothesis, "touch a file");
        assert!(wt.path().join("changed.txt").exists());
    }

    #[test]
    fn secrets_in_the_environment_do_not_reach_the_agent() {
        std::env::set_var("RATCHET_TEST_SECRET_FOR_COMMAND", "hunter2");
        let wt = tempfile::tempdir().unwrap();
        let mut a = agent("env > env.txt; echo HYPOTHESIS: x", 10);
        a.propose(&context(wt.path())).unwrap();
        let env = std::fs::read_to_string(wt.path().join("env.txt")).unwrap();
        assert!(!env.contains("hunter2"), "{env}");
        assert!(env.contains("PATH="));
        assert!(
            !env.contains(&format!(
                "HOME={}",
                std::env::var("HOME").unwrap_or_default()
            )) || std::env::var("HOME").is_err()
        );
    }

    /// It works unprivileged on a copy: its edits come back, the git
    /// directory and ratchet's own files are out of its reach.
    #[test]
    fn the_agent_runs_unprivileged_on_a_copy_without_git() {
        let wt = tempfile::tempdir().unwrap();
        std::fs::create_dir(wt.path().join(".git")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        let mut a = agent(
            &format!(
                "id -u > uid.txt; ls -a > seen.txt; touch {}/planted 2>/dev/null; echo HYPOTHESIS: x",
                outside.path().display()
            ),
            10,
        );
        a.propose(&context(wt.path())).unwrap();
        let uid = std::fs::read_to_string(wt.path().join("uid.txt")).unwrap();
        if let Some(id) = privilege::privilege().identity() {
            assert_eq!(uid.trim(), id.uid.to_string());
        }
        let seen = std::fs::read_to_string(wt.path().join("seen.txt")).unwrap();
        assert!(!seen.lines().any(|l| l == ".git"), "{seen}");
        assert!(!outside.path().join("planted").exists());
    }

    #[test]
    fn a_hanging_agent_is_killed_at_its_time_limit() {
        let wt = tempfile::tempdir().unwrap();
        let mut a = agent("sleep 30", 1);
        let started = std::time::Instant::now();
        let e = a.propose(&context(wt.path())).err().unwrap();
        assert!(e.to_string().contains("timed out"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_failing_agent_is_unavailable_with_its_output() {
        let wt = tempfile::tempdir().unwrap();
        let mut a = agent("echo boom >&2; exit 3", 10);
        let e = a.propose(&context(wt.path())).err().unwrap();
        assert!(e.to_string().contains("boom"), "{e}");
    }
}
