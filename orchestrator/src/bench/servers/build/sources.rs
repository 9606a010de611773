//! A server's source: which files make it up, their hash (the identity a
//! build is cached and an attempt is told apart by), and the copy a build
//! runs on.

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::path::Path;

use crate::bench::servers::target::TargetConfig;
use crate::glob::Globs;

/// SHA-256 over the relative paths and contents of the files under `dir`
/// that `sources` matches, in sorted order, at any depth: the identity of a
/// server's source. A file no pattern names is not part of it, so a build
/// output or an editor's backup never changes it.
pub fn hash_sources(dir: &Path, sources: &Globs) -> Result<String> {
    let mut h = Sha256::new();
    for rel in source_files(dir, sources)? {
        h.update(rel.as_bytes());
        h.update([0]);
        h.update(std::fs::read(dir.join(&rel)).with_context(|| format!("reading {rel}"))?);
        h.update([0]);
    }
    Ok(hex(&h.finalize()))
}

/// The files under `dir` that `sources` matches, as sorted `/`-separated
/// relative paths.
pub fn source_files(dir: &Path, sources: &Globs) -> Result<Vec<String>> {
    sources.files_under(dir, "")
}

pub fn hash_file(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(hex(&Sha256::digest(bytes)))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Copies the files [`hash_sources`] covers from `src` into a new `to`,
/// each at its own relative path.
pub(super) fn copy_sources(src: &Path, sources: &Globs, to: &Path) -> Result<()> {
    std::fs::create_dir(to)?;
    for rel in source_files(src, sources)? {
        let dest = to.join(&rel);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(src.join(&rel), &dest).with_context(|| format!("copying {rel}"))?;
    }
    Ok(())
}

/// The compiler flags a source directory's Makefile sets (`CFLAGS ?= ...`):
/// the Makefile is their one statement, and the agents are told them from it.
pub fn makefile_cflags(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("Makefile")).ok()?;
    text.lines().find_map(|l| {
        let rest = l.trim_start().strip_prefix("CFLAGS")?;
        let value = rest
            .trim_start()
            .trim_start_matches(['?', ':', '+'])
            .strip_prefix('=')?;
        Some(value.trim().to_string())
    })
}

/// How the server in `dir` is built, in the words the agents are given: a
/// Makefile's flags read from it (its one statement of them), any other
/// build as its command.
pub fn described(dir: &Path, target: &TargetConfig) -> String {
    let mut how = match (target.build[0].as_str(), makefile_cflags(dir)) {
        ("make", Some(flags)) => format!("its Makefile (`cc {flags}`)"),
        ("make", None) => "its Makefile".into(),
        _ => format!("`{}`", target.build.join(" ")),
    };
    if target.io_uring {
        how += ", with liburing 2.3";
    }
    how
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_are_told_the_flags_the_makefile_sets() {
        let treatment = Path::new(env!("CARGO_MANIFEST_DIR")).join("../treatment");
        let flags = makefile_cflags(&treatment).unwrap();
        assert!(
            flags.contains("-Werror") && flags.contains("-O2"),
            "{flags}"
        );
        let c = TargetConfig::default();
        assert_eq!(
            described(&treatment, &c),
            format!("its Makefile (`cc {flags}`), with liburing 2.3")
        );
        let none = tempfile::tempdir().unwrap();
        assert_eq!(
            described(none.path(), &c),
            "its Makefile, with liburing 2.3"
        );
        let other = TargetConfig {
            build: vec!["sh".into(), "build.sh".into(), "{out}/kv".into()],
            io_uring: false,
            ..c
        };
        assert_eq!(described(&treatment, &other), "`sh build.sh {out}/kv`");
    }

    fn globs(p: &[&str]) -> Globs {
        Globs::new(
            "target.sources",
            &p.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
        .unwrap()
    }

    /// The identity of a source is every file its patterns name, at any
    /// depth and in any language: an edit the hash missed would reuse the
    /// old binary and judge the attempt a no-op.
    #[test]
    fn an_edit_anywhere_in_the_sources_changes_the_identity() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("src/http")).unwrap();
        std::fs::write(d.path().join("Cargo.toml"), "[package]").unwrap();
        std::fs::write(d.path().join("src/main.rs"), "fn main() {}").unwrap();
        std::fs::write(d.path().join("src/http/response.rs"), "pub fn ok() {}").unwrap();
        let sources = globs(&["src/**/*.rs", "Cargo.toml"]);
        let first = hash_sources(d.path(), &sources).unwrap();
        std::fs::write(d.path().join("src/http/response.rs"), "pub fn ok() { }").unwrap();
        let deeper = hash_sources(d.path(), &sources).unwrap();
        assert_ne!(first, deeper, "an edit in a subdirectory");
        std::fs::write(d.path().join("src/main.rs"), "fn main() { }").unwrap();
        assert_ne!(
            deeper,
            hash_sources(d.path(), &sources).unwrap(),
            "an edit of a .rs file"
        );
        // A file no pattern names is not part of the identity.
        let now = hash_sources(d.path(), &sources).unwrap();
        std::fs::create_dir(d.path().join("target")).unwrap();
        std::fs::write(d.path().join("target/kv"), "binary").unwrap();
        std::fs::write(d.path().join("src/notes.txt"), "x").unwrap();
        assert_eq!(now, hash_sources(d.path(), &sources).unwrap());
    }

    #[test]
    fn a_moved_file_is_another_source() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a")).unwrap();
        std::fs::write(d.path().join("a/x.c"), "int x;").unwrap();
        let sources = globs(&["**/*.c"]);
        let before = hash_sources(d.path(), &sources).unwrap();
        std::fs::create_dir_all(d.path().join("b")).unwrap();
        std::fs::rename(d.path().join("a/x.c"), d.path().join("b/x.c")).unwrap();
        assert_ne!(before, hash_sources(d.path(), &sources).unwrap());
    }

    #[test]
    fn a_copy_keeps_every_source_at_its_own_path() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("src/http")).unwrap();
        std::fs::write(d.path().join("src/http/r.cpp"), "r").unwrap();
        std::fs::write(d.path().join("build.sh"), "b").unwrap();
        std::fs::write(d.path().join("junk.o"), "j").unwrap();
        let sources = globs(&["src/**/*.cpp", "build.sh"]);
        let to = d.path().join("copy");
        copy_sources(d.path(), &sources, &to).unwrap();
        assert_eq!(
            std::fs::read_to_string(to.join("src/http/r.cpp")).unwrap(),
            "r"
        );
        assert!(to.join("build.sh").is_file() && !to.join("junk.o").exists());
        assert_eq!(
            hash_sources(d.path(), &sources).unwrap(),
            hash_sources(&to, &sources).unwrap()
        );
    }
}
