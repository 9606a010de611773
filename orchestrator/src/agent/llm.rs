//! The API agents: an OpenAI-compatible chat-completions endpoint (which also
//! covers vLLM, Ollama and llama.cpp servers) and the Anthropic Messages API.
//! Both share the conversation, the bounded retries with backoff, and the
//! repair rounds in which an edit that does not apply goes back to the model
//! with the precise error.

use anyhow::Result;
use serde_json::{json, Value};
use std::time::Duration;

use super::{prompt, reply, Agent, AgentFailure, Proposal, ProposalContext, Proposed, Usage};
use crate::config::ApiAgentConfig;
use crate::edit;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    OpenAi,
    Anthropic,
}

impl Protocol {
    /// (base URL, model, key variable, input price, output price)
    fn defaults(self) -> (&'static str, &'static str, &'static str, f64, f64) {
        match self {
            Protocol::OpenAi => (
                "https://api.openai.com/v1",
                "gpt-4o",
                "OPENAI_API_KEY",
                2.5,
                10.0,
            ),
            Protocol::Anthropic => (
                "https://api.anthropic.com",
                "claude-sonnet-4-5",
                "ANTHROPIC_API_KEY",
                3.0,
                15.0,
            ),
        }
    }
}

/// An [`ApiAgentConfig`] with the protocol's defaults filled in.
struct Settings {
    base_url: String,
    model: String,
    api_key_env: String,
    timeout_s: u64,
    max_retries: u32,
    backoff_ms: u64,
    repair_rounds: u32,
    max_tokens: u32,
    price_input_per_mtok: f64,
    price_output_per_mtok: f64,
}

impl Settings {
    fn resolve(protocol: Protocol, c: ApiAgentConfig) -> Self {
        let (url, model, key, pin, pout) = protocol.defaults();
        Self {
            base_url: c.base_url.unwrap_or_else(|| url.into()),
            model: c.model.unwrap_or_else(|| model.into()),
            api_key_env: c.api_key_env.unwrap_or_else(|| key.into()),
            timeout_s: c.timeout_s,
            max_retries: c.max_retries,
            backoff_ms: c.backoff_ms,
            repair_rounds: c.repair_rounds,
            max_tokens: c.max_tokens,
            price_input_per_mtok: c.price_input_per_mtok.unwrap_or(pin),
            price_output_per_mtok: c.price_output_per_mtok.unwrap_or(pout),
        }
    }
}

pub struct LlmAgent {
    protocol: Protocol,
    config: Settings,
    client: reqwest::blocking::Client,
    name: String,
}

#[derive(Clone)]
struct Message {
    role: &'static str,
    content: String,
}

const SYSTEM: &str = "You are an expert in Linux networking, io_uring and C performance. \
                      You propose exactly one measurable optimization per reply, in the requested format.";

impl LlmAgent {
    pub fn new(protocol: Protocol, config: ApiAgentConfig) -> Result<Self> {
        let config = Settings::resolve(protocol, config);
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(config.timeout_s))
            .build()?;
        let name = match protocol {
            Protocol::OpenAi => "openai",
            Protocol::Anthropic => "anthropic",
        };
        Ok(Self {
            protocol,
            config,
            client,
            name: name.into(),
        })
    }

    fn request(&self, key: &str, messages: &[Message]) -> reqwest::blocking::RequestBuilder {
        let base = self.config.base_url.trim_end_matches('/');
        match self.protocol {
            Protocol::OpenAi => {
                let mut all = vec![json!({"role": "system", "content": SYSTEM})];
                all.extend(messages.iter().map(|m| json!({"role": m.role, "content": m.content})));
                self.client
                    .post(format!("{base}/chat/completions"))
                    .bearer_auth(key)
                    .json(&json!({"model": self.config.model, "messages": all, "max_tokens": self.config.max_tokens}))
            }
            Protocol::Anthropic => self
                .client
                .post(format!("{base}/v1/messages"))
                .header("x-api-key", key)
                .header("anthropic-version", "2023-06-01")
                .json(&json!({
                    "model": self.config.model,
                    "max_tokens": self.config.max_tokens,
                    "system": SYSTEM,
                    "messages": messages.iter().map(|m| json!({"role": m.role, "content": m.content})).collect::<Vec<_>>(),
                })),
        }
    }

    /// Text and token counts of a successful response body.
    fn extract(&self, body: &Value) -> Option<(String, u64, u64)> {
        match self.protocol {
            Protocol::OpenAi => Some((
                body["choices"][0]["message"]["content"]
                    .as_str()?
                    .to_string(),
                body["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
                body["usage"]["completion_tokens"].as_u64().unwrap_or(0),
            )),
            Protocol::Anthropic => {
                let text: String = body["content"]
                    .as_array()?
                    .iter()
                    .filter_map(|b| b["text"].as_str())
                    .collect();
                Some((
                    text,
                    body["usage"]["input_tokens"].as_u64().unwrap_or(0),
                    body["usage"]["output_tokens"].as_u64().unwrap_or(0),
                ))
            }
        }
    }

    /// One exchange, with bounded retries on transport errors, 429 and 5xx.
    fn exchange(
        &self,
        key: &str,
        messages: &[Message],
        usage: &mut Usage,
    ) -> Result<String, AgentFailure> {
        let mut last = String::new();
        for attempt in 0..=self.config.max_retries {
            if attempt > 0 {
                let backoff = Duration::from_millis(self.config.backoff_ms << (attempt - 1).min(6));
                std::thread::sleep(backoff);
            }
            let response = match self.request(key, messages).send() {
                Ok(r) => r,
                Err(e) => {
                    last = if e.is_timeout() {
                        format!("request timed out after {} s", self.config.timeout_s)
                    } else {
                        format!("request failed: {}", without_url(&e))
                    };
                    continue;
                }
            };
            let status = response.status();
            let body = response.text().unwrap_or_default();
            if status.as_u16() == 429 || status.is_server_error() {
                last = format!("HTTP {status}: {}", excerpt(&body));
                continue;
            }
            if !status.is_success() {
                return Err(AgentFailure::Unavailable {
                    message: format!("HTTP {status}: {}", excerpt(&body)),
                    usage: usage.clone(),
                });
            }
            let parsed: Option<(String, u64, u64)> = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| self.extract(&v));
            let Some((text, input, output)) = parsed else {
                return Err(AgentFailure::Malformed {
                    message: format!(
                        "the response body is not a {} reply: {}",
                        self.name,
                        excerpt(&body)
                    ),
                    usage: usage.clone(),
                });
            };
            usage.add(&Usage {
                input_tokens: input,
                output_tokens: output,
                cost_usd: (input as f64 * self.config.price_input_per_mtok
                    + output as f64 * self.config.price_output_per_mtok)
                    / 1e6,
            });
            return Ok(text);
        }
        Err(AgentFailure::Unavailable {
            message: format!("gave up after {} retries: {last}", self.config.max_retries),
            usage: usage.clone(),
        })
    }
}

/// A reqwest error's text without the URL, which may carry a query-string key.
fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(url) = e.url() {
        s = s.replace(url.as_str(), "<endpoint>");
    }
    s
}

fn excerpt(body: &str) -> String {
    body.chars().take(300).collect()
}

impl Agent for LlmAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn propose(&mut self, ctx: &ProposalContext) -> Result<Proposed> {
        let mut usage = Usage::default();
        let Ok(key) = std::env::var(&self.config.api_key_env) else {
            return Err(AgentFailure::Unavailable {
                message: format!(
                    "environment variable {} is not set",
                    self.config.api_key_env
                ),
                usage,
            }
            .into());
        };
        let mut messages = vec![Message {
            role: "user",
            content: prompt::build(ctx, reply::FORMAT),
        }];
        let mut round = 0;
        loop {
            let text = self.exchange(&key, &messages, &mut usage)?;
            let checked =
                reply::parse(&text).and_then(|r| edit::apply_all(&ctx.files, &r.edits).map(|_| r));
            match checked {
                Ok(r) => {
                    return Ok(Proposed::Edits(Proposal {
                        hypothesis: r.hypothesis,
                        category: r.category,
                        playbook_id: None,
                        edits: r.edits,
                        usage: Some(usage),
                    }))
                }
                Err(e) if round < self.config.repair_rounds => {
                    round += 1;
                    messages.push(Message {
                        role: "assistant",
                        content: text,
                    });
                    messages.push(Message {
                        role: "user",
                        content: format!(
                            "Your reply could not be used: {e:#}\nReply again with the same hypothesis, \
                             copying the search lines exactly from the champion source, in this format:\n{}",
                            reply::FORMAT
                        ),
                    });
                }
                Err(e) => {
                    return Err(AgentFailure::Malformed {
                        message: format!("after {round} repair rounds: {e:#}"),
                        usage,
                    }
                    .into())
                }
            }
        }
    }
}
