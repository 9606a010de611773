//! The two wire protocols: OpenAI-compatible chat completions and the
//! Anthropic Messages API. What a request looks like and what a reply
//! means; nothing here talks to the network.

use serde_json::{json, Value};

use crate::agent::config::ApiAgentConfig;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    OpenAi,
    Anthropic,
}

/// What an API agent uses where its section leaves a field unset.
pub struct Defaults {
    pub base_url: &'static str,
    pub model: &'static str,
    pub api_key_env: &'static str,
    pub price_input_per_mtok: f64,
    pub price_output_per_mtok: f64,
    pub timeout_s: u64,
    pub max_tokens: u32,
}

impl Defaults {
    /// The hosted service of each protocol, and for the agent named
    /// `local` the server `scripts/local-model.sh start` runs: llama.cpp on
    /// one CPU thread, which reads a 6k-token prompt in about a minute,
    /// hence the long timeout; no key, no price.
    pub fn of(name: &str, protocol: Protocol) -> Self {
        match (name, protocol) {
            ("local", _) => Self {
                base_url: "http://127.0.0.1:8089/v1",
                model: "smollm2",
                api_key_env: "",
                price_input_per_mtok: 0.0,
                price_output_per_mtok: 0.0,
                timeout_s: 900,
                max_tokens: 1024,
            },
            (_, Protocol::OpenAi) => Self {
                base_url: "https://api.openai.com/v1",
                model: "gpt-4o",
                api_key_env: "OPENAI_API_KEY",
                price_input_per_mtok: 2.5,
                price_output_per_mtok: 10.0,
                timeout_s: 180,
                max_tokens: 8192,
            },
            (_, Protocol::Anthropic) => Self {
                base_url: "https://api.anthropic.com",
                model: "claude-sonnet-4-5",
                api_key_env: "ANTHROPIC_API_KEY",
                price_input_per_mtok: 3.0,
                price_output_per_mtok: 15.0,
                timeout_s: 180,
                max_tokens: 8192,
            },
        }
    }
}

/// An [`ApiAgentConfig`] with the agent's defaults filled in.
pub struct Settings {
    pub base_url: String,
    pub model: String,
    /// Empty: the endpoint asks for no key.
    pub api_key_env: String,
    pub price_input_per_mtok: f64,
    pub price_output_per_mtok: f64,
    pub timeout_s: u64,
    pub max_retries: u32,
    pub backoff_ms: u64,
    pub repair_rounds: u32,
    pub max_tokens: u32,
    pub rest: ApiAgentConfig,
}

impl Settings {
    pub fn resolve(d: Defaults, c: ApiAgentConfig) -> Self {
        Self {
            base_url: c.base_url.clone().unwrap_or_else(|| d.base_url.into()),
            model: c.model.clone().unwrap_or_else(|| d.model.into()),
            api_key_env: c
                .api_key_env
                .clone()
                .unwrap_or_else(|| d.api_key_env.into()),
            price_input_per_mtok: c.price_input_per_mtok.unwrap_or(d.price_input_per_mtok),
            price_output_per_mtok: c.price_output_per_mtok.unwrap_or(d.price_output_per_mtok),
            timeout_s: c.timeout_s.unwrap_or(d.timeout_s),
            max_retries: c.max_retries.unwrap_or(3),
            backoff_ms: c.backoff_ms.unwrap_or(1000),
            repair_rounds: c.repair_rounds.unwrap_or(2),
            max_tokens: c.max_tokens.unwrap_or(d.max_tokens),
            rest: c,
        }
    }

    pub fn base(&self) -> &str {
        self.base_url.trim_end_matches('/')
    }
}

#[derive(Clone)]
pub struct Message {
    pub role: &'static str,
    pub content: String,
}

/// One request: the conversation, the reply's token limit, and the JSON
/// schema the reply must follow, if any.
pub struct Request<'a> {
    pub system: &'a str,
    pub messages: &'a [Message],
    pub max_tokens: usize,
    pub schema: Option<Value>,
}

/// A successful reply.
#[derive(Debug)]
pub struct Answer {
    pub text: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The model stopped at the token limit, not at its own end.
    pub truncated: bool,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::OpenAi => "openai",
            Protocol::Anthropic => "anthropic",
        }
    }

    /// The path of the completion endpoint under the base URL.
    pub fn path(self) -> &'static str {
        match self {
            Protocol::OpenAi => "/chat/completions",
            Protocol::Anthropic => "/v1/messages",
        }
    }

    /// The path of the model list under the base URL.
    pub fn models_path(self) -> &'static str {
        match self {
            Protocol::OpenAi => "/models",
            Protocol::Anthropic => "/v1/models",
        }
    }

    pub fn body(self, s: &Settings, r: &Request) -> Value {
        let turns = r
            .messages
            .iter()
            .map(|m| json!({"role": m.role, "content": m.content}));
        let mut body = match self {
            Protocol::OpenAi => {
                let mut all = vec![json!({"role": "system", "content": r.system})];
                all.extend(turns);
                json!({"model": s.model, "messages": all, "max_tokens": r.max_tokens})
            }
            Protocol::Anthropic => json!({
                "model": s.model,
                "max_tokens": r.max_tokens,
                "system": r.system,
                "messages": turns.collect::<Vec<_>>(),
            }),
        };
        if let Some(t) = s.rest.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(seed) = s.rest.seed {
            body["seed"] = json!(seed);
        }
        if let Some(schema) = &r.schema {
            match self {
                Protocol::OpenAi => {
                    body["response_format"] = json!({"type": "json_schema", "json_schema":
                        {"name": "proposal", "strict": true, "schema": schema}})
                }
                Protocol::Anthropic => {
                    body["output_format"] = json!({"type": "json_schema", "schema": schema})
                }
            }
        }
        body
    }

    /// Headers besides the key: the Messages API's version, and its beta
    /// flag for a schema.
    pub fn headers(self, schema: bool) -> Vec<(&'static str, &'static str)> {
        match self {
            Protocol::OpenAi => vec![],
            Protocol::Anthropic if schema => vec![
                ("anthropic-version", "2023-06-01"),
                ("anthropic-beta", "structured-outputs-2025-11-13"),
            ],
            Protocol::Anthropic => vec![("anthropic-version", "2023-06-01")],
        }
    }

    pub fn extract(self, body: &Value) -> Option<Answer> {
        match self {
            Protocol::OpenAi => {
                let choice = &body["choices"][0];
                Some(Answer {
                    text: choice["message"]["content"].as_str()?.to_string(),
                    input_tokens: body["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
                    output_tokens: body["usage"]["completion_tokens"].as_u64().unwrap_or(0),
                    truncated: choice["finish_reason"] == "length",
                })
            }
            Protocol::Anthropic => Some(Answer {
                text: body["content"]
                    .as_array()?
                    .iter()
                    .filter_map(|b| b["text"].as_str())
                    .collect(),
                // The Messages API counts tokens read from or written to
                // its prompt cache apart from `input_tokens`; all were sent.
                input_tokens: [
                    "input_tokens",
                    "cache_read_input_tokens",
                    "cache_creation_input_tokens",
                ]
                .iter()
                .filter_map(|k| body["usage"][k].as_u64())
                .sum(),
                output_tokens: body["usage"]["output_tokens"].as_u64().unwrap_or(0),
                truncated: body["stop_reason"] == "max_tokens",
            }),
        }
    }
}

/// The context window a model list states for `model` (or its only
/// entry), under the names llama.cpp (`meta.n_ctx`), vLLM
/// (`max_model_len`) and others use.
pub fn window_in_models(body: &Value, model: &str) -> Option<usize> {
    let data = body["data"].as_array()?;
    let entry = data
        .iter()
        .find(|m| m["id"] == model)
        .or_else(|| (data.len() == 1).then(|| &data[0]))?;
    [
        &entry["meta"]["n_ctx"],
        &entry["max_model_len"],
        &entry["context_length"],
        &entry["max_context_length"],
        &entry["max_input_tokens"],
    ]
    .iter()
    .find_map(|v| v.as_u64())
    .map(|n| n as usize)
}

/// A refusal of a prompt as too long, with the token counts the server
/// gave: llama.cpp's "request (21693 tokens) exceeds the available context
/// size (8192 tokens)", OpenAI's `context_length_exceeded`, vLLM's
/// "maximum context length is 8192 tokens. However, you requested 9000
/// tokens", Anthropic's "prompt is too long: 210000 tokens > 200000 maximum".
pub fn too_long(body: &str) -> Option<(Option<usize>, Option<usize>)> {
    let lower = body.to_ascii_lowercase();
    let refused = lower.contains("exceed_context_size")
        || lower.contains("context_length_exceeded")
        || lower.contains("maximum context length")
        || lower.contains("prompt is too long")
        || (lower.contains("context") && lower.contains("exceeds"));
    if !refused {
        return None;
    }
    let mut counts: Vec<usize> = vec![];
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    for pair in words.windows(2) {
        if pair[1].starts_with("token") || pair[1] == "maximum" {
            if let Ok(n) = pair[0].parse() {
                counts.push(n);
            }
        }
    }
    let requested = counts.iter().max().copied();
    let limit = counts.iter().min().copied().filter(|_| counts.len() > 1);
    Some((requested, limit))
}

/// A refusal of the schema itself: the endpoint does not do constrained
/// output.
pub fn schema_refused(body: &str) -> bool {
    let lower = body.to_ascii_lowercase();
    ["response_format", "json_schema", "output_format", "grammar"]
        .iter()
        .any(|k| lower.contains(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_as_too_long_give_their_counts() {
        let llama = r#"{"error":{"code":400,"message":"request (21693 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error"}}"#;
        assert_eq!(too_long(llama), Some((Some(21693), Some(8192))));
        let vllm = "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens";
        assert_eq!(too_long(vllm), Some((Some(9000), Some(8192))));
        let anthropic = "prompt is too long: 210000 tokens > 200000 maximum";
        assert_eq!(too_long(anthropic), Some((Some(210000), Some(200000))));
        let openai = r#"{"error":{"code":"context_length_exceeded"}}"#;
        assert_eq!(too_long(openai), Some((None, None)));
        assert_eq!(too_long(r#"{"error":"invalid api key"}"#), None);
    }

    #[test]
    fn model_lists_give_the_window_where_they_state_it() {
        let llama =
            json!({"data": [{"id": "smollm2", "meta": {"n_ctx": 8192, "n_ctx_train": 8192}}]});
        assert_eq!(window_in_models(&llama, "other-name"), Some(8192));
        let vllm = json!({"data": [{"id": "a", "max_model_len": 4096}, {"id": "b", "max_model_len": 32768}]});
        assert_eq!(window_in_models(&vllm, "b"), Some(32768));
        assert_eq!(
            window_in_models(&vllm, "c"),
            None,
            "no guessing among several"
        );
        let openai = json!({"data": [{"id": "gpt-4o", "object": "model"}]});
        assert_eq!(window_in_models(&openai, "gpt-4o"), None);
    }

    #[test]
    fn finish_at_the_limit_is_truncation() {
        let body = json!({"choices": [{"message": {"content": "HYPO"}, "finish_reason": "length"}], "usage": {"prompt_tokens": 5, "completion_tokens": 8}});
        let a = Protocol::OpenAi.extract(&body).unwrap();
        assert!(a.truncated && a.output_tokens == 8);
        let body = json!({"content": [{"type": "text", "text": "x"}], "stop_reason": "max_tokens",
            "usage": {"input_tokens": 1, "cache_read_input_tokens": 40, "output_tokens": 5}});
        let a = Protocol::Anthropic.extract(&body).unwrap();
        assert!(a.truncated);
        assert_eq!(a.input_tokens, 41, "cached tokens were sent too");
    }
}
