//! Agents propose one mutation of the treatment at a time. Every kind of
//! agent sits behind one trait, and every proposal reduces to search/replace
//! edits or, for a coding-agent CLI, to whatever it changed in the worktree.

pub mod budget;
pub mod command;
pub mod config;
pub mod edit;
pub mod llm;
pub mod param;
pub mod playbook;
pub mod prompt;
pub mod reply;
pub mod sample;
pub mod scratch;
pub mod search;
pub mod structured;

use crate::bench::load::contract::ContractConfig;
use crate::bench::servers::target::TargetConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Result};

use crate::agent::edit::Edit;
use crate::referee::verdict::AttemptVerdict;
use config::AgentsConfig;

/// Where an attempt came from: the agent's own idea, the loop's union of
/// promising attempts, or an earlier idea tried again on a newer champion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    #[default]
    Agent,
    Stack,
    Retry,
}

impl Origin {
    pub fn name(self) -> &'static str {
        match self {
            Origin::Agent => "agent",
            Origin::Stack => "stack",
            Origin::Retry => "retry",
        }
    }

    /// Where an attempt came from, as every reader shows it: `agent`,
    /// `stack of #1+#3` or `retry of #2`.
    pub fn describe(self, stack_of: &[usize], retry_of: Option<usize>) -> String {
        match (self, retry_of) {
            (Origin::Agent, _) => "agent".into(),
            (Origin::Stack, _) => format!(
                "stack of {}",
                stack_of
                    .iter()
                    .map(|n| format!("#{n}"))
                    .collect::<Vec<_>>()
                    .join("+")
            ),
            (Origin::Retry, Some(n)) => format!("retry of #{n}"),
            (Origin::Retry, None) => "retry".into(),
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Origin::Agent, Origin::Stack, Origin::Retry]
            .into_iter()
            .find(|o| o.name() == s)
    }
}

/// One earlier attempt, as agents see it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AttemptSummary {
    pub number: usize,
    pub hypothesis: String,
    pub verdict: AttemptVerdict,
    pub ratio: Option<f64>,
    /// The interval of `ratio` at `ci_level`.
    #[serde(alias = "ci95")]
    pub interval: Option<[f64; 2]>,
    #[serde(default = "default_level")]
    pub ci_level: f64,
    pub playbook_id: Option<String>,
    /// The champion commit the attempt was measured against.
    pub champion: String,
    pub detail: Option<String>,
    /// What the search counts as one idea: the playbook id (with its
    /// parameter value), or `#n` for the attempt that first proposed it.
    #[serde(default)]
    pub idea: String,
    #[serde(default)]
    pub origin: Origin,
    #[serde(default)]
    pub stack_of: Vec<usize>,
    #[serde(default)]
    pub retry_of: Option<usize>,
    /// For a stack the keep rule passed: the parts its ablation found
    /// costing more than they give, for which it was not kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub costly_parts: Vec<usize>,
}

fn default_level() -> f64 {
    0.95
}

impl AttemptSummary {
    /// Material for a stack: a gain the referee resolved (its interval
    /// wholly below 1), whether the keep rule judged it promising or a
    /// screen measured it beside a rival that was judged instead.
    pub fn resolved_gain(&self) -> bool {
        match self.verdict {
            AttemptVerdict::Promising => true,
            AttemptVerdict::Screened => self.interval.is_some_and(|[_, hi]| hi < 1.0),
            _ => false,
        }
    }
}

#[cfg(test)]
impl AttemptSummary {
    /// A summary with only what a test of an agent's choice needs.
    pub fn measured(n: usize, idea: &str, champion: &str, verdict: AttemptVerdict) -> Self {
        Self {
            number: n,
            hypothesis: idea.into(),
            verdict,
            ratio: None,
            interval: None,
            ci_level: 0.975,
            playbook_id: Some(idea.into()),
            champion: champion.into(),
            detail: None,
            idea: idea.into(),
            origin: Origin::Agent,
            stack_of: vec![],
            retry_of: None,
            costly_parts: vec![],
        }
    }
}

/// A promising attempt that the champion does not contain: material for a
/// stack, shown to every agent with its measured interval.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolEntry {
    pub attempt: usize,
    pub idea: String,
    pub hypothesis: String,
    pub ratio: f64,
    pub ci: [f64; 2],
    pub ci_level: f64,
    /// Keeps since the champion it was measured against.
    pub champions_ago: usize,
}

/// Everything an agent may use to form its next hypothesis.
pub struct ProposalContext {
    /// The allowed files of the champion, by repository-relative path.
    pub files: BTreeMap<String, String>,
    pub champion_commit: String,
    /// Playbook ids of the mutations the champion contains.
    pub kept_ids: Vec<String>,
    /// Ideas the champion contains (see [`AttemptSummary::idea`]).
    pub kept_ideas: Vec<String>,
    /// The champions of the run in order, the run's start first and the
    /// current champion last.
    pub lineage: Vec<String>,
    pub history: Vec<AttemptSummary>,
    /// Promising attempts not in the champion, cheapest first.
    pub pool: Vec<PoolEntry>,
    /// Retries the run's budget still allows.
    pub retries_left: usize,
    pub lessons: String,
    pub profile: Option<String>,
    pub contract: ContractConfig,
    /// What the server is, in its user's words.
    pub target: TargetConfig,
    pub allowed_paths: Vec<String>,
    /// How the treatment is built, read from its Makefile
    /// ([`crate::bench::servers::build::described`]).
    pub build: String,
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
            kept_ideas: vec![],
            lineage: vec!["c0".into()],
            history: vec![],
            pool: vec![],
            retries_left: 10,
            lessons: String::new(),
            profile: None,
            contract: ContractConfig::default(),
            target: TargetConfig::default(),
            allowed_paths: vec!["treatment/*.c".into()],
            build: "its Makefile".into(),
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
    /// `Retry` when the agent proposes an idea it measured against an
    /// earlier champion, with `retry_of` that measurement's attempt.
    pub origin: Origin,
    pub retry_of: Option<usize>,
}

pub enum Proposed {
    /// Edits to apply to the champion's files.
    Edits(Proposal),
    /// The agent edited the worktree itself (a coding-agent CLI).
    WorktreeChanged {
        hypothesis: String,
        category: String,
    },
    /// The union of these earlier attempts, merged onto the champion by the loop.
    Stack {
        parts: Vec<usize>,
        usage: Option<Usage>,
    },
    /// This earlier attempt again, merged onto the current champion.
    Retry { of: usize, usage: Option<Usage> },
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

/// One reply of a model and what became of it, kept so that a reader can
/// see what a real model answered.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Round {
    pub reply: String,
    /// `unparsed`, `not_applied` or `usable`.
    pub outcome: String,
    pub error: Option<String>,
}

pub trait Agent {
    fn name(&self) -> &str;
    /// The replies behind the last proposal, for agents that talk to a model.
    fn rounds(&self) -> &[Round] {
        &[]
    }
    /// Whether the agent proposes its own retries from the measured
    /// outcomes; for one that does not, the loop retries promising and
    /// near-zero ideas after keeps.
    fn plans_retries(&self) -> bool {
        false
    }
    /// Whether the agent still has ideas it has never measured. The loop
    /// holds its stacks until then (or until the pool is full): a stack
    /// made of the first two promising attempts can clear the line and
    /// leave a third, found later, alone in the pool with nothing to stack
    /// with. An agent that cannot tell (an LLM always has another idea)
    /// gets its stacks at once.
    fn exploring(&self, _ctx: &ProposalContext) -> bool {
        false
    }
    fn propose(&mut self, ctx: &ProposalContext) -> anyhow::Result<Proposed>;
}

/// What the playbook agent reads and how it searches: handed over by the
/// configuration, so the agents compile without the whole file.
pub struct PlaybookSettings {
    pub dir: PathBuf,
    pub search: search::SearchConfig,
    pub threshold: f64,
}

/// The agent a run names: the configuration picks the backend by name.
pub fn make_agent(
    name: &str,
    agents: &AgentsConfig,
    playbook: &PlaybookSettings,
) -> Result<Box<dyn Agent>> {
    register_secrets(agents);
    Ok(match name {
        "playbook" => Box::new(playbook::Playbook::new(
            playbook::load(&playbook.dir)?,
            playbook.search.clone(),
            playbook.threshold,
        )),
        "openai" | "anthropic" | "local" => Box::new(api_agent(name, agents)?),
        "command" => Box::new(command::CommandAgent::new(agents.command.clone())),
        other => {
            bail!("unknown agent {other:?}: expected playbook, openai, anthropic, local or command")
        }
    })
}

/// An API agent by name: `openai`, `anthropic` or `local`.
pub fn api_agent(name: &str, agents: &AgentsConfig) -> Result<llm::LlmAgent> {
    register_secrets(agents);
    let (protocol, section) = match name {
        "openai" => (llm::Protocol::OpenAi, &agents.openai),
        "anthropic" => (llm::Protocol::Anthropic, &agents.anthropic),
        "local" => (llm::Protocol::OpenAi, &agents.local),
        other => bail!("{other:?} is not an API agent: expected openai, anthropic or local"),
    };
    llm::LlmAgent::new(name, protocol, section.clone())
}

/// Whatever the configuration names as a key is redacted from every log
/// ratchet keeps, whatever the variable is called.
fn register_secrets(agents: &AgentsConfig) {
    crate::bench::servers::secrets::register(
        [&agents.openai, &agents.anthropic, &agents.local]
            .iter()
            .filter_map(|a| a.api_key_env.clone())
            .filter(|name| !name.is_empty())
            .chain(agents.command.pass_env.iter().cloned()),
    );
}
