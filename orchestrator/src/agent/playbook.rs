//! The offline playbook agent: a scripted baseline that proposes, in order,
//! the ideas in `knowledge-base/playbook/*.toml`. It is not a search: it only
//! replays what someone already wrote down. Open-ended search needs an LLM
//! backend.

use anyhow::{Context, Result};
use serde::Deserialize;
use std::path::Path;

use super::{Agent, Proposal, ProposalContext, Proposed};
use crate::edit::{self, Edit};

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub id: String,
    pub category: String,
    pub hypothesis: String,
    #[serde(default)]
    pub requires: Vec<String>,
    pub edits: Vec<Edit>,
}

/// Loads every entry, in file-name order.
pub fn load(dir: &Path) -> Result<Vec<Entry>> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading the playbook {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p)?;
            toml::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{}: {}", p.display(), e.to_string().trim_end()))
        })
        .collect()
}

pub struct Playbook {
    entries: Vec<Entry>,
}

impl Playbook {
    pub fn new(entries: Vec<Entry>) -> Self {
        Self { entries }
    }

    /// Why `entry` is not proposed now, or None if it should be.
    fn skip_reason(&self, entry: &Entry, ctx: &ProposalContext) -> Option<String> {
        let tried = ctx.history.iter().any(|a| {
            a.playbook_id.as_deref() == Some(&entry.id) && a.champion == ctx.champion_commit
        });
        if tried {
            return Some("already tried against this champion".into());
        }
        if let Some(missing) = entry.requires.iter().find(|r| !ctx.kept_ids.contains(r)) {
            return Some(format!(
                "requires {missing}, which the champion does not have"
            ));
        }
        if let Err(e) = edit::apply_all(&ctx.files, &entry.edits) {
            return Some(format!("no longer applies: {e}"));
        }
        None
    }
}

impl Agent for Playbook {
    fn name(&self) -> &str {
        "playbook"
    }

    fn propose(&mut self, ctx: &ProposalContext) -> Result<Proposed> {
        for entry in &self.entries {
            if let Some(reason) = self.skip_reason(entry, ctx) {
                tracing::debug!("playbook: skipping {}: {reason}", entry.id);
                continue;
            }
            return Ok(Proposed::Edits(Proposal {
                hypothesis: entry.hypothesis.clone(),
                category: entry.category.clone(),
                playbook_id: Some(entry.id.clone()),
                edits: entry.edits.clone(),
                usage: None,
            }));
        }
        Ok(Proposed::Exhausted)
    }
}
