//! The endpoint over HTTP: one exchange with bounded retries on what a
//! retry can cure (transport errors, 429, 5xx), and the refusals a retry
//! cannot, told apart so that the agent can answer them: a prompt too long
//! for the context, a schema the endpoint does not do, anything else.

use serde_json::{json, Value};
use std::time::Duration;

use super::protocol::{self, Answer, Protocol, Request, Settings};

/// Why an exchange produced no answer.
#[derive(Debug)]
pub enum Trouble {
    /// The server refused the prompt as longer than the context window,
    /// with its token counts where it gave them.
    TooLong {
        message: String,
        counted: Option<usize>,
        limit: Option<usize>,
    },
    /// The server refused the JSON schema.
    SchemaRefused(String),
    /// Unreachable, slow, rate-limited or refusing after every retry, or
    /// a client error a retry cannot cure.
    Unavailable(String),
    /// A successful status with a body that is not a reply.
    NotAReply(String),
}

pub struct Endpoint {
    pub protocol: Protocol,
    pub settings: Settings,
    client: reqwest::blocking::Client,
}

impl Endpoint {
    pub fn new(protocol: Protocol, settings: Settings) -> anyhow::Result<Self> {
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(settings.timeout_s))
            .build()?;
        Ok(Self {
            protocol,
            settings,
            client,
        })
    }

    fn post(&self, url: String, key: Option<&str>) -> reqwest::blocking::RequestBuilder {
        self.authorized(self.client.post(url), key)
    }

    fn authorized(
        &self,
        mut req: reqwest::blocking::RequestBuilder,
        key: Option<&str>,
    ) -> reqwest::blocking::RequestBuilder {
        if let Some(key) = key {
            req = match self.protocol {
                Protocol::OpenAi => req.bearer_auth(key),
                Protocol::Anthropic => req.header("x-api-key", key),
            };
        }
        req
    }

    /// One exchange, with bounded retries and exponential backoff on
    /// transport errors, 429 and 5xx. Each request sent counts in `sent`.
    pub fn exchange(
        &self,
        key: Option<&str>,
        request: &Request,
        sent: &mut usize,
    ) -> Result<Answer, Trouble> {
        let url = format!("{}{}", self.settings.base(), self.protocol.path());
        let body = self.protocol.body(&self.settings, request);
        let rest = &self.settings;
        let mut last = String::new();
        for attempt in 0..=rest.max_retries {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(
                    rest.backoff_ms << (attempt - 1).min(6),
                ));
            }
            let mut req = self.post(url.clone(), key).json(&body);
            for (name, value) in self.protocol.headers(request.schema.is_some()) {
                req = req.header(name, value);
            }
            *sent += 1;
            let response = match req.send() {
                Ok(r) => r,
                Err(e) => {
                    last = if e.is_timeout() {
                        format!("request timed out after {} s", rest.timeout_s)
                    } else {
                        format!("request failed: {}", without_url(&e))
                    };
                    continue;
                }
            };
            let status = response.status();
            let text = response.text().unwrap_or_default();
            if status.as_u16() == 429 || status.is_server_error() {
                last = format!("HTTP {status}: {}", excerpt(&text));
                continue;
            }
            if !status.is_success() {
                let message = format!("HTTP {status}: {}", excerpt(&text));
                if let Some((counted, limit)) = protocol::too_long(&text) {
                    return Err(Trouble::TooLong {
                        message,
                        counted,
                        limit,
                    });
                }
                if request.schema.is_some() && protocol::schema_refused(&text) {
                    return Err(Trouble::SchemaRefused(message));
                }
                return Err(Trouble::Unavailable(message));
            }
            return serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| self.protocol.extract(&v))
                .ok_or_else(|| {
                    Trouble::NotAReply(format!(
                        "the response body is not a {} reply: {}",
                        self.protocol.name(),
                        excerpt(&text)
                    ))
                });
        }
        Err(Trouble::Unavailable(format!(
            "gave up after {} retries: {last}",
            rest.max_retries
        )))
    }

    /// The context window the server's model list states, if it does.
    pub fn stated_window(&self, key: Option<&str>) -> Option<usize> {
        let url = format!("{}{}", self.settings.base(), self.protocol.models_path());
        let mut req = self
            .authorized(self.client.get(url), key)
            .timeout(Duration::from_secs(10));
        for (name, value) in self.protocol.headers(false) {
            req = req.header(name, value);
        }
        let body: Value = req.send().ok()?.error_for_status().ok()?.json().ok()?;
        protocol::window_in_models(&body, &self.settings.model)
    }

    /// The token count of `text` by the server's own tokenizer, where it
    /// has a `/tokenize` endpoint (llama.cpp does, beside `/v1`).
    pub fn tokenize(&self, key: Option<&str>, text: &str) -> Option<usize> {
        let root = self.settings.base().trim_end_matches("/v1");
        let body: Value = self
            .post(format!("{root}/tokenize"), key)
            .timeout(Duration::from_secs(30))
            .json(&json!({ "content": text }))
            .send()
            .ok()?
            .error_for_status()
            .ok()?
            .json()
            .ok()?;
        body["tokens"].as_array().map(|t| t.len())
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
