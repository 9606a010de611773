//! A recorded run read back from `results/<run-id>/`: what review commands
//! and `champion:<run>` arms start from.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

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
    let mut ids: Vec<String> = std::fs::read_dir(results)
        .with_context(|| format!("reading {}", results.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("run.json").is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    ids.sort();
    ids.pop()
        .with_context(|| format!("no recorded run in {}", results.display()))
}
