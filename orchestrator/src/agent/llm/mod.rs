//! The API agents: an OpenAI-compatible chat-completions endpoint (which also
//! covers vLLM, Ollama and llama.cpp servers, and the local model server)
//! and the Anthropic Messages API. Both share the conversation, the context
//! budget, the structured reply, the bounded retries, and the repair rounds
//! in which an edit that does not apply goes back to the model with the
//! precise error.

mod http;
pub mod protocol;
#[cfg(test)]
mod tests;

use anyhow::Result;

use super::budget::{self, Budget, Tokens};
use super::{
    prompt, reply, structured, Agent, AgentFailure, Origin, Proposal, ProposalContext, Proposed,
    Round, Usage,
};
use crate::agent::config::{ApiAgentConfig, ReplyFormat};
use crate::agent::edit;
use http::{Endpoint, Trouble};
pub use protocol::Protocol;
use protocol::{Answer, Defaults, Message, Request, Settings};

/// The system prompt, in the server's language.
fn system(ctx: &ProposalContext) -> String {
    format!(
        "You are an expert in Linux networking and {} performance. \
         You propose exactly one measurable optimization per reply, in the requested format.",
        ctx.target.language
    )
}

/// Tokens a chat template adds around each turn, beyond its text
/// (llama.cpp's templates add 3 to 5).
const PER_TURN: usize = 16;

/// Room for a repair round's request: the error, cut to
/// [`REPAIR_ERROR_CHARS`], and the reply format.
const REPAIR_TOKENS: usize = 600;
const REPAIR_ERROR_CHARS: usize = 800;

/// How often a prompt refused as too long is cut again before the attempt
/// ends with the server's reason.
const MAX_RECUTS: usize = 2;

pub struct LlmAgent {
    name: String,
    endpoint: Endpoint,
    /// Ask for the JSON schema; cleared when the endpoint refuses it.
    json: bool,
    /// The context window, once asked of the configuration or the server.
    window: Option<Option<usize>>,
    /// The prompt's characters per token, once calibrated.
    counter: Option<Tokens>,
    /// Whether the server counts tokens for us (`/tokenize`).
    tokenizer: bool,
    rounds: Vec<Round>,
}

/// See [`LlmAgent::preview`].
#[derive(Debug, serde::Serialize)]
pub struct Preview {
    pub window: Option<usize>,
    pub reply_tokens: usize,
    /// By the server's tokenizer; `None` where it has none.
    pub prompt_tokens: Option<usize>,
    /// Whether any optional part was cut.
    pub cut: bool,
    pub prompt: String,
}

/// A repair round's extra turns: the unusable reply and why.
struct Repair {
    reply: String,
    request: String,
}

impl Repair {
    /// This repair, then with the unusable reply shortened, then without
    /// it: in a small window the prompt, the reply and the request may not
    /// fit together, and the request alone says what was wrong.
    fn shorter(&self) -> Vec<Repair> {
        let cut: String = self.reply.chars().take(REPAIR_ERROR_CHARS).collect();
        vec![
            Repair {
                reply: self.reply.clone(),
                request: self.request.clone(),
            },
            Repair {
                reply: format!("{cut}\n[... cut]"),
                request: self.request.clone(),
            },
            Repair {
                reply: "[reply omitted]".into(),
                request: self.request.clone(),
            },
        ]
    }
}

impl LlmAgent {
    pub fn new(name: &str, protocol: Protocol, config: ApiAgentConfig) -> Result<Self> {
        let json = match config.reply_format {
            ReplyFormat::Auto => protocol == Protocol::OpenAi,
            ReplyFormat::Json => true,
            ReplyFormat::Text => false,
        };
        Ok(Self {
            name: name.into(),
            endpoint: Endpoint::new(
                protocol,
                Settings::resolve(Defaults::of(name, protocol), config),
            )?,
            json,
            window: None,
            counter: None,
            tokenizer: false,
            rounds: vec![],
        })
    }

    fn key(&self) -> Result<Option<String>, AgentFailure> {
        let var = &self.endpoint.settings.api_key_env;
        if var.is_empty() {
            return Ok(None);
        }
        std::env::var(var)
            .map(Some)
            .map_err(|_| AgentFailure::Unavailable {
                message: format!("environment variable {var} is not set"),
                usage: Usage::default(),
            })
    }

    fn format(&self) -> &'static str {
        if self.json {
            structured::FORMAT
        } else {
            reply::FORMAT
        }
    }

    fn window(&mut self, key: Option<&str>) -> Option<usize> {
        if self.window.is_none() {
            let configured = self.endpoint.settings.rest.context_tokens;
            let window = configured
                .map(|w| w as usize)
                .or_else(|| self.endpoint.stated_window(key));
            tracing::info!(agent = %self.name, ?window, "context window");
            self.window = Some(window);
        }
        self.window.flatten()
    }

    /// The characters-per-token ratio of this prompt, by the server's
    /// tokenizer where it has one.
    fn counter(&mut self, ctx: &ProposalContext, key: Option<&str>) -> Tokens {
        if let Some(c) = self.counter {
            return c;
        }
        // The densest of the two texts sets the ratio: code takes more
        // tokens per character than the lessons' prose, and the required
        // part, mostly code, must not be counted short.
        let whole = prompt::build(ctx, self.format(), None).unwrap_or_default();
        let required = prompt::required_only(ctx, self.format());
        let ratios: Vec<Tokens> = [whole, required]
            .iter()
            .filter_map(|text| {
                let n = self.endpoint.tokenize(key, text)?;
                Some(Tokens::calibrated(text.chars().count(), n))
            })
            .collect();
        self.tokenizer = !ratios.is_empty();
        let c = ratios
            .into_iter()
            .reduce(Tokens::denser)
            .unwrap_or(Tokens::CONSERVATIVE);
        self.counter = Some(c);
        c
    }

    /// The prompt cut to the window, less the reply and the system
    /// message, and its reply's token limit. Where the window allows, room
    /// for a repair round is kept from the start, so that every round sends
    /// the same prompt and the server's prompt cache holds it; where it
    /// does not, a repair round's prompt is cut shorter. Checked against the
    /// server's own count where it has one.
    fn fitted(
        &mut self,
        ctx: &ProposalContext,
        key: Option<&str>,
        repair: Option<&Repair>,
    ) -> Result<(String, usize), String> {
        let max_reply = self.endpoint.settings.max_tokens as usize;
        let Some(window) = self.window(key) else {
            let whole = prompt::build(ctx, self.format(), None).map_err(|o| o.to_string())?;
            return Ok((whole, max_reply));
        };
        for _ in 0..3 {
            let counter = self.counter(ctx, key);
            let base = counter.count(&system(ctx)) + 2 * PER_TURN;
            let (reply, _) = budget::split(window, max_reply, 0);
            let reserved = (self.endpoint.settings.repair_rounds > 0)
                .then_some(reply + REPAIR_TOKENS + 2 * PER_TURN);
            let actual =
                repair.map(|r| counter.count(&r.reply) + counter.count(&r.request) + 2 * PER_TURN);
            let mut built = Err(String::new());
            for extra in [reserved, actual.or(Some(0))].into_iter().flatten() {
                let (_, room) = budget::split(window, max_reply, base + extra);
                let b = Budget {
                    tokens: room,
                    counter,
                };
                built = prompt::build(ctx, self.format(), Some(&b))
                    .map(|text| (text, room))
                    .map_err(|o| o.to_string());
                if built.is_ok() {
                    break;
                }
            }
            let (text, room) = built?;
            let counted = if self.tokenizer {
                self.endpoint.tokenize(key, &text)
            } else {
                None
            };
            match counted {
                Some(n) if n > room => {
                    self.counter = Some(counter.scaled(counter.count(&text), n + n / 50));
                }
                _ => return Ok((text, reply)),
            }
        }
        Err("the prompt could not be cut to the server's own token count".into())
    }

    /// One answer, the prompt cut again if the server refuses it as too
    /// long, and sent as text if it refuses the schema.
    fn ask(
        &mut self,
        ctx: &ProposalContext,
        key: Option<&str>,
        repair: Option<&Repair>,
        usage: &mut Usage,
        sent: &mut usize,
    ) -> Result<Answer, AgentFailure> {
        let unavailable = |message: String, usage: &Usage| AgentFailure::Unavailable {
            message,
            usage: usage.clone(),
        };
        let mut recuts = 0;
        loop {
            let variants =
                repair.map_or(vec![None], |r| r.shorter().into_iter().map(Some).collect());
            let mut fitted = Err(String::new());
            let mut repair = None;
            for v in variants {
                fitted = self.fitted(ctx, key, v.as_ref());
                repair = v;
                if fitted.is_ok() {
                    break;
                }
            }
            let (prompt, max_tokens) =
                fitted.map_err(|m| unavailable(format!("not sent: {m}"), usage))?;
            let mut messages = vec![Message {
                role: "user",
                content: prompt,
            }];
            if let Some(r) = &repair {
                messages.push(Message {
                    role: "assistant",
                    content: r.reply.clone(),
                });
                messages.push(Message {
                    role: "user",
                    content: r.request.clone(),
                });
            }
            let files: Vec<&str> = ctx.files.keys().map(String::as_str).collect();
            let system = system(ctx);
            let request = Request {
                system: &system,
                messages: &messages,
                max_tokens,
                schema: self.json.then(|| structured::schema(&files)),
            };
            match self.endpoint.exchange(key, &request, sent) {
                Ok(answer) => {
                    usage.add(&self.priced(&answer));
                    return Ok(answer);
                }
                Err(Trouble::TooLong {
                    message,
                    counted,
                    limit,
                }) if recuts < MAX_RECUTS => {
                    recuts += 1;
                    tracing::warn!(agent = %self.name, "prompt refused as too long, cutting it: {message}");
                    let estimated: usize = messages
                        .iter()
                        .map(|m| self.counter.unwrap_or(Tokens::CONSERVATIVE).count(&m.content))
                        .sum();
                    let counted = counted.unwrap_or(estimated + estimated / 4);
                    let counter = self.counter.unwrap_or(Tokens::CONSERVATIVE);
                    self.counter = Some(counter.scaled(estimated, counted));
                    let window = limit.or(self.window.flatten()).unwrap_or(counted * 3 / 4);
                    self.window = Some(Some(window));
                }
                Err(Trouble::TooLong { message, .. }) => {
                    return Err(unavailable(
                        format!("the prompt does not fit the model's context window, cut {recuts} times: {message}"),
                        usage,
                    ))
                }
                Err(Trouble::SchemaRefused(message)) => {
                    tracing::warn!(agent = %self.name, "the endpoint refused the JSON schema; text replies from now on: {message}");
                    self.json = false;
                }
                Err(Trouble::Unavailable(message)) => return Err(unavailable(message, usage)),
                Err(Trouble::NotAReply(message)) => {
                    return Err(AgentFailure::Malformed {
                        message,
                        usage: usage.clone(),
                    })
                }
            }
        }
    }

    /// The prompt the next proposal would send, without sending it: its
    /// size by the server's own count where it has one, and the window.
    pub fn preview(&mut self, ctx: &ProposalContext) -> Result<Preview, String> {
        let key = self.key().map_err(|f| f.to_string())?;
        let (prompt, reply_tokens) = self.fitted(ctx, key.as_deref(), None)?;
        Ok(Preview {
            window: self.window.flatten(),
            reply_tokens,
            prompt_tokens: self.endpoint.tokenize(key.as_deref(), &prompt),
            cut: prompt.contains("omitted to fit the model's context window"),
            prompt,
        })
    }

    fn priced(&self, a: &Answer) -> Usage {
        let s = &self.endpoint.settings;
        Usage {
            input_tokens: a.input_tokens,
            output_tokens: a.output_tokens,
            cost_usd: (a.input_tokens as f64 * s.price_input_per_mtok
                + a.output_tokens as f64 * s.price_output_per_mtok)
                / 1e6,
        }
    }

    fn parse(&self, text: &str) -> Result<reply::Reply> {
        if self.json {
            structured::parse(text)
        } else {
            reply::parse(text)
        }
    }
}

fn proposed(r: reply::Reply, usage: Usage) -> Proposed {
    if !r.stack.is_empty() {
        return Proposed::Stack {
            parts: r.stack,
            usage: Some(usage),
        };
    }
    if let Some(of) = r.retry {
        return Proposed::Retry {
            of,
            usage: Some(usage),
        };
    }
    Proposed::Edits(Proposal {
        hypothesis: r.hypothesis,
        category: r.category,
        playbook_id: None,
        edits: r.edits,
        usage: Some(usage),
        origin: Origin::Agent,
        retry_of: None,
    })
}

impl Agent for LlmAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn rounds(&self) -> &[Round] {
        &self.rounds
    }

    fn propose(&mut self, ctx: &ProposalContext) -> Result<Proposed> {
        let mut usage = Usage::default();
        let key = self.key()?;
        let mut sent = 0;
        let mut repair: Option<Repair> = None;
        let mut round = 0;
        self.rounds.clear();
        loop {
            let answer = self.ask(ctx, key.as_deref(), repair.as_ref(), &mut usage, &mut sent)?;
            let checked = match self.parse(&answer.text) {
                Err(e) => Err(("unparsed", e)),
                Ok(r) => match edit::apply_all(&ctx.files, &r.edits) {
                    Ok(_) => Ok(r),
                    Err(e) => Err(("not_applied", e)),
                },
            };
            self.rounds.push(Round {
                reply: answer.text.clone(),
                outcome: checked
                    .as_ref()
                    .map_or_else(|(o, _)| *o, |_| "usable")
                    .into(),
                error: checked.as_ref().err().map(|(_, e)| format!("{e:#}")),
            });
            let why = match checked.map_err(|(_, e)| e) {
                Ok(r) => return Ok(proposed(r, usage)),
                Err(e) if answer.truncated => format!(
                    "the reply was cut at the token limit ({} tokens) before it was complete: {e:#}",
                    answer.output_tokens
                ),
                Err(e) => format!("{e:#}"),
            };
            if round == self.endpoint.settings.repair_rounds {
                return Err(AgentFailure::Malformed {
                    message: format!("after {round} repair rounds ({sent} requests): {why}"),
                    usage,
                }
                .into());
            }
            round += 1;
            let why: String = why.chars().take(REPAIR_ERROR_CHARS).collect();
            repair = Some(Repair {
                reply: answer.text,
                request: format!(
                    "Your reply could not be used: {why}\nReply again with the same hypothesis, \
                     shorter if it was cut, copying the search lines exactly from the champion \
                     source, in this format:\n{}",
                    self.format()
                ),
            });
        }
    }
}
