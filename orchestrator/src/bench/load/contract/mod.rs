//! The request/response contract every server must honour, and the judgement
//! of one connection's bytes against it: one request or several
//! (keep-alive), a fixed response or one with variable parts
//! ([`template`]), closed by the server or by the client. Every connection is judged in full:
//! a sampled or first-and-last-byte check lets extra bytes and a missing FIN
//! through (see REFERENCE.md, "Weaknesses of that published harness").

mod template;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::check::range;

pub use template::{Progress, Shape, Template};

/// What a client sends, what every response must be, how many requests a
/// connection carries and who closes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contract {
    pub request: Vec<u8>,
    pub response: Template,
    /// Requests per connection, each answered before the next is sent
    /// (keep-alive when more than one).
    pub requests: u32,
    pub closer: Closer,
}

/// Who ends a connection once its last response is in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Closer {
    /// The server closes (its FIN) after its last response, unasked.
    #[default]
    Server,
    /// The client shuts its side down after the last response; the server
    /// must then close, adding nothing.
    Client,
}

/// Why one connection failed. The order is the order of the counters in a
/// [`crate::bench::load::loadgen::LoadSnapshot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    Connect,
    Reset,
    Timeout,
    Truncated,
    WrongBytes,
    ExtraBytes,
}

/// One count per failure class, indexed as [`Failure::ALL`].
pub type FailureCounts = [u64; Failure::COUNT];

impl Failure {
    pub const COUNT: usize = 6;
    pub const ALL: [Failure; Failure::COUNT] = [
        Failure::Connect,
        Failure::Reset,
        Failure::Timeout,
        Failure::Truncated,
        Failure::WrongBytes,
        Failure::ExtraBytes,
    ];

    pub fn index(self) -> usize {
        self as usize
    }
}

impl Contract {
    /// One request, one fixed response, the server closing: the shape of
    /// the shipped contract.
    #[cfg(test)]
    pub fn fixed(request: &[u8], response: &[u8]) -> Self {
        Self {
            request: request.to_vec(),
            response: Template::fixed(response),
            requests: 1,
            closer: Closer::Server,
        }
    }

    /// Where the response under way ends in `buf`: Some(length) once it is
    /// whole, None while more bytes may complete it.
    pub fn response_end(&self, buf: &[u8]) -> Result<Option<usize>, Failure> {
        match self.response.progress(buf) {
            Progress::Complete(n) => Ok(Some(n)),
            Progress::Partial => Ok(None),
            Progress::Wrong => Err(Failure::WrongBytes),
        }
    }

    /// Judges a whole connection's bytes, received after the client sent
    /// all its requests at once: `head` holds the first bytes (at least
    /// [`Self::head_len`] of them when that many arrived) and `total`
    /// counts every byte. Exactly `requests` responses, then nothing.
    pub fn check(&self, head: &[u8], total: usize) -> Result<(), Failure> {
        let mut at = 0;
        for _ in 0..self.requests {
            match self.response_end(&head[at..])? {
                Some(n) => at += n,
                None => return Err(Failure::Truncated),
            }
        }
        if total > at {
            return Err(Failure::ExtraBytes);
        }
        Ok(())
    }

    /// How many leading bytes a client must keep to judge a connection.
    pub fn head_len(&self) -> usize {
        self.requests as usize * self.response.max_len() + 1
    }

    /// Every request of a connection, back to back: how a client that
    /// cannot wait for each response (the emulated meter's queued
    /// backlog) sends them.
    pub fn pipelined(&self) -> Vec<u8> {
        self.request.repeat(self.requests as usize)
    }
}

/// `[contract]` in harness.toml.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContractConfig {
    pub request: String,
    /// `{name}` is the variable part `fields[name]`; `{{` and `}}` are
    /// literal braces.
    pub response: String,
    pub requests_per_connection: u32,
    pub closes: Closer,
    pub fields: BTreeMap<String, Shape>,
}

impl Default for ContractConfig {
    fn default() -> Self {
        Self {
            request: "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".into(),
            response: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".into(),
            requests_per_connection: 1,
            closes: Closer::Server,
            fields: BTreeMap::new(),
        }
    }
}

impl ContractConfig {
    pub fn validate(&self) -> Result<()> {
        if self.request.is_empty() {
            bail!("contract.request must not be empty");
        }
        if self.response.is_empty() {
            bail!("contract.response must not be empty");
        }
        range(
            "contract.requests_per_connection",
            self.requests_per_connection as f64,
            1.0,
            10_000.0,
        )?;
        self.template()?;
        Ok(())
    }

    fn template(&self) -> Result<Template> {
        Template::parse("contract.response", &self.response, &self.fields)
    }

    pub fn contract(&self) -> Contract {
        Contract {
            request: self.request.as_bytes().to_vec(),
            response: self
                .template()
                .expect("validated when the configuration loaded"),
            requests: self.requests_per_connection,
            closer: self.closes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\n\r\nok";

    fn contract() -> Contract {
        Contract::fixed(b"GET / HTTP/1.1\r\n\r\n", RESPONSE)
    }

    #[test]
    fn exact_bytes_pass() {
        let c = contract();
        assert_eq!(c.check(RESPONSE, RESPONSE.len()), Ok(()));
    }

    #[test]
    fn one_extra_byte_is_caught() {
        let c = contract();
        let mut got = RESPONSE.to_vec();
        got.push(b'\n');
        assert_eq!(c.check(&got, got.len()), Err(Failure::ExtraBytes));
    }

    #[test]
    fn extra_bytes_beyond_the_kept_head_are_caught() {
        let c = contract();
        let head = RESPONSE.to_vec();
        assert_eq!(c.check(&head, head.len() + 100), Err(Failure::ExtraBytes));
    }

    #[test]
    fn missing_last_byte_is_truncated() {
        let c = contract();
        let got = &RESPONSE[..RESPONSE.len() - 1];
        assert_eq!(c.check(got, got.len()), Err(Failure::Truncated));
        assert_eq!(c.check(&[], 0), Err(Failure::Truncated));
    }

    #[test]
    fn a_changed_middle_byte_is_wrong() {
        let c = contract();
        let mut got = RESPONSE.to_vec();
        got[5] ^= 1;
        assert_eq!(c.check(&got, got.len()), Err(Failure::WrongBytes));
    }

    #[test]
    fn wrong_bytes_win_over_length() {
        let c = contract();
        let got = b"HTTP/1.0".to_vec();
        assert_eq!(c.check(&got, got.len()), Err(Failure::WrongBytes));
    }

    fn keep_alive(n: u32) -> Contract {
        Contract {
            requests: n,
            closer: Closer::Client,
            ..contract()
        }
    }

    #[test]
    fn keep_alive_wants_every_response_and_nothing_more() {
        let c = keep_alive(3);
        let three = RESPONSE.repeat(3);
        assert_eq!(c.check(&three, three.len()), Ok(()));
        let two = RESPONSE.repeat(2);
        assert_eq!(c.check(&two, two.len()), Err(Failure::Truncated));
        let four = RESPONSE.repeat(4);
        assert_eq!(
            c.check(&four[..c.head_len()], four.len()),
            Err(Failure::ExtraBytes)
        );
        let mut bad = three.clone();
        bad[RESPONSE.len() + 3] ^= 1;
        assert_eq!(c.check(&bad, bad.len()), Err(Failure::WrongBytes));
        assert_eq!(c.pipelined(), c.request.repeat(3));
    }

    #[test]
    fn the_end_of_a_response_is_found_as_bytes_arrive() {
        let c = contract();
        assert_eq!(c.response_end(&RESPONSE[..4]), Ok(None));
        assert_eq!(c.response_end(RESPONSE), Ok(Some(RESPONSE.len())));
        assert_eq!(c.response_end(b"HTTP/2"), Err(Failure::WrongBytes));
    }
}
