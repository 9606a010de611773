//! Where a measuring command keeps its record: a JSON file named by the time.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

use crate::{clock, files};

/// Writes a command's record into `dir`, named by the time; returns its path.
pub fn store(dir: &Path, value: &impl serde::Serialize) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let stamp = clock::stamp();
    let path = dir.join(format!("{stamp}.json"));
    files::write_atomic(&path, &serde_json::to_vec_pretty(value)?)?;
    Ok(path)
}
