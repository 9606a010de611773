//! The API agents: an OpenAI-compatible chat-completions endpoint (which also
//! covers vLLM, Ollama and llama.cpp servers) and the Anthropic Messages API.
//! Both share the conversation, the bounded retries with backoff, and the
//! repair rounds in which an edit that does not apply goes back to the model
//! with the precise error.

use anyhow::Result;
use serde_json::{json, Value};
use std::time::Duration;

use super::{
    prompt, reply, Agent, AgentFailure, Origin, Proposal, ProposalContext, Proposed, Usage,
};
use crate::agent::edit;
use crate::config::ApiAgentConfig;

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
                Ok(r) if !r.stack.is_empty() => {
                    return Ok(Proposed::Stack {
                        parts: r.stack,
                        usage: Some(usage),
                    })
                }
                Ok(r) if r.retry.is_some() => {
                    return Ok(Proposed::Retry {
                        of: r.retry.expect("checked"),
                        usage: Some(usage),
                    })
                }
                Ok(r) => {
                    return Ok(Proposed::Edits(Proposal {
                        hypothesis: r.hypothesis,
                        category: r.category,
                        playbook_id: None,
                        edits: r.edits,
                        usage: Some(usage),
                        origin: Origin::Agent,
                        retry_of: None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};

    /// One canned answer of the fake endpoint.
    struct Canned {
        status: u16,
        body: String,
        delay_ms: u64,
    }

    fn ok(body: Value) -> Canned {
        Canned {
            status: 200,
            body: body.to_string(),
            delay_ms: 0,
        }
    }

    fn status(code: u16) -> Canned {
        Canned {
            status: code,
            body: "{\"error\":\"nope\"}".into(),
            delay_ms: 0,
        }
    }

    /// A local HTTP server that answers each request with the next canned
    /// response and records what it was sent.
    fn fake_endpoint(answers: Vec<Canned>) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for answer in answers {
                let Ok((mut stream, _)) = listener.accept() else {
                    return;
                };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut head = String::new();
                let mut len = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                    head.push_str(&line);
                }
                let mut body = vec![0; len];
                reader.read_exact(&mut body).ok();
                log.lock()
                    .unwrap()
                    .push(format!("{head}\n{}", String::from_utf8_lossy(&body)));
                std::thread::sleep(Duration::from_millis(answer.delay_ms));
                let _ = write!(
                    stream,
                    "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                    answer.status,
                    answer.body.len(),
                    answer.body
                );
            }
        });
        (url, seen)
    }

    const FILE: &str = "int main(void)\n{\n\treturn 0;\n}\n";

    fn context() -> ProposalContext {
        let files = BTreeMap::from([("treatment/server.c".to_string(), FILE.to_string())]);
        ProposalContext::for_tests(files, std::path::Path::new(""))
    }

    const GOOD: &str = "HYPOTHESIS: return early\nCATEGORY: test\n<<<<<<< SEARCH treatment/server.c\n\treturn 0;\n=======\n\treturn 1;\n>>>>>>> REPLACE\n";
    const BAD_SEARCH: &str = "HYPOTHESIS: return early\n<<<<<<< SEARCH treatment/server.c\n\treturn 7;\n=======\n\treturn 1;\n>>>>>>> REPLACE\n";

    fn openai_body(text: &str) -> Value {
        json!({"choices": [{"message": {"role": "assistant", "content": text}}], "usage": {"prompt_tokens": 1000, "completion_tokens": 100}})
    }

    fn agent(protocol: Protocol, url: &str, key_env: &str) -> LlmAgent {
        std::env::set_var(key_env, "sk-test-SECRET");
        LlmAgent::new(
            protocol,
            ApiAgentConfig {
                base_url: Some(url.into()),
                model: Some("test-model".into()),
                api_key_env: Some(key_env.into()),
                timeout_s: 1,
                max_retries: 2,
                backoff_ms: 10,
                repair_rounds: 1,
                ..Default::default()
            },
        )
        .unwrap()
    }

    fn failure(r: Result<Proposed>) -> AgentFailure {
        match r {
            Err(e) => match e.downcast::<AgentFailure>() {
                Ok(f) => f,
                Err(e) => panic!("not an agent failure: {e:#}"),
            },
            Ok(_) => panic!("expected a failure"),
        }
    }

    #[test]
    fn openai_reply_becomes_a_proposal_with_usage_and_cost() {
        let (url, seen) = fake_endpoint(vec![ok(openai_body(GOOD))]);
        let mut a = agent(Protocol::OpenAi, &url, "RATCHET_TEST_KEY_OK");
        let Proposed::Edits(p) = a.propose(&context()).unwrap() else {
            panic!()
        };
        assert_eq!(p.hypothesis, "return early");
        assert_eq!(p.edits.len(), 1);
        let u = p.usage.unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (1000, 100));
        assert!((u.cost_usd - (1000.0 * 2.5 + 100.0 * 10.0) / 1e6).abs() < 1e-12);
        let req = &seen.lock().unwrap()[0];
        assert!(req.starts_with("POST /chat/completions"), "{req}");
        assert!(req
            .to_ascii_lowercase()
            .contains("authorization: bearer sk-test-secret"));
        assert!(req.contains("test-model") && req.contains("Champion source"));
    }

    #[test]
    fn anthropic_speaks_the_messages_protocol() {
        let body = json!({"content": [{"type": "text", "text": GOOD}], "usage": {"input_tokens": 10, "output_tokens": 5}});
        let (url, seen) = fake_endpoint(vec![ok(body)]);
        let mut a = agent(Protocol::Anthropic, &url, "RATCHET_TEST_KEY_ANTHROPIC");
        let Proposed::Edits(p) = a.propose(&context()).unwrap() else {
            panic!()
        };
        assert_eq!(p.usage.unwrap().input_tokens, 10);
        let req = seen.lock().unwrap()[0].to_ascii_lowercase();
        assert!(req.starts_with("post /v1/messages"), "{req}");
        assert!(
            req.contains("x-api-key: sk-test-secret")
                && req.contains("anthropic-version: 2023-06-01")
        );
    }

    #[test]
    fn rate_limits_and_server_errors_are_retried() {
        let (url, seen) = fake_endpoint(vec![status(429), status(503), ok(openai_body(GOOD))]);
        let mut a = agent(Protocol::OpenAi, &url, "RATCHET_TEST_KEY_RETRY");
        assert!(matches!(a.propose(&context()).unwrap(), Proposed::Edits(_)));
        assert_eq!(seen.lock().unwrap().len(), 3);
    }

    #[test]
    fn retries_are_bounded() {
        let (url, seen) = fake_endpoint(vec![status(500), status(500), status(500), status(500)]);
        let mut a = agent(Protocol::OpenAi, &url, "RATCHET_TEST_KEY_BOUND");
        let f = failure(a.propose(&context()));
        assert!(
            matches!(&f, AgentFailure::Unavailable { message, .. } if message.contains("gave up after 2 retries")),
            "{f}"
        );
        assert_eq!(seen.lock().unwrap().len(), 3);
    }

    #[test]
    fn a_slow_endpoint_times_out() {
        let slow = || Canned {
            status: 200,
            body: openai_body(GOOD).to_string(),
            delay_ms: 1500,
        };
        let (url, _) = fake_endpoint(vec![slow(), slow(), slow()]);
        let mut a = agent(Protocol::OpenAi, &url, "RATCHET_TEST_KEY_SLOW");
        let f = failure(a.propose(&context()));
        assert!(f.to_string().contains("timed out"), "{f}");
    }

    #[test]
    fn client_errors_are_not_retried_and_the_key_is_not_echoed() {
        let (url, seen) = fake_endpoint(vec![status(401)]);
        let mut a = agent(Protocol::OpenAi, &url, "RATCHET_TEST_KEY_401");
        let f = failure(a.propose(&context()));
        assert!(f.to_string().contains("401"), "{f}");
        assert!(!f.to_string().contains("sk-test-SECRET"));
        assert_eq!(seen.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_body_that_is_not_a_reply_is_malformed() {
        let (url, _) = fake_endpoint(vec![Canned {
            status: 200,
            body: "<html>proxy error</html>".into(),
            delay_ms: 0,
        }]);
        let mut a = agent(Protocol::OpenAi, &url, "RATCHET_TEST_KEY_HTML");
        assert!(matches!(
            failure(a.propose(&context())),
            AgentFailure::Malformed { .. }
        ));
    }

    #[test]
    fn an_edit_that_does_not_apply_goes_back_with_the_error() {
        let (url, seen) = fake_endpoint(vec![ok(openai_body(BAD_SEARCH)), ok(openai_body(GOOD))]);
        let mut a = agent(Protocol::OpenAi, &url, "RATCHET_TEST_KEY_REPAIR");
        let Proposed::Edits(p) = a.propose(&context()).unwrap() else {
            panic!()
        };
        assert_eq!(
            p.usage.unwrap().input_tokens,
            2000,
            "both rounds are paid for"
        );
        let second = &seen.lock().unwrap()[1];
        assert!(
            second.contains("could not be used") && second.contains("search text not found"),
            "{second}"
        );
    }

    #[test]
    fn repairs_are_bounded_too() {
        let (url, _) = fake_endpoint(vec![
            ok(openai_body("no format")),
            ok(openai_body("still none")),
        ]);
        let mut a = agent(Protocol::OpenAi, &url, "RATCHET_TEST_KEY_REPAIR2");
        let f = failure(a.propose(&context()));
        assert!(
            matches!(&f, AgentFailure::Malformed { message, .. } if message.contains("1 repair rounds")),
            "{f}"
        );
    }

    #[test]
    fn a_missing_key_names_the_variable() {
        let mut a = agent(
            Protocol::OpenAi,
            "http://127.0.0.1:9",
            "RATCHET_TEST_KEY_MISSING",
        );
        std::env::remove_var("RATCHET_TEST_KEY_MISSING");
        let f = failure(a.propose(&context()));
        assert!(f.to_string().contains("RATCHET_TEST_KEY_MISSING"), "{f}");
    }
}
