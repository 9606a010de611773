//! A recorded run read back from `results/<run-id>/`: what review commands
//! and `champion:<run>` arms start from.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

use crate::bench::environment::RECORD_SCHEMA;
use crate::record::journal::{self, AttemptRecord, RunRecord};

/// A run as `results/<run-id>/` holds it.
pub struct RecordedRun {
    pub dir: PathBuf,
    pub run: RunRecord,
    pub attempts: Vec<AttemptRecord>,
}

impl RecordedRun {
    /// Opens `results/<id>`, or the latest run when `id` is None. Read only:
    /// a torn last line (a run killed mid-append) is skipped, not cut off.
    pub fn open(results: &Path, id: Option<&str>) -> Result<Self> {
        let id = match id {
            Some(id) => id.to_string(),
            None => latest_run(results)?,
        };
        let dir = results.join(&id);
        let run_path = dir.join("run.json");
        if !run_path.exists() {
            bail!(
                "no run {id:?} in {} (expected {})",
                results.display(),
                run_path.display()
            );
        }
        let run: RunRecord = crate::files::read_json(&run_path)?;
        if run.fingerprint.schema > RECORD_SCHEMA {
            bail!(
                "{} was written by a newer ratchet (record schema {}, this one reads up to {}): {}",
                run_path.display(),
                run.fingerprint.schema,
                RECORD_SCHEMA,
                run.fingerprint.ratchet_version
            );
        }
        let attempts = journal::read_attempts(&dir.join("attempts.jsonl"))?;
        Ok(Self { dir, run, attempts })
    }

    pub fn threshold(&self) -> f64 {
        self.run.config.compare.threshold
    }

    pub fn unit(&self) -> &'static str {
        self.attempts
            .iter()
            .find_map(|a| a.meter)
            .map_or("?", |m| m.unit())
    }

    pub fn attempt(&self, n: usize) -> Option<&AttemptRecord> {
        self.attempts.iter().find(|a| a.number == n)
    }
}

/// The newest run in `results/` (run ids sort by their start time).
pub fn latest_run(results: &Path) -> Result<String> {
    run_ids(results)?
        .pop()
        .with_context(|| format!("no recorded run in {}", results.display()))
}

/// Every run in `results/`: the directories holding a run record, oldest
/// first.
pub fn run_ids(results: &Path) -> Result<Vec<String>> {
    let mut ids: Vec<String> = std::fs::read_dir(results)
        .with_context(|| format!("reading {}", results.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("run.json").is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    ids.sort();
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed_results() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../results")
    }

    /// Every run committed under results/ still opens, whatever schema it
    /// was written in.
    #[test]
    fn every_committed_run_still_loads() {
        let mut opened = 0;
        for e in std::fs::read_dir(committed_results()).unwrap() {
            let dir = e.unwrap().path();
            if !dir.join("run.json").is_file() {
                continue;
            }
            let id = dir.file_name().unwrap().to_str().unwrap().to_string();
            let run = RecordedRun::open(&committed_results(), Some(&id))
                .unwrap_or_else(|e| panic!("{id}: {e:#}"));
            assert!(run.run.fingerprint.schema <= RECORD_SCHEMA);
            assert!(!run.attempts.is_empty(), "{id} has no attempts");
            opened += 1;
        }
        assert!(opened >= 5, "only {opened} committed runs found");
    }

    #[test]
    fn a_record_from_a_newer_ratchet_is_refused_by_name() {
        let results = tempfile::tempdir().unwrap();
        let src = committed_results().join("20261205-150228");
        let dir = results.path().join("r");
        std::fs::create_dir(&dir).unwrap();
        let mut run: serde_json::Value =
            serde_json::from_slice(&std::fs::read(src.join("run.json")).unwrap()).unwrap();
        run["fingerprint"]["schema"] = (RECORD_SCHEMA + 1).into();
        std::fs::write(dir.join("run.json"), serde_json::to_vec(&run).unwrap()).unwrap();
        std::fs::copy(src.join("attempts.jsonl"), dir.join("attempts.jsonl")).unwrap();
        let e = RecordedRun::open(results.path(), Some("r")).err().unwrap();
        assert!(format!("{e:#}").contains("newer ratchet"), "{e:#}");
    }
}
