//! The reply format of the API agents: a hypothesis line, an optional
//! category line, and search/replace blocks; or, instead of an edit, a
//! `STACK:` line naming promising attempts to merge onto the champion, or a
//! `RETRY:` line naming one earlier attempt to measure again on it.
//!
//! ```text
//! HYPOTHESIS: one sentence
//! CATEGORY: one word
//! <<<<<<< SEARCH treatment/server.c
//! exact lines from the file
//! =======
//! their replacement
//! >>>>>>> REPLACE
//! ```

use anyhow::{bail, Result};

use crate::agent::edit::Edit;

#[derive(Debug, PartialEq)]
pub struct Reply {
    pub hypothesis: String,
    pub category: String,
    pub edits: Vec<Edit>,
    /// Attempt numbers to stack (two or more), instead of edits.
    pub stack: Vec<usize>,
    /// An attempt to retry, instead of edits.
    pub retry: Option<usize>,
}

pub const FORMAT: &str =
    "HYPOTHESIS: <one sentence: the single change and why it should lower cost per connection>
CATEGORY: <one word>
<<<<<<< SEARCH <path, e.g. treatment/server.c>
<lines copied exactly from the current file>
=======
<the lines that replace them>
>>>>>>> REPLACE
(repeat the block for further edits)
Or, instead of HYPOTHESIS and blocks, one line of either:
STACK: <two or more attempt numbers from the promising pool, e.g. 3, 5>
RETRY: <one earlier attempt number, to measure again on the current champion>";

pub fn parse(text: &str) -> Result<Reply> {
    let mut hypothesis = None;
    let mut category = String::from("uncategorized");
    let mut edits = Vec::new();
    let mut stack = Vec::new();
    let mut retry = None;
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let trimmed = line.trim();
        if let Some(list) = trimmed.strip_prefix("STACK:") {
            for part in list.split([',', ' ']).filter(|p| !p.trim().is_empty()) {
                match part.trim().trim_start_matches('#').parse() {
                    Ok(k) => stack.push(k),
                    Err(_) => bail!("line {}: STACK names attempt numbers, got {part:?}", n + 1),
                }
            }
        } else if let Some(k) = trimmed.strip_prefix("RETRY:") {
            let k = k.trim().trim_start_matches('#');
            retry = Some(k.parse().map_err(|_| {
                anyhow::anyhow!("line {}: RETRY names one attempt number, got {k:?}", n + 1)
            })?);
        } else if let Some(h) = trimmed.strip_prefix("HYPOTHESIS:") {
            hypothesis = Some(h.trim().to_string());
        } else if let Some(c) = trimmed.strip_prefix("CATEGORY:") {
            category = c.trim().to_string();
        } else if let Some(path) = trimmed.strip_prefix("<<<<<<< SEARCH") {
            let path = path.trim().to_string();
            if path.is_empty() {
                bail!("line {}: a SEARCH marker must name the file: <<<<<<< SEARCH treatment/server.c", n + 1);
            }
            let mut search = String::new();
            let mut replace = String::new();
            let mut in_replace = false;
            let mut closed = false;
            for (_, l) in lines.by_ref() {
                match l.trim_end() {
                    "=======" if !in_replace => in_replace = true,
                    ">>>>>>> REPLACE" if in_replace => {
                        closed = true;
                        break;
                    }
                    _ if in_replace => {
                        replace.push_str(l);
                        replace.push('\n');
                    }
                    _ => {
                        search.push_str(l);
                        search.push('\n');
                    }
                }
            }
            if !closed {
                bail!(
                    "the block for {path} opened at line {} is not closed with ======= and >>>>>>> REPLACE",
                    n + 1
                );
            }
            edits.push(Edit {
                path,
                search,
                replace,
            });
        }
    }
    Reply {
        hypothesis: hypothesis.unwrap_or_default(),
        category,
        edits,
        stack,
        retry,
    }
    .checked()
}

impl Reply {
    /// A reply is a STACK, a RETRY, or a hypothesis with edits; whatever
    /// format it came in.
    pub fn checked(self) -> Result<Reply> {
        if !self.stack.is_empty() && self.retry.is_some() {
            bail!("a reply is a STACK or a RETRY, not both");
        }
        if !self.stack.is_empty() && self.stack.len() < 2 {
            bail!("a STACK names at least two attempts");
        }
        if !self.stack.is_empty() || self.retry.is_some() {
            return Ok(self);
        }
        if self.hypothesis.trim().is_empty() {
            bail!("the reply has no hypothesis");
        }
        if self.edits.is_empty() {
            bail!("the reply has no search/replace edit");
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hypothesis_category_and_blocks() {
        let text = "Some thoughts first.\nHYPOTHESIS: use MSG_MORE\nCATEGORY: tcp\n\
                    <<<<<<< SEARCH treatment/server.c\n\tsend(0);\n=======\n\tsend(MSG_MORE);\n>>>>>>> REPLACE\n";
        let r = parse(text).unwrap();
        assert_eq!(r.hypothesis, "use MSG_MORE");
        assert_eq!(r.category, "tcp");
        assert_eq!(
            r.edits,
            vec![Edit {
                path: "treatment/server.c".into(),
                search: "\tsend(0);\n".into(),
                replace: "\tsend(MSG_MORE);\n".into()
            }]
        );
    }

    #[test]
    fn a_stack_or_a_retry_replaces_the_edits() {
        let r = parse("I would combine them.\nSTACK: #3, 5\n").unwrap();
        assert_eq!((r.stack, r.retry), (vec![3, 5], None));
        let r = parse("RETRY: 4\n").unwrap();
        assert_eq!((r.stack, r.retry), (vec![], Some(4)));
        assert!(parse("STACK: 3\n").unwrap_err().to_string().contains("two"));
        assert!(parse("STACK: a, b\n")
            .unwrap_err()
            .to_string()
            .contains("numbers"));
        assert!(parse("STACK: 1 2\nRETRY: 3\n")
            .unwrap_err()
            .to_string()
            .contains("not both"));
    }

    #[test]
    fn missing_parts_are_named() {
        assert!(parse("no format at all")
            .unwrap_err()
            .to_string()
            .contains("hypothesis"));
        assert!(parse("HYPOTHESIS: x\n")
            .unwrap_err()
            .to_string()
            .contains("no search/replace"));
        let open = "HYPOTHESIS: x\n<<<<<<< SEARCH a.c\nfoo\n=======\nbar\n";
        assert!(parse(open).unwrap_err().to_string().contains("not closed"));
        let unnamed = "HYPOTHESIS: x\n<<<<<<< SEARCH\nfoo\n=======\nbar\n>>>>>>> REPLACE\n";
        assert!(parse(unnamed)
            .unwrap_err()
            .to_string()
            .contains("must name the file"));
    }
}
