//! The scope rule: an agent may change only the paths matched by
//! `run.allowed_paths` (default `treatment/*.c`, `treatment/*.h`). The build
//! recipe is the harness's, not the agent's. A symbolic link is never in
//! scope, whatever its name, since it could point anywhere.

/// Glob match where `*` matches any run of characters except `/`.
pub fn matches(pattern: &str, path: &str) -> bool {
    let pat: Vec<&str> = pattern.split('/').collect();
    let segs: Vec<&str> = path.split('/').collect();
    pat.len() == segs.len()
        && pat
            .iter()
            .zip(&segs)
            .all(|(p, s)| segment(p.as_bytes(), s.as_bytes()))
}

fn segment(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => segment(&p[1..], s) || (!s.is_empty() && segment(p, &s[1..])),
        (Some(a), Some(b)) if a == b => segment(&p[1..], &s[1..]),
        _ => false,
    }
}

/// The files of `dir` (named `prefix/<name>`) that `patterns` allow: what an
/// agent may read and change.
pub fn allowed_files(
    dir: &std::path::Path,
    prefix: &str,
    patterns: &[String],
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let mut files = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let rel = format!("{prefix}/{}", entry.file_name().to_string_lossy());
        if entry.file_type()?.is_file() && allowed(patterns, &rel) {
            files.insert(rel, std::fs::read_to_string(entry.path())?);
        }
    }
    Ok(files)
}

pub fn allowed(patterns: &[String], path: &str) -> bool {
    !path
        .split('/')
        .any(|s| s == ".." || s == "." || s.is_empty())
        && patterns.iter().any(|p| matches(p, path))
}

/// The changed paths (with their is-symlink flag) that break the rule.
pub fn violations(patterns: &[String], changed: &[(String, bool)]) -> Vec<String> {
    changed
        .iter()
        .filter(|(path, link)| *link || !allowed(patterns, path))
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
