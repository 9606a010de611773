//! Agents propose one mutation of the treatment at a time. Every kind of
//! agent sits behind one trait, and every proposal reduces to search/replace
//! edits or, for a coding-agent CLI, to whatever it changed in the worktree.

pub mod command;
pub mod edit;
pub mod llm;
pub mod playbook;
pub mod prompt;
pub mod reply;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Result};

use crate::agent::edit::Edit;
use crate::config::Config;
use crate::referee::verdict::AttemptVerdict;

/// One earlier attempt, as agents see it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AttemptSummary {
    pub number: usize,
    pub hypothesis: String,
    pub verdict: AttemptVerdict,
    pub ratio: Option<f64>,
    pub ci95: Option<[f64; 2]>,
    pub playbook_id: Option<String>,
    /// The champion commit the attempt was measured against.
    pub champion: String,
    pub detail: Option<String>,
}

/// Everything an agent may use to form its next hypothesis.
pub struct ProposalContext {
    /// The allowed files of the champion, by repository-relative path.
    pub files: BTreeMap<String, String>,
    pub champion_commit: String,
    /// Playbook ids of the mutations the champion contains.
    pub kept_ids: Vec<String>,
    pub history: Vec<AttemptSummary>,
    pub lessons: String,
    pub profile: Option<String>,
    pub contract_request: String,
    pub contract_response: String,
    pub allowed_paths: Vec<String>,
    pub worktree: PathBuf,
}

#[cfg(test)]
impl ProposalContext {
    /// A context with only the files and the worktree set, for agent tests.
    pub fn for_tests(files: BTreeMap<String, String>, worktree: &std::path::Path) -> Self {
        Self {
            files,
            champion_commit: "c0".into(),
            kept_ids: vec![],
            history: vec![],
            lessons: String::new(),
            profile: None,
            contract_request: String::new(),
            contract_response: String::new(),
            allowed_paths: vec!["treatment/*.c".into()],
            worktree: worktree.to_path_buf(),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cost_usd += other.cost_usd;
    }
}

#[derive(Clone, Debug)]
pub struct Proposal {
    pub hypothesis: String,
    pub category: String,
    pub playbook_id: Option<String>,
    pub edits: Vec<Edit>,
    pub usage: Option<Usage>,
}

pub enum Proposed {
    /// Edits to apply to the champion's files.
    Edits(Proposal),
    /// The agent edited the worktree itself (a coding-agent CLI).
    WorktreeChanged {
        hypothesis: String,
        category: String,
    },
    /// Nothing left to propose.
    Exhausted,
}

/// Why an agent produced no usable proposal. The loop records the attempt
/// with the matching verdict and goes on.
#[derive(Debug)]
pub enum AgentFailure {
    /// Endpoint down, slow, rate-limited, or the CLI crashed or hung.
    Unavailable { message: String, usage: Usage },
    /// A reply that does not parse or whose edits do not apply, after repairs.
    Malformed { message: String, usage: Usage },
}

impl std::fmt::Display for AgentFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AgentFailure::Unavailable { message, .. } => write!(f, "agent unavailable: {message}"),
            AgentFailure::Malformed { message, .. } => {
                write!(f, "malformed agent reply: {message}")
            }
        }
    }
}

impl std::error::Error for AgentFailure {}

pub trait Agent {
    fn name(&self) -> &str;
    fn propose(&mut self, ctx: &ProposalContext) -> anyhow::Result<Proposed>;
}

/// The agent a run names: the configuration picks the backend by name.
pub fn make_agent(name: &str, config: &Config) -> Result<Box<dyn Agent>> {
    // Whatever the configuration names as a key is redacted from every log
    // ratchet keeps, whatever the variable is called.
    crate::bench::secrets::register(
        [&config.agents.openai, &config.agents.anthropic]
            .iter()
            .filter_map(|a| a.api_key_env.clone())
            .chain(config.agents.command.pass_env.iter().cloned()),
    );
    Ok(match name {
        "playbook" => {
            let dir = config.paths.knowledge_base.join("playbook");
            Box::new(playbook::Playbook::new(playbook::load(&dir)?))
        }
        "openai" => Box::new(llm::LlmAgent::new(
            llm::Protocol::OpenAi,
            config.agents.openai.clone(),
        )?),
        "anthropic" => Box::new(llm::LlmAgent::new(
            llm::Protocol::Anthropic,
            config.agents.anthropic.clone(),
        )?),
        "command" => Box::new(command::CommandAgent::new(config.agents.command.clone())),
        other => bail!("unknown agent {other:?}: expected playbook, openai, anthropic or command"),
    })
}
