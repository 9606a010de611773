//! The build cache: outside every repository, one entry per source hash,
//! each with a manifest ratchet writes after building and checks before any
//! reuse, so a binary planted in the cache is rebuilt, never measured.

use anyhow::{Context, Result};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::hash_file;

/// Where builds are cached: `$RATCHET_BUILD_CACHE`, else the system cache
/// for root and the user's cache otherwise; never inside a repository, where
/// an agent writes. Created so that only ratchet's user writes or lists it,
/// and the unprivileged user its servers run as can reach the entries it
/// is told of.
pub fn cache_dir() -> Result<PathBuf> {
    let dir = match std::env::var_os("RATCHET_BUILD_CACHE") {
        Some(d) => PathBuf::from(d),
        None if unsafe { libc::geteuid() } == 0 => PathBuf::from("/var/cache/ratchet/builds"),
        None => std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir)
            .join("ratchet/builds"),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))
        .with_context(|| format!("making {} private", dir.display()))?;
    Ok(dir)
}

/// What ratchet built into one cache entry.
#[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
pub(super) struct Manifest {
    pub(super) source_sha256: String,
    pub(super) binary_sha256: String,
}

/// The cached binary, if its manifest vouches for it; an entry without a
/// manifest or whose binary changed since is removed.
pub(super) fn reuse(
    dir: &Path,
    manifest: &Path,
    binary: &Path,
    source_hash: &str,
) -> Option<String> {
    if !binary.is_file() {
        return None;
    }
    let recorded: Option<Manifest> = std::fs::read(manifest)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let actual = hash_file(binary).ok();
    match (recorded, actual) {
        (Some(m), Some(h)) if m.source_sha256 == source_hash && m.binary_sha256 == h => Some(h),
        _ => {
            tracing::warn!(
                "build cache entry {} does not match the manifest ratchet wrote for it: rebuilding",
                dir.display()
            );
            std::fs::remove_dir_all(dir).ok();
            None
        }
    }
}
