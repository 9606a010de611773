//! The offline playbook agent: a scripted baseline that proposes, in order,
//! the ideas in `knowledge-base/playbook/*.toml`. It is not a search: it only
//! replays what someone already wrote down. Open-ended search needs an LLM
//! backend.

use anyhow::{Context, Result};
use serde::Deserialize;
use std::path::Path;

use super::{Agent, Proposal, ProposalContext, Proposed};
use crate::agent::edit::{self, Edit};

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
        // An entry that inserts lines before an anchor still "applies" to a
        // champion that already has it; the lineage, not the text, decides.
        if ctx.kept_ids.contains(&entry.id) {
            return Some("already in the champion".into());
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::process::Command;

    use crate::referee::verdict::AttemptVerdict;

    /// The playbook ids of the six changes REFERENCE.md credits with the gap.
    const SIX_WINS: [&str; 6] = [
        "ring-defer-taskrun",
        "multishot-accept",
        "direct-descriptors",
        "connection-freelist",
        "send-msg-more",
        "skip-success-send-close",
    ];

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .to_path_buf()
    }

    fn vanilla() -> BTreeMap<String, String> {
        let text = std::fs::read_to_string(root().join("treatment/server.c")).unwrap();
        BTreeMap::from([("treatment/server.c".to_string(), text)])
    }

    /// Compiles a treatment with the harness's own flags.
    fn compiles(files: &BTreeMap<String, String>) -> Result<(), String> {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("server.c");
        std::fs::write(&src, &files["treatment/server.c"]).unwrap();
        let out = Command::new("cc")
            .args(["-O2", "-Wall", "-Wextra", "-Werror", "-c", "-o"])
            .arg(dir.path().join("server.o"))
            .arg(&src)
            .output()
            .unwrap();
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).to_string())
        }
    }

    #[test]
    fn every_entry_applies_to_the_vanilla_server_or_names_its_prerequisite() {
        let entries = load(&root().join("knowledge-base/playbook")).unwrap();
        assert!(entries.len() >= 14, "{} entries", entries.len());
        let base = vanilla();
        for e in &entries {
            if !e.requires.is_empty() {
                continue;
            }
            let files =
                edit::apply_all(&base, &e.edits).unwrap_or_else(|err| panic!("{}: {err}", e.id));
            compiles(&files).unwrap_or_else(|err| panic!("{} does not compile:\n{err}", e.id));
        }
    }

    #[test]
    fn keeping_everything_in_order_compiles_at_every_step() {
        let entries = load(&root().join("knowledge-base/playbook")).unwrap();
        let mut files = vanilla();
        let mut kept: Vec<&str> = Vec::new();
        for e in &entries {
            if e.requires.iter().any(|r| !kept.contains(&r.as_str())) {
                continue;
            }
            let Ok(next) = edit::apply_all(&files, &e.edits) else {
                continue; // no longer applies, as the agent would skip it
            };
            compiles(&next).unwrap_or_else(|err| panic!("after {kept:?} + {}:\n{err}", e.id));
            files = next;
            kept.push(&e.id);
        }
        for win in SIX_WINS {
            assert!(
                kept.contains(&win),
                "{win} was not applicable in sequence: {kept:?}"
            );
        }
    }

    #[test]
    fn the_six_wins_compose_without_the_failures() {
        let entries = load(&root().join("knowledge-base/playbook")).unwrap();
        let mut files = vanilla();
        for id in SIX_WINS.iter().rev() {
            let e = entries.iter().find(|e| e.id == *id).unwrap();
            files = edit::apply_all(&files, &e.edits)
                .unwrap_or_else(|err| panic!("{id} in reverse order: {err}"));
        }
        compiles(&files).unwrap();
    }

    #[test]
    fn proposes_in_order_and_skips_what_was_tried_or_needs_a_missing_win() {
        let entries = load(&root().join("knowledge-base/playbook")).unwrap();
        let mut agent = Playbook::new(entries);
        let mut ctx = ProposalContext::for_tests(vanilla(), Path::new(""));
        let first = match agent.propose(&ctx).unwrap() {
            Proposed::Edits(p) => p,
            _ => panic!("expected a proposal"),
        };
        assert_eq!(first.playbook_id.as_deref(), Some("ring-defer-taskrun"));
        ctx.history.push(super::super::AttemptSummary {
            number: 1,
            hypothesis: first.hypothesis,
            verdict: AttemptVerdict::Discard,
            ratio: None,
            ci95: None,
            playbook_id: first.playbook_id,
            champion: "c0".into(),
            detail: None,
        });
        let Proposed::Edits(second) = agent.propose(&ctx).unwrap() else {
            panic!("expected a proposal")
        };
        assert_eq!(second.playbook_id.as_deref(), Some("multishot-accept"));
        // Against a new champion the discarded idea is worth retrying.
        ctx.champion_commit = "c1".into();
        let Proposed::Edits(again) = agent.propose(&ctx).unwrap() else {
            panic!("expected a proposal")
        };
        assert_eq!(again.playbook_id.as_deref(), Some("ring-defer-taskrun"));
        // A kept entry is never proposed again, even where its edits would
        // still apply (multishot-accept only inserts before anchor lines).
        let multishot = edit::apply_all(&ctx.files, &second.edits).unwrap();
        assert!(
            edit::apply_all(&multishot, &second.edits).is_ok(),
            "the premise of this check"
        );
        ctx.files = multishot;
        ctx.kept_ids = vec!["multishot-accept".into()];
        ctx.champion_commit = "c2".into();
        for _ in 0..3 {
            let Proposed::Edits(p) = agent.propose(&ctx).unwrap() else {
                break;
            };
            assert_ne!(p.playbook_id.as_deref(), Some("multishot-accept"));
            ctx.history.push(super::super::AttemptSummary {
                number: 9,
                hypothesis: p.hypothesis,
                verdict: AttemptVerdict::Discard,
                ratio: None,
                ci95: None,
                playbook_id: p.playbook_id,
                champion: "c2".into(),
                detail: None,
            });
        }
    }
}
