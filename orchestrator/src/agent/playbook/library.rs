//! The playbook's library: one curated idea per file in
//! `knowledge-base/playbook/*.toml`, each checked alone when it loads and
//! all of them together (unique ids and orders, every prerequisite present
//! and earlier), so a bad entry is named with its file before a run starts.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

use crate::agent::edit::Edit;
use crate::agent::param::Param;

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

    pub(super) fn expected_ratio(&self) -> f64 {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::agent::edit;
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

    pub(crate) fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .to_path_buf()
    }

    pub(crate) fn vanilla() -> BTreeMap<String, String> {
        let text = std::fs::read_to_string(root().join("treatment/server.c")).unwrap();
        BTreeMap::from([("treatment/server.c".to_string(), text)])
    }

    /// Builds a treatment with the treatment's own Makefile, the one
    /// statement of its flags.
    fn compiles(files: &BTreeMap<String, String>) -> Result<(), String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(
            root().join("treatment/Makefile"),
            dir.path().join("Makefile"),
        )
        .unwrap();
        std::fs::write(dir.path().join("server.c"), &files["treatment/server.c"]).unwrap();
        let out = Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(dir.path())
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

    /// An entry that requires others is tried only on a champion that kept
    /// them, so it is checked there: on the vanilla server with its
    /// prerequisites (theirs first) applied in the playbook's order.
    #[test]
    fn every_entry_applies_on_its_prerequisites_and_compiles() {
        let entries = load(&root().join("knowledge-base/playbook")).unwrap();
        let by_id = |id: &str| entries.iter().find(|e| e.id == id).unwrap();
        for e in entries.iter().filter(|e| !e.requires.is_empty()) {
            let mut needed: Vec<&Entry> = Vec::new();
            let mut open: Vec<&str> = e.requires.iter().map(String::as_str).collect();
            while let Some(id) = open.pop() {
                let r = by_id(id);
                if !needed.iter().any(|n| n.id == r.id) {
                    open.extend(r.requires.iter().map(String::as_str));
                    needed.push(r);
                }
            }
            needed.sort_by_key(|n| n.order);
            let mut files = vanilla();
            for n in needed {
                assert!(n.param.is_none(), "{} requires a parameter, {}", e.id, n.id);
                files = edit::apply_all(&files, &n.edits)
                    .unwrap_or_else(|err| panic!("{}'s prerequisite {}: {err}", e.id, n.id));
            }
            let edits = match &e.param {
                Some(p) => {
                    let text = &files[&p.path];
                    let current = p.current(text).expect("the parameter's #define");
                    let first = p.candidates(current, &|_| false)[0];
                    vec![p.edit(text, first).unwrap()]
                }
                None => e.edits.clone(),
            };
            let files = edit::apply_all(&files, &edits)
                .unwrap_or_else(|err| panic!("{} on its prerequisites: {err}", e.id));
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

    #[test]
    fn an_entry_out_of_range_is_named_with_its_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("x.toml"),
            "order = 1\nid = \"x\"\ncategory = \"c\"\nhypothesis = \"h {value}\"\n[param]\npath = \"treatment/server.c\"\ndefine = \"X\"\nmin = 1\nmax = 64\nvalues = [128]\n",
        )
        .unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("x.toml") && e.contains("param.values[0] = 128"),
            "{e}"
        );
    }
}
