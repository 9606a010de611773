//! The docs that restate the code are checked against it: the module table
//! in docs/architecture.md names every source file and no other, and the
//! configuration reference is the shipped harness.toml.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn sources(dir: &Path, root: &Path, out: &mut BTreeSet<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, root, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.insert(p.strip_prefix(root).unwrap().display().to_string());
        }
    }
}

#[test]
fn the_module_table_names_every_source_file_and_no_other() {
    let src = repo().join("orchestrator/src");
    let mut files = BTreeSet::new();
    sources(&src, &src, &mut files);
    let doc = std::fs::read_to_string(repo().join("docs/architecture.md")).unwrap();
    let table = doc
        .split("## Every module")
        .nth(1)
        .expect("docs/architecture.md has an \"Every module\" section");
    let named: BTreeSet<String> = table
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect();
    let missing: Vec<_> = files.difference(&named).collect();
    let stale: Vec<_> = named.difference(&files).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/architecture.md's table lacks {missing:?} and names files that do not exist: {stale:?}"
    );
}

#[test]
fn the_configuration_reference_is_the_shipped_harness_toml() {
    let doc = std::fs::read_to_string(repo().join("docs/configuration.md")).unwrap();
    let shipped = std::fs::read_to_string(repo().join("harness.toml")).unwrap();
    let copy = doc
        .split_once("```toml\n")
        .and_then(|(_, rest)| rest.rsplit_once("```"))
        .map(|(block, _)| block)
        .expect("docs/configuration.md holds a ```toml block");
    assert!(
        copy == shipped,
        "docs/configuration.md's copy of harness.toml is out of date: run scripts/config-doc.sh"
    );
}
