//! The offline agent: a search over the curated library of ideas in
//! `knowledge-base/playbook/*.toml`, not an LLM. Each idea is an edit, or a
//! parameter (a `#define`) explored over a range ([`super::param`]). Every
//! attempt, the agent forms a belief about what each idea it could propose
//! is worth against the current champion, from the entry's prior and every
//! measurement of that idea so far ([`super::search`]), and proposes the
//! move the policy picks: a new idea, a retry of one measured against an
//! earlier champion, or a parameter step. It stops when no move clears the
//! keep line with `search.min_keep_probability`, not when a list ends.
//! Stacks of promising attempts are the loop's, for every agent.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

use super::param::Param;
use super::search::{self, SearchConfig};

use super::{Agent, AttemptSummary, Origin, Proposal, ProposalContext, Proposed};
use crate::agent::edit::{self, Edit};
use crate::referee::posterior::Belief;
use crate::referee::verdict::AttemptVerdict;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Where the idea stands among those open at once: lower first. A
    /// field, not the file's name, so renaming a file never reorders the
    /// search; an entry comes after every entry it requires.
    pub order: u32,
    pub id: String,
    pub category: String,
    /// `{value}` stands for a parameter's value.
    pub hypothesis: String,
    #[serde(default)]
    pub requires: Vec<String>,
    #[serde(default)]
    pub edits: Vec<Edit>,
    /// The cost ratio expected before any measurement (1.0: no idea).
    #[serde(default)]
    pub prior: Option<f64>,
    #[serde(default)]
    pub param: Option<Param>,
}

impl Entry {
    fn validate(&self) -> Result<()> {
        if let Some(p) = self.prior {
            if !(p > 0.0 && p < 2.0) {
                bail!("prior must be a cost ratio above 0 and below 2, got {p}");
            }
        }
        match (&self.param, self.edits.is_empty()) {
            (Some(p), true) => p.validate(),
            (Some(_), false) => bail!("an entry with a param has no edits: the param makes them"),
            (None, true) => bail!("edits: an entry needs at least one edit, or a param"),
            (None, false) => Ok(()),
        }
    }

    fn expected_ratio(&self) -> f64 {
        self.prior.unwrap_or(1.0)
    }
}

/// Loads and checks every entry, in their `order`; an error names the file.
pub fn load(dir: &Path) -> Result<Vec<Entry>> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading the playbook {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    paths.sort();
    let mut entries = paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p)?;
            let entry: Entry = toml::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{}: {}", p.display(), e.to_string().trim_end()))?;
            entry
                .validate()
                .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
            Ok((p, entry))
        })
        .collect::<Result<Vec<_>>>()?;
    entries.sort_by_key(|(_, e)| e.order);
    check_together(&entries)?;
    Ok(entries.into_iter().map(|(_, e)| e).collect())
}

/// What no entry can check alone: ids and orders are unique, and every
/// entry a `requires` names exists and comes earlier.
fn check_together(entries: &[(std::path::PathBuf, Entry)]) -> Result<()> {
    let mut ids: BTreeMap<&str, (&Path, u32)> = BTreeMap::new();
    let mut orders: BTreeMap<u32, &Path> = BTreeMap::new();
    for (p, e) in entries {
        if let Some((other, _)) = ids.insert(&e.id, (p, e.order)) {
            bail!(
                "{}: id {:?} is also {}'s",
                p.display(),
                e.id,
                other.display()
            );
        }
        if let Some(other) = orders.insert(e.order, p) {
            bail!(
                "{}: order {} is also {}'s: the search's order must be explicit",
                p.display(),
                e.order,
                other.display()
            );
        }
    }
    for (p, e) in entries {
        for r in &e.requires {
            match ids.get(r.as_str()) {
                None => bail!(
                    "{}: requires {r:?}, which no entry of the playbook has",
                    p.display()
                ),
                Some((_, order)) if *order >= e.order => bail!(
                    "{}: requires {r:?} (order {order}), which must come before it (order {})",
                    p.display(),
                    e.order
                ),
                Some(_) => {}
            }
        }
    }
    Ok(())
}

pub struct Playbook {
    entries: Vec<Entry>,
    cfg: SearchConfig,
    threshold: f64,
}

/// One move the agent could make now.
struct Move {
    idea: String,
    hypothesis: String,
    category: String,
    edits: Vec<Edit>,
    belief: Belief,
    retry_of: Option<usize>,
    /// Never measured against any champion.
    fresh: bool,
}

/// Verdicts after which an idea is not proposed again: it does not build,
/// breaks the contract, changes nothing or was caught at something.
fn ends_the_idea(v: AttemptVerdict) -> bool {
    matches!(
        v,
        AttemptVerdict::BuildFailed
            | AttemptVerdict::Invalid
            | AttemptVerdict::NoOp
            | AttemptVerdict::Scope
            | AttemptVerdict::LatencyRegression
    )
}

impl Playbook {
    pub fn new(entries: Vec<Entry>, cfg: SearchConfig, threshold: f64) -> Self {
        Self {
            entries,
            cfg,
            threshold,
        }
    }

    /// The move for `idea` with `edits`, unless it was tried against this
    /// champion, has ended, or would be a retry beyond the budget.
    fn consider(
        &self,
        ctx: &ProposalContext,
        entry: &Entry,
        idea: String,
        hypothesis: String,
        edits: Vec<Edit>,
    ) -> Option<Move> {
        let of_idea: Vec<&AttemptSummary> = ctx.history.iter().filter(|a| a.idea == idea).collect();
        if of_idea
            .iter()
            .any(|a| a.champion == ctx.champion_commit || ends_the_idea(a.verdict))
        {
            return None;
        }
        let retry_of = of_idea
            .iter()
            .filter(|a| a.verdict.is_decided())
            .map(|a| a.number)
            .max();
        if retry_of.is_some() && ctx.retries_left == 0 {
            return None;
        }
        edit::apply_all(&ctx.files, &edits).ok()?;
        let belief = search::belief(
            &ctx.history,
            &idea,
            &ctx.lineage,
            entry.expected_ratio(),
            &self.cfg,
        );
        Some(Move {
            fresh: search::observations(&ctx.history, &idea, &ctx.lineage).is_empty(),
            idea,
            hypothesis,
            category: entry.category.clone(),
            edits,
            belief,
            retry_of,
        })
    }

    /// Every move open now, in the playbook's order.
    fn moves(&self, ctx: &ProposalContext) -> Vec<Move> {
        let mut moves = Vec::new();
        for entry in &self.entries {
            if let Some(missing) = entry.requires.iter().find(|r| !ctx.kept_ids.contains(r)) {
                tracing::debug!("playbook: {} requires {missing}", entry.id);
                continue;
            }
            let Some(param) = &entry.param else {
                // An entry that inserts lines before an anchor still
                // "applies" to a champion that has it; the lineage decides.
                if !ctx.kept_ids.contains(&entry.id) {
                    moves.extend(self.consider(
                        ctx,
                        entry,
                        entry.id.clone(),
                        entry.hypothesis.clone(),
                        entry.edits.clone(),
                    ));
                }
                continue;
            };
            let Some(text) = ctx.files.get(&param.path) else {
                continue;
            };
            let Some(current) = param.current(text) else {
                continue;
            };
            let key = |v: i64| format!("{}={v}", entry.id);
            let measured = |v: i64| {
                ctx.history
                    .iter()
                    .any(|a| a.idea == key(v) && a.champion == ctx.champion_commit)
            };
            for v in param.candidates(current, &measured) {
                let Some(edit) = param.edit(text, v) else {
                    continue;
                };
                let hypothesis = entry
                    .hypothesis
                    .replace("{value}", &v.to_string())
                    .replace("{current}", &current.to_string());
                moves.extend(self.consider(ctx, entry, key(v), hypothesis, vec![edit]));
            }
        }
        moves
    }
}

impl Agent for Playbook {
    fn name(&self) -> &str {
        "playbook"
    }

    fn plans_retries(&self) -> bool {
        true
    }

    fn exploring(&self, ctx: &ProposalContext) -> bool {
        self.moves(ctx).iter().any(|m| m.fresh)
    }

    fn propose(&mut self, ctx: &ProposalContext) -> Result<Proposed> {
        let moves = self.moves(ctx);
        let beliefs: Vec<Belief> = moves.iter().map(|m| m.belief).collect();
        let fresh: Vec<bool> = moves.iter().map(|m| m.fresh).collect();
        let round = ctx.history.len() as u64;
        let Some(i) = search::choose(&beliefs, &fresh, self.threshold, &self.cfg, round) else {
            return Ok(Proposed::Exhausted);
        };
        let m = moves.into_iter().nth(i).expect("chosen among the moves");
        tracing::debug!(
            "playbook: {} (expected ratio {:.3}, keep probability {:.2})",
            m.idea,
            m.belief.ratio(),
            m.belief.keep_probability(self.threshold)
        );
        Ok(Proposed::Edits(Proposal {
            hypothesis: m.hypothesis,
            category: m.category,
            playbook_id: Some(m.idea),
            edits: m.edits,
            usage: None,
            origin: if m.retry_of.is_some() {
                Origin::Retry
            } else {
                Origin::Agent
            },
            retry_of: m.retry_of,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::process::Command;

    fn entries(list: &[(&str, u32, &[&str])]) -> Vec<(PathBuf, Entry)> {
        list.iter()
            .map(|(id, order, requires)| {
                let text = format!(
                    "order = {order}\nid = \"{id}\"\ncategory = \"t\"\nhypothesis = \"h\"\nrequires = {requires:?}\n\n[[edits]]\npath = \"a.c\"\nsearch = \"x\"\nreplace = \"y\"\n"
                );
                (PathBuf::from(format!("{id}.toml")), toml::from_str(&text).unwrap())
            })
            .collect()
    }

    #[test]
    fn ids_orders_and_requires_are_checked_across_the_playbook() {
        assert!(check_together(&entries(&[("a", 1, &[]), ("b", 2, &["a"])])).is_ok());
        let e = |l: &[(&str, u32, &[&str])]| check_together(&entries(l)).unwrap_err().to_string();
        assert!(e(&[("a", 1, &[]), ("a", 2, &[])]).contains("id \"a\" is also a.toml's"));
        assert!(e(&[("a", 1, &[]), ("b", 1, &[])]).contains("order 1 is also a.toml's"));
        assert!(e(&[("a", 1, &["c"])]).contains("requires \"c\", which no entry"));
        assert!(e(&[("a", 2, &["b"]), ("b", 3, &[])]).contains("must come before it"));
    }

    /// The shipped playbook passes the same checks, in its own order.
    #[test]
    fn the_shipped_playbook_loads_in_its_order() {
        let entries = load(&root().join("knowledge-base/playbook")).unwrap();
        assert!(entries.windows(2).all(|w| w[0].order < w[1].order));
        assert_eq!(entries[0].id, "ring-defer-taskrun");
    }

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
        assert!(entries.len() >= 23, "{} entries", entries.len());
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
        for e in entries.iter().filter(|e| e.param.is_none()) {
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
        // Every parameter is found in the server that has its
        // prerequisites, and its first steps compile.
        for e in &entries {
            let Some(p) = &e.param else { continue };
            let text = &files[&p.path];
            let current = p
                .current(text)
                .unwrap_or_else(|| panic!("{}: no #define {} after {kept:?}", e.id, p.define));
            for v in p.candidates(current, &|_| false) {
                let next = edit::apply_all(&files, &[p.edit(text, v).unwrap()]).unwrap();
                compiles(&next).unwrap_or_else(|err| panic!("{}={v}:\n{err}", e.id));
            }
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

    fn agent() -> Playbook {
        let entries = load(&root().join("knowledge-base/playbook")).unwrap();
        Playbook::new(entries, SearchConfig::default(), 0.03)
    }

    fn proposal(agent: &mut Playbook, ctx: &ProposalContext) -> Proposal {
        match agent.propose(ctx).unwrap() {
            Proposed::Edits(p) => p,
            _ => panic!("expected a proposal"),
        }
    }

    fn measured(
        p: &Proposal,
        n: usize,
        champion: &str,
        ratio: f64,
        ci: [f64; 2],
    ) -> AttemptSummary {
        let idea = p.playbook_id.clone().unwrap();
        let verdict = if ci[1] < 1.0 {
            AttemptVerdict::Promising
        } else {
            AttemptVerdict::Discard
        };
        let mut a = AttemptSummary::measured(n, &idea, champion, verdict);
        a.ratio = Some(ratio);
        a.ci95 = Some(ci);
        a
    }

    #[test]
    fn proposes_by_prior_and_skips_what_was_tried_or_needs_a_missing_win() {
        let mut agent = agent();
        let mut ctx = ProposalContext::for_tests(vanilla(), Path::new(""));
        let first = proposal(&mut agent, &ctx);
        assert_eq!(first.playbook_id.as_deref(), Some("ring-defer-taskrun"));
        assert_eq!(first.origin, Origin::Agent);
        ctx.history
            .push(measured(&first, 1, "c0", 0.99, [0.985, 0.996]));
        let second = proposal(&mut agent, &ctx);
        assert_eq!(second.playbook_id.as_deref(), Some("multishot-accept"));
        // Against a new champion the near-zero idea is worth a retry, and
        // says so; the multishot idea (kept) is never proposed again, even
        // where its edits would still apply (it only inserts before anchors).
        let multishot = edit::apply_all(&ctx.files, &second.edits).unwrap();
        assert!(edit::apply_all(&multishot, &second.edits).is_ok());
        ctx.history
            .push(measured(&second, 2, "c0", 0.9, [0.88, 0.92]));
        ctx.files = multishot;
        ctx.kept_ids = vec!["multishot-accept".into()];
        ctx.champion_commit = "c1".into();
        ctx.lineage.push("c1".into());
        let mut seen = vec![];
        for n in 3..40 {
            let Proposed::Edits(p) = agent.propose(&ctx).unwrap() else {
                break;
            };
            let idea = p.playbook_id.clone().unwrap();
            assert_ne!(idea, "multishot-accept");
            assert!(
                !seen.contains(&idea),
                "{idea} proposed twice on one champion"
            );
            if idea == "ring-defer-taskrun" {
                assert_eq!((p.origin, p.retry_of), (Origin::Retry, Some(1)));
            }
            seen.push(idea);
            ctx.history.push(measured(&p, n, "c1", 1.05, [1.03, 1.07]));
        }
        assert!(seen.contains(&"ring-defer-taskrun".to_string()), "{seen:?}");
        // Ideas that need a missing win are not proposed.
        assert!(
            !seen.iter().any(|i| i.starts_with("file-table")),
            "{seen:?}"
        );
    }

    #[test]
    fn a_parameter_is_explored_coarse_then_fine_and_the_search_stops() {
        let entries: Vec<Entry> = load(&root().join("knowledge-base/playbook"))
            .unwrap()
            .into_iter()
            .filter(|e| e.id == "queue-depth")
            .collect();
        assert_eq!(entries.len(), 1, "the playbook has a queue-depth parameter");
        let mut agent = Playbook::new(entries, SearchConfig::default(), 0.03);
        let mut ctx = ProposalContext::for_tests(vanilla(), Path::new(""));
        let mut order = vec![];
        for n in 1..20 {
            let Proposed::Edits(p) = agent.propose(&ctx).unwrap() else {
                break;
            };
            let files = edit::apply_all(&ctx.files, &p.edits).unwrap();
            assert!(files["treatment/server.c"].contains(&format!(
                "#define QUEUE_DEPTH {}\n",
                p.playbook_id.as_deref().unwrap().split('=').nth(1).unwrap()
            )));
            order.push(p.playbook_id.clone().unwrap());
            ctx.history.push(measured(&p, n, "c0", 1.0, [0.99, 1.01]));
        }
        // From 2048: x4 each way, then x2 each way, then nothing is likely.
        assert_eq!(
            order,
            [
                "queue-depth=512",
                "queue-depth=8192",
                "queue-depth=1024",
                "queue-depth=4096"
            ]
        );
    }

    #[test]
    fn an_entry_out_of_range_is_named_with_its_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("x.toml"),
            "order = 1\nid = \"x\"\ncategory = \"c\"\nhypothesis = \"h {value}\"\n[param]\ndefine = \"X\"\nmin = 1\nmax = 64\nvalues = [128]\n",
        )
        .unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("x.toml") && e.contains("param.values[0] = 128"),
            "{e}"
        );
    }
}
