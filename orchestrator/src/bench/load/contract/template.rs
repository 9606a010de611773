//! A response with named variable parts: `Date: {date}` where `date` is an
//! HTTP date. Every literal byte is compared exactly and every variable
//! part by its shape, so a server that answers `Date: tomorrow` or a wrong
//! request id fails as surely as one that drops a byte. A template with no
//! variable part is one fixed response, compared byte for byte.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a variable part may hold.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// An IMF-fixdate (RFC 9110): `Sun, 06 Nov 1994 08:49:37 GMT`.
    HttpDate,
    /// 1 to 20 decimal digits: a counter, a length.
    Digits,
    /// 1 to 64 hexadecimal digits: a hash, an id.
    Hex,
    /// 1 to 128 of `A-Z a-z 0-9 - . _ ~ + / =`: a token, base64.
    Token,
}

const DAYS: [&[u8]; 7] = [b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat", b"Sun"];
const MONTHS: [&[u8]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];
/// `d` a digit, `a` a letter, anything else itself.
const DATE_FORM: &[u8; 29] = b"aaa, dd aaa dddd dd:dd:dd GMT";

/// How much of a buffer a part takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scan {
    /// It takes this many bytes.
    Took(usize),
    /// It fits so far; more bytes decide.
    NeedMore,
    Wrong,
}

impl Shape {
    /// The shape in words, for the agents.
    pub fn describe(self) -> &'static str {
        match self {
            Shape::HttpDate => "HTTP date (IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`)",
            Shape::Digits => "run of 1 to 20 decimal digits",
            Shape::Hex => "run of 1 to 64 hexadecimal digits",
            Shape::Token => "run of 1 to 128 of `A-Z a-z 0-9 - . _ ~ + / =`",
        }
    }

    /// The bytes a run of this shape is made of (the date's are its form).
    fn admits(self, b: u8) -> bool {
        match self {
            Shape::HttpDate => b.is_ascii_alphanumeric() || b" ,:".contains(&b),
            Shape::Digits => b.is_ascii_digit(),
            Shape::Hex => b.is_ascii_hexdigit(),
            Shape::Token => b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b),
        }
    }

    fn max_len(self) -> usize {
        match self {
            Shape::HttpDate => DATE_FORM.len(),
            Shape::Digits => 20,
            Shape::Hex => 64,
            Shape::Token => 128,
        }
    }

    /// A run of this shape at the start of `buf`: the longest one, since
    /// the literal after it cannot start with a byte it admits.
    fn scan(self, buf: &[u8]) -> Scan {
        if self == Shape::HttpDate {
            return scan_date(buf);
        }
        let run = buf.iter().take_while(|&&b| self.admits(b)).count();
        match run {
            n if n > self.max_len() => Scan::Wrong,
            n if n == buf.len() => Scan::NeedMore,
            0 => Scan::Wrong,
            n => Scan::Took(n),
        }
    }
}

fn scan_date(buf: &[u8]) -> Scan {
    let n = buf.len().min(DATE_FORM.len());
    let form_ok = buf[..n].iter().zip(DATE_FORM).all(|(&b, &f)| match f {
        b'd' => b.is_ascii_digit(),
        b'a' => b.is_ascii_alphabetic(),
        f => b == f,
    });
    if !form_ok {
        return Scan::Wrong;
    }
    if n < DATE_FORM.len() {
        return Scan::NeedMore;
    }
    let num = |r: std::ops::Range<usize>| {
        buf[r]
            .iter()
            .fold(0u32, |v, &d| v * 10 + u32::from(d - b'0'))
    };
    let valid = DAYS.contains(&&buf[0..3])
        && MONTHS.contains(&&buf[8..11])
        && (1..=31).contains(&num(5..7))
        && num(17..19) <= 23
        && num(20..22) <= 59
        && num(23..25) <= 60;
    if valid {
        Scan::Took(DATE_FORM.len())
    } else {
        Scan::Wrong
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    Literal(Vec<u8>),
    Field { name: String, shape: Shape },
}

/// A response: literal bytes and variable parts, in order.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct Template {
    pub parts: Vec<Part>,
}

/// Where a buffer stands against a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// A whole response, this many bytes long, starts the buffer.
    Complete(usize),
    /// The buffer is a proper prefix of some response.
    Partial,
    /// No response starts this way.
    Wrong,
}

impl Template {
    /// The bytes as they are: no variable part.
    #[cfg(test)]
    pub fn fixed(bytes: &[u8]) -> Self {
        Self {
            parts: vec![Part::Literal(bytes.to_vec())],
        }
    }

    /// Parses `text`, where `{name}` is the variable part `fields[name]`
    /// and `{{`, `}}` are literal braces. `field` names the setting in
    /// errors.
    pub fn parse(field: &str, text: &str, fields: &BTreeMap<String, Shape>) -> Result<Self> {
        let mut parts = Vec::new();
        let mut literal = Vec::new();
        let mut rest = text;
        while let Some(i) = rest.find(['{', '}']) {
            literal.extend_from_slice(&rest.as_bytes()[..i]);
            let tail = &rest[i..];
            if tail.starts_with("{{") || tail.starts_with("}}") {
                literal.push(tail.as_bytes()[0]);
                rest = &tail[2..];
                continue;
            }
            let Some(end) = tail.find('}').filter(|_| tail.starts_with('{')) else {
                bail!("{field}: a lone '}}' (write '}}}}' for a literal brace)");
            };
            let name = &tail[1..end];
            let Some(&shape) = fields.get(name) else {
                bail!(
                    "{field}: {{{name}}} is not one of contract.fields ({}); write '{{{{' for a literal brace",
                    fields.keys().cloned().collect::<Vec<_>>().join(", ")
                );
            };
            if !literal.is_empty() {
                parts.push(Part::Literal(std::mem::take(&mut literal)));
            }
            parts.push(Part::Field {
                name: name.to_string(),
                shape,
            });
            rest = &tail[end + 1..];
        }
        literal.extend_from_slice(rest.as_bytes());
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        let t = Self { parts };
        t.check_ends(field)?;
        Ok(t)
    }

    /// Every variable part is followed by a literal that starts with a
    /// byte its shape does not admit: so where it ends is plain from the
    /// bytes, with no look-ahead and no guess.
    fn check_ends(&self, field: &str) -> Result<()> {
        for (i, p) in self.parts.iter().enumerate() {
            let Part::Field { name, shape } = p else {
                continue;
            };
            match self.parts.get(i + 1) {
                Some(Part::Literal(next)) if !shape.admits(next[0]) => {}
                Some(Part::Literal(next)) => bail!(
                    "{field}: {{{name}}} is followed by {:?}, which it could hold: its end would be ambiguous",
                    next[0] as char
                ),
                _ => bail!("{field}: {{{name}}} must be followed by literal bytes, so its end is known"),
            }
        }
        Ok(())
    }

    /// The longest response the template admits.
    pub fn max_len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Literal(l) => l.len(),
                Part::Field { shape, .. } => shape.max_len(),
            })
            .sum()
    }

    /// Where `buf` stands: a whole response at its start, a prefix of
    /// one, or neither.
    pub fn progress(&self, buf: &[u8]) -> Progress {
        let mut at = 0;
        for part in &self.parts {
            let rest = &buf[at..];
            let scan = match part {
                Part::Literal(l) => {
                    let n = rest.len().min(l.len());
                    match (rest[..n] == l[..n], n == l.len()) {
                        (false, _) => Scan::Wrong,
                        (true, true) => Scan::Took(n),
                        (true, false) => Scan::NeedMore,
                    }
                }
                Part::Field { shape, .. } => shape.scan(rest),
            };
            match scan {
                Scan::Took(n) => at += n,
                Scan::NeedMore => return Progress::Partial,
                Scan::Wrong => return Progress::Wrong,
            }
        }
        Progress::Complete(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> BTreeMap<String, Shape> {
        BTreeMap::from([
            ("date".to_string(), Shape::HttpDate),
            ("id".to_string(), Shape::Digits),
        ])
    }

    fn template() -> Template {
        Template::parse(
            "contract.response",
            "HTTP/1.1 200 OK\r\nDate: {date}\r\nX-Request-Id: {id}\r\n\r\nok",
            &fields(),
        )
        .unwrap()
    }

    const GOOD: &[u8] =
        b"HTTP/1.1 200 OK\r\nDate: Sat, 05 Dec 2026 23:09:51 GMT\r\nX-Request-Id: 4711\r\n\r\nok";

    #[test]
    fn a_response_of_the_right_shape_is_complete_at_its_end() {
        let t = template();
        assert_eq!(t.progress(GOOD), Progress::Complete(GOOD.len()));
        let mut two = GOOD.to_vec();
        two.extend_from_slice(GOOD);
        assert_eq!(t.progress(&two), Progress::Complete(GOOD.len()));
        let other = GOOD
            .iter()
            .map(|&b| if b == b'4' { b'9' } else { b })
            .collect::<Vec<_>>();
        assert!(matches!(t.progress(&other), Progress::Complete(_)));
    }

    #[test]
    fn every_prefix_is_partial() {
        let t = template();
        for n in 0..GOOD.len() {
            assert_eq!(t.progress(&GOOD[..n]), Progress::Partial, "{n} bytes");
        }
    }

    #[test]
    fn a_wrong_byte_anywhere_is_wrong() {
        let t = template();
        let date = GOOD.windows(3).position(|w| w == b"Sat").unwrap();
        for (at, to) in [
            (0, b'X'),              // a literal byte
            (date, b'X'),           // not a day
            (date + 5, b'9'),       // day 95
            (date + 8, b'x'),       // not a month
            (date + 17, b'3'),      // hour 33
            (GOOD.len() - 6, b'x'), // the id
            (GOOD.len() - 1, b'K'), // the body
        ] {
            let mut bad = GOOD.to_vec();
            bad[at] = to;
            assert_eq!(
                t.progress(&bad),
                Progress::Wrong,
                "byte {at} -> {}",
                to as char
            );
        }
        let empty_id =
            b"HTTP/1.1 200 OK\r\nDate: Sat, 05 Dec 2026 23:09:51 GMT\r\nX-Request-Id: \r\n";
        assert_eq!(t.progress(empty_id), Progress::Wrong);
        let long_id = format!(
            "HTTP/1.1 200 OK\r\nDate: Sat, 05 Dec 2026 23:09:51 GMT\r\nX-Request-Id: {}",
            "1".repeat(21)
        );
        assert_eq!(t.progress(long_id.as_bytes()), Progress::Wrong);
    }

    #[test]
    fn a_fixed_template_is_the_bytes() {
        let t = Template::parse("r", "a{{b}}c", &BTreeMap::new()).unwrap();
        assert_eq!(t, Template::fixed(b"a{b}c"));
        assert_eq!(t.progress(b"a{b}c"), Progress::Complete(5));
        assert_eq!(t.max_len(), 5);
        assert_eq!(template().max_len(), GOOD.len() - 4 + 20);
    }

    #[test]
    fn bad_templates_are_refused_with_the_field() {
        for (text, says) in [
            (
                "x {nope} y",
                "{nope} is not one of contract.fields (date, id)",
            ),
            ("x } y", "lone '}'"),
            ("x {id}", "must be followed by literal bytes"),
            ("x {id}9", "which it could hold"),
            ("{date}{id}\r\n", "must be followed by literal bytes"),
        ] {
            let err = Template::parse("contract.response", text, &fields())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("contract.response") && err.contains(says),
                "{text}: {err}"
            );
        }
    }
}
