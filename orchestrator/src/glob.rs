//! Path patterns, one syntax for every list of them: a target's sources and
//! the scope an agent may change. `*` stays within one directory and `**`
//! crosses any number, so `src/**/*.rs` reaches `src/a/b/c.rs` while
//! `treatment/*.c` never reaches `treatment/sub/x.c`. Matching is
//! globset's (ripgrep's), not ours.

use anyhow::{bail, Context, Result};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use std::path::Path;

/// A compiled list of patterns, matched against `/`-separated relative
/// paths.
#[derive(Clone, Debug)]
pub struct Globs {
    set: GlobSet,
}

impl Globs {
    /// Compiles `patterns`; `field` names the setting in every error. A
    /// pattern must be relative and may not climb out with `..`: a list is
    /// a statement about files under one directory.
    pub fn new(field: &str, patterns: &[String]) -> Result<Self> {
        if patterns.is_empty() {
            bail!("{field} must name at least one pattern, for example \"src/**/*.c\"");
        }
        let mut set = GlobSetBuilder::new();
        for p in patterns {
            check_pattern(field, p)?;
            let glob = GlobBuilder::new(p)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .with_context(|| format!("{field}: {p:?} is not a valid pattern"))?;
            set.add(glob);
        }
        Ok(Self {
            set: set
                .build()
                .with_context(|| format!("{field}: the patterns do not compile"))?,
        })
    }

    /// The files under `dir` that match, named `prefix` + their
    /// `/`-separated path from `dir` (the name the patterns are written
    /// against), sorted. Symbolic links are neither followed nor listed
    /// (a file of the tree, not whatever a link points at), and `.git` is
    /// not entered.
    pub fn files_under(&self, dir: &Path, prefix: &str) -> Result<Vec<String>> {
        let mut found = Vec::new();
        self.walk(dir, prefix, &mut found)?;
        found.sort();
        Ok(found)
    }

    fn walk(&self, dir: &Path, prefix: &str, found: &mut Vec<String>) -> Result<()> {
        let entries =
            std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = format!("{prefix}{name}");
            let kind = entry.file_type()?;
            if kind.is_dir() && name != ".git" {
                self.walk(&entry.path(), &format!("{path}/"), found)?;
            } else if kind.is_file() && self.matches(&path) {
                found.push(path);
            }
        }
        Ok(())
    }

    /// Whether `path` (relative, `/`-separated) matches any pattern. A path
    /// with an empty, `.` or `..` component never does.
    pub fn matches(&self, path: &str) -> bool {
        !path
            .split('/')
            .any(|s| s == ".." || s == "." || s.is_empty())
            && self.set.is_match(path)
    }
}

fn check_pattern(field: &str, p: &str) -> Result<()> {
    if p.trim().is_empty() {
        bail!("{field}: a pattern is empty");
    }
    if Path::new(p).is_absolute() {
        bail!("{field}: {p:?} is absolute; patterns are relative to their directory");
    }
    if p.split('/').any(|s| s == "..") {
        bail!("{field}: {p:?} climbs out with \"..\"");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn globs(p: &[&str]) -> Globs {
        let p: Vec<String> = p.iter().map(|s| s.to_string()).collect();
        Globs::new("target.sources", &p).unwrap()
    }

    #[test]
    fn a_star_stays_in_its_directory_and_two_cross_them() {
        let flat = globs(&["treatment/*.c"]);
        assert!(flat.matches("treatment/server.c"));
        assert!(!flat.matches("treatment/sub/x.c"));
        let deep = globs(&["src/**/*.rs", "Makefile"]);
        assert!(deep.matches("src/main.rs"));
        assert!(deep.matches("src/a/b/c.rs"));
        assert!(deep.matches("Makefile"));
        assert!(!deep.matches("sub/Makefile"));
        assert!(!deep.matches("src/main.c"));
    }

    #[test]
    fn paths_that_climb_never_match() {
        let all = globs(&["**"]);
        assert!(all.matches("a/b"));
        for bad in ["../x", "a/../b", "./a", "a//b", ""] {
            assert!(!all.matches(bad), "{bad}");
        }
    }

    #[test]
    fn files_are_found_at_any_depth_under_their_prefix() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("src/http")).unwrap();
        std::fs::create_dir_all(d.path().join(".git")).unwrap();
        std::fs::write(d.path().join("src/main.cpp"), "m").unwrap();
        std::fs::write(d.path().join("src/http/r.cpp"), "r").unwrap();
        std::fs::write(d.path().join(".git/x.cpp"), "g").unwrap();
        std::fs::write(d.path().join("build.sh"), "b").unwrap();
        std::os::unix::fs::symlink("main.cpp", d.path().join("src/link.cpp")).unwrap();
        let found = globs(&["kv/**/*.cpp"])
            .files_under(d.path(), "kv/")
            .unwrap();
        assert_eq!(found, ["kv/src/http/r.cpp", "kv/src/main.cpp"]);
    }

    #[test]
    fn bad_patterns_are_named_with_their_field() {
        for (patterns, says) in [
            (vec![], "at least one pattern"),
            (vec!["".to_string()], "is empty"),
            (vec!["/etc/*.c".to_string()], "absolute"),
            (vec!["../x/*.c".to_string()], "climbs out"),
            (vec!["src/[".to_string()], "not a valid pattern"),
        ] {
            let err = Globs::new("target.sources", &patterns)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("target.sources") && err.contains(says),
                "{err}"
            );
        }
    }
}
