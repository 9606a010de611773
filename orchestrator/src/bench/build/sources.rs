//! A server's source: which files make it up, their hash (the identity a
//! build is cached and an attempt is told apart by), and the copy a build
//! runs on.

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Files that make up a server's source, by name.
fn is_source(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "Makefile"
        || name == "go.mod"
        || matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("c" | "h" | "go")
        )
}

/// SHA-256 over the relative paths and contents of a directory's source
/// files, in sorted order: the identity of a server's source.
pub fn hash_sources(dir: &Path) -> Result<String> {
    let mut h = Sha256::new();
    for f in source_files(dir)? {
        h.update(f.file_name().unwrap().as_encoded_bytes());
        h.update([0]);
        h.update(std::fs::read(&f)?);
        h.update([0]);
    }
    Ok(hex(&h.finalize()))
}

/// A directory's source files, sorted.
fn source_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && is_source(p))
        .collect();
    files.sort();
    Ok(files)
}

pub fn hash_file(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(hex(&Sha256::digest(bytes)))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Copies the files [`hash_sources`] covers from `src` into a new `to`.
pub(super) fn copy_sources(src: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir(to)?;
    for f in source_files(src)? {
        std::fs::copy(&f, to.join(f.file_name().expect("a file")))
            .with_context(|| format!("copying {}", f.display()))?;
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

/// How the treatment in `dir` is built, in the words the agents are given.
pub fn described(dir: &Path) -> String {
    match makefile_cflags(dir) {
        Some(flags) => format!("its Makefile (`cc {flags}`)"),
        None => "its Makefile".into(),
    }
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
        assert_eq!(
            described(&treatment),
            format!("its Makefile (`cc {flags}`)")
        );
        let none = tempfile::tempdir().unwrap();
        assert_eq!(described(none.path()), "its Makefile");
    }
}
