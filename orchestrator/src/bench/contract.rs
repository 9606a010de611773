//! The request/response contract every server must honour, and the judgement
//! of one connection's bytes against it. Every connection is judged in full:
//! a sampled or first-and-last-byte check lets extra bytes and a missing FIN
//! through (see REFERENCE.md, "Weaknesses of that published harness").

use serde::{Deserialize, Serialize};

/// The exact bytes a client sends and the exact bytes the server must return
/// before closing the connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contract {
    pub request: Vec<u8>,
    pub response: Vec<u8>,
}

/// Why one connection failed. The order is the order of the counters in a
/// [`crate::bench::loadgen::LoadSnapshot`].
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
    /// Judges a connection that ended with the server's FIN. `head` holds the
    /// first bytes received (at least `response.len() + 1` of them when that
    /// many arrived) and `total` counts every byte received.
    pub fn check(&self, head: &[u8], total: usize) -> Result<(), Failure> {
        let expected = &self.response;
        let common = head.len().min(expected.len());
        if head[..common] != expected[..common] {
            return Err(Failure::WrongBytes);
        }
        match total.cmp(&expected.len()) {
            std::cmp::Ordering::Greater => Err(Failure::ExtraBytes),
            std::cmp::Ordering::Less => Err(Failure::Truncated),
            std::cmp::Ordering::Equal => Ok(()),
        }
    }

    /// How many leading bytes a client must keep to judge a connection.
    pub fn head_len(&self) -> usize {
        self.response.len() + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contract() -> Contract {
        Contract {
            request: b"GET / HTTP/1.1\r\n\r\n".to_vec(),
            response: b"HTTP/1.1 200 OK\r\n\r\nok".to_vec(),
        }
    }

    #[test]
    fn exact_bytes_pass() {
        let c = contract();
        assert_eq!(c.check(&c.response.clone(), c.response.len()), Ok(()));
    }

    #[test]
    fn one_extra_byte_is_caught() {
        let c = contract();
        let mut got = c.response.clone();
        got.push(b'\n');
        assert_eq!(c.check(&got, got.len()), Err(Failure::ExtraBytes));
    }

    #[test]
    fn extra_bytes_beyond_the_kept_head_are_caught() {
        let c = contract();
        let head = c.response.clone();
        assert_eq!(c.check(&head, head.len() + 100), Err(Failure::ExtraBytes));
    }

    #[test]
    fn missing_last_byte_is_truncated() {
        let c = contract();
        let got = &c.response[..c.response.len() - 1];
        assert_eq!(c.check(got, got.len()), Err(Failure::Truncated));
        assert_eq!(c.check(&[], 0), Err(Failure::Truncated));
    }

    #[test]
    fn a_changed_middle_byte_is_wrong() {
        let c = contract();
        let mut got = c.response.clone();
        got[5] ^= 1;
        assert_eq!(c.check(&got, got.len()), Err(Failure::WrongBytes));
    }

    #[test]
    fn wrong_bytes_win_over_length() {
        let c = contract();
        let got = b"HTTP/1.0".to_vec();
        assert_eq!(c.check(&got, got.len()), Err(Failure::WrongBytes));
    }
}
