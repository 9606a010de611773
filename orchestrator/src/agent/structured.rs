//! The proposal as a JSON object, for endpoints that constrain their output
//! to a schema (OpenAI's `response_format`, which llama.cpp turns into a
//! grammar). A small model asked in words for search/replace blocks mostly
//! answers in prose; under a grammar it cannot, and the paths it may name
//! are the champion's files.

use anyhow::{Context, Result};
use serde::Deserialize;
use serde_json::{json, Value};

use super::edit::Edit;
use super::reply::Reply;

/// The reply format as the prompt states it.
pub const FORMAT: &str = "One JSON object (the endpoint enforces its schema):
{\"hypothesis\": \"<one sentence: the single change and why it should lower cost per connection>\",
 \"category\": \"<one word>\",
 \"edits\": [{\"path\": \"<a file of the champion source>\", \"search\": \"<lines copied exactly from that file>\", \"replace\": \"<the lines that replace them>\"}],
 \"stack\": [], \"retry\": null}
Or, instead of edits (\"edits\": []): \"stack\": two or more attempt numbers from the promising pool, \
or \"retry\": one earlier attempt number to measure again on the current champion.";

/// Edits per reply: a small model under a grammar otherwise repeats an
/// edit until it runs out of tokens.
const MAX_EDITS: usize = 4;

/// The schema, with `path` limited to `files`. Every property is required
/// and the absent ones are empty or null, as OpenAI's strict mode asks.
pub fn schema(files: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": {
            "hypothesis": {"type": "string", "maxLength": 300},
            "category": {"type": "string", "maxLength": 40},
            "edits": {
                "type": "array",
                "maxItems": MAX_EDITS,
                "items": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "enum": files},
                        "search": {"type": "string"},
                        "replace": {"type": "string"}
                    },
                    "required": ["path", "search", "replace"],
                    "additionalProperties": false
                }
            },
            "stack": {"type": "array", "items": {"type": "integer", "minimum": 1}},
            "retry": {"type": ["integer", "null"], "minimum": 1}
        },
        "required": ["hypothesis", "category", "edits", "stack", "retry"],
        "additionalProperties": false
    })
}

#[derive(Deserialize)]
struct Proposal {
    hypothesis: String,
    #[serde(default)]
    category: String,
    #[serde(default)]
    edits: Vec<JsonEdit>,
    #[serde(default)]
    stack: Vec<usize>,
    #[serde(default)]
    retry: Option<usize>,
}

#[derive(Deserialize)]
struct JsonEdit {
    path: String,
    search: String,
    replace: String,
}

/// The reply as a [`Reply`]; the object may sit inside prose or a code
/// fence when the endpoint did not enforce the schema.
pub fn parse(text: &str) -> Result<Reply> {
    let start = text.find('{').context("the reply holds no JSON object")?;
    let end = text
        .rfind('}')
        .context("the reply's JSON object is not closed")?;
    let p: Proposal = serde_json::from_str(text.get(start..=end).unwrap_or_default())
        .context("the reply is not the JSON object the schema describes")?;
    let category = match p.category.trim() {
        "" => "uncategorized".to_string(),
        c => c.to_string(),
    };
    Reply {
        hypothesis: p.hypothesis.trim().to_string(),
        category,
        edits: p
            .edits
            .into_iter()
            .map(|e| Edit {
                path: e.path,
                search: e.search,
                replace: e.replace,
            })
            .collect(),
        stack: p.stack,
        retry: p.retry,
    }
    .checked()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_becomes_a_reply() {
        let text = r#"{"hypothesis": "use MSG_MORE", "category": "", "edits": [{"path": "treatment/server.c", "search": "a\n", "replace": "b\n"}], "stack": [], "retry": null}"#;
        let r = parse(text).unwrap();
        assert_eq!(r.hypothesis, "use MSG_MORE");
        assert_eq!(r.category, "uncategorized");
        assert_eq!(r.edits[0].search, "a\n");
        let fenced = format!("Here you go:\n```json\n{text}\n```\n");
        assert_eq!(parse(&fenced).unwrap(), r);
    }

    #[test]
    fn stacks_retries_and_empty_proposals_are_checked_as_in_text() {
        let r = parse(
            r#"{"hypothesis": "", "category": "", "edits": [], "stack": [2, 3], "retry": null}"#,
        )
        .unwrap();
        assert_eq!(r.stack, vec![2, 3]);
        let e = parse(
            r#"{"hypothesis": "x", "category": "", "edits": [], "stack": [], "retry": null}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("no search/replace"), "{e}");
        let e = parse("I think we should use MSG_MORE.").unwrap_err();
        assert!(e.to_string().contains("no JSON object"), "{e}");
        let e = parse(r#"{"hypothesis": 3}"#).unwrap_err();
        assert!(format!("{e:#}").contains("schema"), "{e:#}");
    }

    #[test]
    fn the_schema_names_only_the_champion_files() {
        let s = schema(&["treatment/server.c"]);
        assert_eq!(
            s["properties"]["edits"]["items"]["properties"]["path"]["enum"],
            json!(["treatment/server.c"])
        );
    }
}
