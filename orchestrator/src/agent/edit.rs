//! Search/replace edits, the one edit format every agent's proposal reduces
//! to. Matching is exact first, then tolerant of whitespace (indentation,
//! trailing blanks, tabs versus spaces), because language models rarely
//! reproduce whitespace faithfully. A block that matches nowhere, or in more
//! than one place, is an error precise enough to send back to the agent.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edit {
    pub path: String,
    pub search: String,
    pub replace: String,
}

fn normalize(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Lines of `search` with blank lines at either end dropped.
fn search_lines(search: &str) -> Vec<&str> {
    let lines: Vec<&str> = search.lines().collect();
    let start = lines
        .iter()
        .position(|l| !l.trim().is_empty())
        .unwrap_or(lines.len());
    let end = lines
        .iter()
        .rposition(|l| !l.trim().is_empty())
        .map_or(start, |e| e + 1);
    lines[start..end].to_vec()
}

/// Applies one edit to `text`, returning the new text.
pub fn apply_one(text: &str, edit: &Edit) -> Result<String> {
    if edit.search.trim().is_empty() {
        bail!("{}: an edit's search text is empty", edit.path);
    }
    match text.matches(edit.search.as_str()).count() {
        1 => return Ok(text.replacen(edit.search.as_str(), &edit.replace, 1)),
        n if n > 1 => bail!(
            "{}: search text matches {n} places; include more surrounding lines so it matches exactly one:\n{}",
            edit.path,
            edit.search
        ),
        _ => {}
    }
    let wanted: Vec<String> = search_lines(&edit.search)
        .iter()
        .map(|l| normalize(l))
        .collect();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let normalized: Vec<String> = lines.iter().map(|l| normalize(l)).collect();
    let hits: Vec<usize> = (0..=normalized.len().saturating_sub(wanted.len()))
        .filter(|&i| {
            normalized.len() >= wanted.len() && normalized[i..i + wanted.len()] == wanted[..]
        })
        .collect();
    match hits.as_slice() {
        [i] => {
            let mut out: String = lines[..*i].concat();
            let mut replacement = edit.replace.clone();
            if !replacement.ends_with('\n') && !replacement.is_empty() {
                replacement.push('\n');
            }
            out += &replacement;
            out += &lines[i + wanted.len()..].concat();
            Ok(out)
        }
        [] => {
            let first = wanted.first().cloned().unwrap_or_default();
            let near = normalized
                .iter()
                .position(|l| *l == first)
                .map(|i| {
                    format!(
                        " (its first line matches line {}, but the lines after it differ)",
                        i + 1
                    )
                })
                .unwrap_or_else(|| " (not even its first line occurs in the file)".into());
            bail!(
                "{}: search text not found, even ignoring whitespace{near}:\n{}",
                edit.path,
                edit.search
            )
        }
        _ => bail!(
            "{}: search text matches {} places when whitespace is ignored; include more lines:\n{}",
            edit.path,
            hits.len(),
            edit.search
        ),
    }
}

/// Applies edits in order to a set of files (path -> content). Either every
/// edit applies or the error names the first that did not, by number.
pub fn apply_all(
    files: &BTreeMap<String, String>,
    edits: &[Edit],
) -> Result<BTreeMap<String, String>> {
    let mut out = files.clone();
    for (i, e) in edits.iter().enumerate() {
        let Some(text) = out.get(&e.path) else {
            bail!(
                "edit {} names {}, which is not a file the agent may change",
                i + 1,
                e.path
            );
        };
        let new = apply_one(text, e).map_err(|err| anyhow::anyhow!("edit {}: {err}", i + 1))?;
        out.insert(e.path.clone(), new);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(search: &str, replace: &str) -> Edit {
        Edit {
            path: "a.c".into(),
            search: search.into(),
            replace: replace.into(),
        }
    }

    const TEXT: &str = "int main(void)\n{\n\tint x = 1;\n\treturn x;\n}\n";

    #[test]
    fn exact_match_replaces() {
        let out = apply_one(TEXT, &edit("\tint x = 1;\n", "\tint x = 2;\n")).unwrap();
        assert!(out.contains("int x = 2;") && !out.contains("int x = 1;"));
    }

    #[test]
    fn whitespace_differences_are_tolerated() {
        let out = apply_one(
            TEXT,
            &edit(
                "    int x   = 1;\n    return x;",
                "\tint x = 3;\n\treturn x;",
            ),
        )
        .unwrap();
        assert_eq!(out, "int main(void)\n{\n\tint x = 3;\n\treturn x;\n}\n");
    }

    #[test]
    fn no_match_says_where_it_got_closest() {
        let err = apply_one(TEXT, &edit("\tint x = 1;\n\treturn 0;\n", ""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 3"), "{err}");
        let err = apply_one(TEXT, &edit("nothing like it", ""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not even its first line"), "{err}");
    }

    #[test]
    fn ambiguous_match_is_refused() {
        let text = "a();\nb();\na();\n";
        let err = apply_one(text, &edit("a();", "c();"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("2 places"), "{err}");
    }

    #[test]
    fn edits_apply_in_order_and_name_the_failing_one() {
        let files = BTreeMap::from([("a.c".to_string(), TEXT.to_string())]);
        let ok = apply_all(
            &files,
            &[
                edit("int x = 1;", "int x = 2;"),
                edit("int x = 2;", "int x = 5;"),
            ],
        )
        .unwrap();
        assert!(ok["a.c"].contains("int x = 5;"));
        let err =
            apply_all(&files, &[edit("int x = 1;", "int y;"), edit("int x", "")]).unwrap_err();
        assert!(err.to_string().starts_with("edit 2"), "{err}");
        let other = Edit {
            path: "../etc/passwd".into(),
            ..edit("x", "y")
        };
        assert!(apply_all(&files, &[other])
            .unwrap_err()
            .to_string()
            .contains("not a file the agent may change"));
    }
}
