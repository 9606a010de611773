//! The agents' sections of `harness.toml`: `[agents.openai]`,
//! `[agents.anthropic]`, `[agents.local]` and `[agents.command]`.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentsConfig {
    pub openai: ApiAgentConfig,
    pub anthropic: ApiAgentConfig,
    /// The OpenAI-protocol agent pointed at the model server that
    /// `scripts/local-model.sh` runs, so that a user without any API key
    /// has a real model to run the loop with.
    pub local: ApiAgentConfig,
    pub command: CommandAgentConfig,
}

/// How an API agent asks for its reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyFormat {
    /// A JSON schema where the protocol has one (OpenAI-compatible
    /// `response_format`), else text; an endpoint that refuses the schema
    /// gets text from then on.
    #[default]
    Auto,
    /// Always the JSON schema (for the Messages API, its `output_format`).
    Json,
    /// The text format with search/replace blocks.
    Text,
}

/// An API agent. Unset fields take the agent's defaults (see
/// [`crate::agent::llm::protocol::Defaults`]). The key is read from the environment
/// variable named by `api_key_env` at call time, never stored; an empty
/// name sends no key, for local servers that ask for none.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiAgentConfig {
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub timeout_s: Option<u64>,
    pub max_retries: Option<u32>,
    pub backoff_ms: Option<u64>,
    pub repair_rounds: Option<u32>,
    /// The most the reply may take; where the context window is known, the
    /// reply gets at most an eighth of it and the prompt the rest.
    pub max_tokens: Option<u32>,
    /// The model's context window in tokens. Unset: asked of the server's
    /// model list where it says (llama.cpp, vLLM, LM Studio), else unbounded
    /// until the server refuses a prompt as too long.
    pub context_tokens: Option<u32>,
    pub reply_format: ReplyFormat,
    /// Sampling temperature; unset leaves the server's default.
    pub temperature: Option<f64>,
    /// Sampling seed; unset leaves the server's default (llama.cpp's is
    /// fixed, so the same prompt gets the same reply).
    pub seed: Option<u64>,
    /// US dollars per million input and output tokens, for the cost limit.
    pub price_input_per_mtok: Option<f64>,
    pub price_output_per_mtok: Option<f64>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CommandAgentConfig {
    /// argv template; `{prompt_file}` and `{prompt}` are substituted.
    pub argv: Vec<String>,
    pub timeout_s: u64,
    /// Extra environment variables the CLI may see (for example its own key).
    pub pass_env: Vec<String>,
    /// The prompt's budget in tokens, for a CLI whose model has a small
    /// context; unset sends it whole.
    pub context_tokens: Option<u32>,
}

impl Default for CommandAgentConfig {
    fn default() -> Self {
        Self {
            argv: vec!["claude".into(), "-p".into(), "{prompt}".into()],
            timeout_s: 900,
            pass_env: vec![],
            context_tokens: None,
        }
    }
}
