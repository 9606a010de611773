//! What the server may read: files under `results/`, and nothing else. A
//! request names a path relative to it; one that climbs out (`..`), starts
//! at the root, or reaches out through a symlink is refused, whatever the
//! file system would have given.

use std::path::{Component, Path, PathBuf};

/// The results directory, resolved once, that every request is held to.
#[derive(Clone, Debug)]
pub struct Results {
    root: PathBuf,
}

impl Results {
    pub fn new(dir: &Path) -> std::io::Result<Self> {
        Ok(Self {
            root: dir.canonicalize()?,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file or directory `rel` names under the results directory, or
    /// why not: the refusal is what the server logs.
    pub fn resolve(&self, rel: &str) -> Result<PathBuf, String> {
        let path = Path::new(rel);
        if rel.is_empty()
            || path
                .components()
                .any(|c| !matches!(c, Component::Normal(_)))
        {
            return Err(format!("{rel:?} is not a plain path under results/"));
        }
        let real = self
            .root
            .join(path)
            .canonicalize()
            .map_err(|e| format!("{rel:?}: {e}"))?;
        if !real.starts_with(&self.root) {
            return Err(format!(
                "{rel:?} leads to {}, outside results/",
                real.display()
            ));
        }
        Ok(real)
    }

    /// The directory of run `id`: one name, holding a run record.
    pub fn run_dir(&self, id: &str) -> Result<PathBuf, String> {
        if id.contains('/') {
            return Err(format!("{id:?} is not a run id"));
        }
        let dir = self.resolve(id)?;
        if !dir.join("run.json").is_file() {
            return Err(format!("{id:?} is not a run in results/"));
        }
        Ok(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results() -> (tempfile::TempDir, Results) {
        let dir = tempfile::tempdir().unwrap();
        let results = dir.path().join("results");
        std::fs::create_dir_all(results.join("r1")).unwrap();
        std::fs::write(results.join("r1/run.json"), "{}").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "outside").unwrap();
        let r = Results::new(&results).unwrap();
        (dir, r)
    }

    #[test]
    fn a_file_under_results_is_served() {
        let (_d, r) = results();
        assert!(r.resolve("r1/run.json").unwrap().ends_with("r1/run.json"));
        assert!(r.run_dir("r1").is_ok());
    }

    #[test]
    fn climbing_out_or_starting_at_the_root_is_refused() {
        let (_d, r) = results();
        for bad in [
            "../secret.txt",
            "r1/../../secret.txt",
            "/etc/passwd",
            "",
            "./r1",
        ] {
            assert!(r.resolve(bad).is_err(), "{bad}");
        }
        assert!(r.run_dir("..").is_err());
        assert!(r.run_dir("r1/..").is_err());
    }

    #[test]
    fn a_symlink_out_of_results_is_refused() {
        let (d, r) = results();
        std::os::unix::fs::symlink(d.path().join("secret.txt"), r.root().join("r1/leak")).unwrap();
        std::os::unix::fs::symlink(d.path(), r.root().join("out")).unwrap();
        let why = r.resolve("r1/leak").unwrap_err();
        assert!(why.contains("outside results/"), "{why}");
        assert!(r.resolve("out/secret.txt").is_err());
        assert!(r.run_dir("out").is_err());
    }
}
