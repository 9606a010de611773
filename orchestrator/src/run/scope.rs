//! The scope rule: an agent may change only the paths matched by
//! `run.allowed_paths` (default `treatment/*.c`, `treatment/*.h`; `**`
//! reaches into subdirectories). The build recipe is the harness's, not the
//! agent's. A symbolic link is never in scope, whatever its name, since it
//! could point anywhere.

use anyhow::Result;
use std::collections::BTreeMap;
use std::path::Path;

use crate::glob::Globs;

/// The files under `dir` (named `prefix/<relative path>`) that `patterns`
/// allow, at any depth: what an agent may read and change.
pub fn allowed_files(
    dir: &Path,
    prefix: &str,
    patterns: &[String],
) -> Result<BTreeMap<String, String>> {
    let scope = Globs::new("run.allowed_paths", patterns)?;
    let mut files = BTreeMap::new();
    for path in scope.files_under(dir, &format!("{prefix}/"))? {
        let text = std::fs::read_to_string(dir.join(&path[prefix.len() + 1..]))?;
        files.insert(path, text);
    }
    Ok(files)
}

/// The changed paths (with their is-symlink flag) that break the rule.
pub fn violations(patterns: &[String], changed: &[(String, bool)]) -> Vec<String> {
    let scope = Globs::new("run.allowed_paths", patterns).ok();
    let allowed = |path: &str| scope.as_ref().is_some_and(|g| g.matches(path));
    changed
        .iter()
        .filter(|(path, link)| *link || !allowed(path))
        .map(|(path, link)| {
            if *link {
                format!("{path} (symbolic link)")
            } else {
                path.clone()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path the rule lets an agent change.
    fn allowed(patterns: &[String], path: &str) -> bool {
        violations(patterns, &[(path.to_string(), false)]).is_empty()
    }

    fn defaults() -> Vec<String> {
        vec!["treatment/*.c".into(), "treatment/*.h".into()]
    }

    #[test]
    fn treatment_sources_are_allowed() {
        assert!(allowed(&defaults(), "treatment/server.c"));
        assert!(allowed(&defaults(), "treatment/pool.h"));
    }

    #[test]
    fn everything_else_is_not() {
        for p in [
            "treatment/Makefile",
            "control/main.go",
            "harness.toml",
            "treatment/sub/x.c",
            "treatment/../x.c",
            "x.c",
        ] {
            assert!(!allowed(&defaults(), p), "{p}");
        }
    }

    #[test]
    fn two_stars_reach_into_subdirectories() {
        let deep = vec!["kv/src/**/*.cpp".to_string()];
        assert!(allowed(&deep, "kv/src/main.cpp"));
        assert!(allowed(&deep, "kv/src/http/response.cpp"));
        assert!(!allowed(&deep, "kv/build.sh"));
        assert!(!allowed(&deep, "kv/src/../build.sh"));
    }

    #[test]
    fn the_files_an_agent_sees_are_found_at_any_depth() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("src/http")).unwrap();
        std::fs::write(d.path().join("src/main.cpp"), "m").unwrap();
        std::fs::write(d.path().join("src/http/r.cpp"), "r").unwrap();
        std::fs::write(d.path().join("build.sh"), "b").unwrap();
        let files = allowed_files(d.path(), "kv", &["kv/src/**/*.cpp".to_string()]).unwrap();
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            ["kv/src/http/r.cpp", "kv/src/main.cpp"]
        );
    }

    #[test]
    fn symlinks_are_violations_even_with_an_allowed_name() {
        let changed = vec![
            ("treatment/evil.c".to_string(), true),
            ("treatment/ok.c".to_string(), false),
        ];
        assert_eq!(
            violations(&defaults(), &changed),
            vec!["treatment/evil.c (symbolic link)"]
        );
    }
}
