//! Building the servers: the target with its own build command
//! (`[target]`), the control with `go build`. A build runs in its own process
//! group under a timeout that kills the whole group, and its output is kept so
//! a failure can be shown to the user or the agent. Builds are cached by the
//! hash of their sources and their recipe, in a directory outside every repository and
//! worktree (see [`cache_dir`]), each entry with a manifest of its source and
//! binary hashes that ratchet writes after building and checks before any
//! reuse: a binary planted in the cache is rebuilt, never measured.

use anyhow::{bail, Result};
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sha2::{Digest, Sha256};

mod bounded;
mod cache;
mod control;
mod sources;
mod target;
mod toolchain;
mod view;
use crate::bench::servers::privilege;
use crate::glob::Globs;
pub use bounded::run_bounded;
use bounded::run_bounded_in;
pub use cache::cache_dir;
use cache::{reuse, Manifest};
pub use control::{build_control, control_sources};
use sources::copy_sources;
pub use sources::{described, hash_file, hash_sources, hex, source_files};
pub use target::{build_overlaid, build_target};
use view::BuildView;

#[derive(Clone, Debug)]
pub struct Built {
    pub binary: PathBuf,
    pub source_hash: String,
    pub binary_hash: String,
}

/// A build that ran and failed, or ran out of time. Carries the log's tail.
#[derive(Debug)]
pub struct BuildFailure {
    pub timed_out: bool,
    pub log_tail: String,
}

impl fmt::Display for BuildFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.timed_out {
            "build timed out"
        } else {
            "build failed"
        };
        write!(f, "{what}:\n{}", self.log_tail)
    }
}

impl std::error::Error for BuildFailure {}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Whether `tool` is a file, or a file in a directory of `PATH`.
pub fn on_path(tool: &str) -> bool {
    if tool.contains('/') {
        return Path::new(tool).is_file();
    }
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|p| p.join(tool).is_file()))
        .unwrap_or(false)
}

fn require_tool(tool: &str, package: &str) -> Result<()> {
    if !on_path(tool) {
        bail!("`{tool}` not found on PATH: install the Debian package {package} (apt-get install {package})");
    }
    reachable(tool, &[])
}

/// Refuses, with the reason, a build program the build user cannot run,
/// in the build's view of `toolchain` (`target.toolchain`).
pub fn reachable(program: &str, toolchain: &[PathBuf]) -> Result<()> {
    let Some(id) = privilege::privilege().identity() else {
        return Ok(());
    };
    let user = build_user(id);
    match toolchain::unreachable(program, &user, toolchain) {
        Some(why) => bail!("{why}"),
        None => Ok(()),
    }
}

fn build_user(id: &privilege::Identity) -> toolchain::BuildUser<'_> {
    toolchain::BuildUser {
        name: &id.name,
        uid: id.uid,
        gid: id.gid,
    }
}

/// The build's own view exposing `toolchain`, when the build runs as
/// another user who cannot reach it; None when nothing needs exposing.
pub fn view_of(toolchain: &[PathBuf]) -> Result<Option<BuildView>> {
    match privilege::privilege().identity() {
        Some(id) if !toolchain.is_empty() => BuildView::plan(toolchain, &build_user(id)),
        _ => Ok(None),
    }
}

/// What a build is, beside its sources: its argv and the binary it leaves.
/// Part of a cache entry's key, so a changed build command never reuses a
/// binary the old one made.
struct Recipe<'a> {
    kind: &'a str,
    sources: &'a Globs,
    argv: Vec<String>,
    /// The variables passed beside PATH (`target.build_env`) with their
    /// values: another toolchain is another build.
    env: Vec<(String, String)>,
    /// The toolchain's directories the build reads (`target.toolchain`).
    toolchain: &'a [PathBuf],
    binary: &'a str,
}

impl Recipe<'_> {
    fn key(&self, source_hash: &str) -> String {
        let mut h = Sha256::new();
        h.update(source_hash.as_bytes());
        for a in &self.argv {
            h.update([0]);
            h.update(a.as_bytes());
        }
        for (k, v) in &self.env {
            h.update([2]);
            h.update(k.as_bytes());
            h.update([3]);
            h.update(v.as_bytes());
        }
        for dir in self.toolchain {
            h.update([4]);
            h.update(dir.as_os_str().as_encoded_bytes());
        }
        h.update([1]);
        h.update(self.binary.as_bytes());
        format!("{}-{}", self.kind, &hex(&h.finalize())[..16])
    }
}

/// The names of what a build left in `out`, for an error that says so.
fn left_in(out: &Path) -> String {
    let mut names: Vec<String> = std::fs::read_dir(out)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    if names.is_empty() {
        "nothing".into()
    } else {
        names.join(", ")
    }
}

/// Builds into the cache keyed by `kind` and the source hash, reusing an
/// earlier build of the same source that its manifest vouches for.
///
/// The build runs unprivileged on a copy of exactly the files the hash
/// covers, writing only to an output directory of its own: it cannot
/// change the worktree that is committed, read anything else of it, or
/// touch the cache. Its binary is copied into a root-owned entry, so
/// neither it nor a server can rewrite it later.
fn cached_build(
    recipe: &Recipe,
    src: &Path,
    cache: &Path,
    timeout: Duration,
    command: impl FnOnce(&Path, &Path) -> Command,
) -> Result<Built> {
    let source_hash = hash_sources(src, recipe.sources)?;
    let entry = recipe.key(&source_hash);
    let binary_name = recipe.binary;
    let dir = cache.join(&entry);
    let manifest = cache.join(format!("{entry}.manifest.json"));
    let binary = dir.join(binary_name);
    if let Some(binary_hash) = reuse(&dir, &manifest, &binary, &source_hash) {
        // Entries made before servers ran unprivileged were private.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        return Ok(Built {
            binary,
            source_hash,
            binary_hash,
        });
    }
    std::fs::create_dir_all(cache)?;
    let staging = tempfile::tempdir_in(cache)?;
    std::fs::set_permissions(staging.path(), std::fs::Permissions::from_mode(0o755))?;
    let (copy, out) = (staging.path().join("src"), staging.path().join("out"));
    copy_sources(src, recipe.sources, &copy)?;
    std::fs::create_dir(&out)?;
    if let Some(id) = privilege::privilege().identity() {
        privilege::give(&copy, id)?;
        privilege::give(&out, id)?;
    }
    let view = view_of(recipe.toolchain)?;
    if let Some(view) = &view {
        view.keeps("directory", staging.path())?;
    }
    let (status, log) = run_bounded_in(command(&copy, &out), timeout, view.map(Into::into))?;
    let built = out.join(binary_name);
    match status {
        Some(s) if s.success() && built.is_file() => {}
        Some(s) if s.success() => {
            return Err(BuildFailure {
                timed_out: false,
                log_tail: format!(
                    "{}\nthe build succeeded but left no {binary_name:?} in its output directory \
                     (target.binary names it, relative to {{out}}); it left: {}",
                    tail(&log, 30),
                    left_in(&out)
                ),
            }
            .into())
        }
        other => {
            return Err(BuildFailure {
                timed_out: other.is_none(),
                log_tail: tail(&log, 40),
            }
            .into())
        }
    }
    let kept = tempfile::tempdir_in(cache)?;
    std::fs::set_permissions(kept.path(), std::fs::Permissions::from_mode(0o755))?;
    let kept_binary = kept.path().join(binary_name);
    if let Some(parent) = kept_binary.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(&built, &kept_binary)?;
    std::fs::set_permissions(&kept_binary, std::fs::Permissions::from_mode(0o755))?;
    drop(staging);
    let binary_hash = hash_file(&kept_binary)?;
    let staged = kept.keep();
    if std::fs::rename(&staged, &dir).is_err() {
        // Another build of the same source won the race; ours is used
        // only if it is the same binary (builds are reproducible).
        std::fs::remove_dir_all(&staged).ok();
        if hash_file(&binary)? != binary_hash {
            bail!("a concurrent build of {entry} produced a different binary; try again");
        }
    }
    let record = Manifest {
        source_sha256: source_hash.clone(),
        binary_sha256: binary_hash.clone(),
    };
    crate::files::write_atomic(&manifest, &serde_json::to_vec_pretty(&record)?)?;
    Ok(Built {
        binary_hash,
        binary,
        source_hash,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c_sources() -> Globs {
        Globs::new("sources", &["**/*.c".to_string()]).unwrap()
    }

    fn recipe<'a>(kind: &'a str, sources: &'a Globs) -> Recipe<'a> {
        Recipe {
            kind,
            sources,
            argv: vec!["sh".into()],
            env: Vec::new(),
            toolchain: &[],
            binary: "server",
        }
    }

    #[test]
    fn source_hash_follows_content_not_build_outputs() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("server.c"), "int main(){}").unwrap();
        let h1 = hash_sources(d.path(), &c_sources()).unwrap();
        std::fs::write(d.path().join("server"), "binary").unwrap();
        assert_eq!(h1, hash_sources(d.path(), &c_sources()).unwrap());
        std::fs::write(d.path().join("server.c"), "int main(){return 1;}").unwrap();
        assert_ne!(h1, hash_sources(d.path(), &c_sources()).unwrap());
    }

    /// A build that writes the source's first line as its "binary".
    fn fake_build(src: &Path, cache: &Path) -> Built {
        let src = src.to_path_buf();
        cached_build(
            &recipe("fake", &c_sources()),
            &src.clone(),
            cache,
            Duration::from_secs(10),
            |copy, out| {
                let mut c = Command::new("sh");
                c.arg("-c").arg(format!(
                    "cp {} {}/server",
                    copy.join("main.c").display(),
                    out.display()
                ));
                c
            },
        )
        .unwrap()
    }

    /// The build sees a copy of the sources, runs as the unprivileged user,
    /// and its binary ends up root-owned: it cannot change the worktree it
    /// was built from, nor the binary it left.
    #[test]
    fn a_build_runs_unprivileged_on_a_copy_of_the_sources() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("main.c"), "int main;").unwrap();
        let cache = tempfile::tempdir().unwrap();
        let original = src.path().to_path_buf();
        let built = cached_build(
            &recipe("who", &c_sources()),
            src.path(),
            cache.path(),
            Duration::from_secs(10),
            |copy, out| {
                let mut c = Command::new("sh");
                c.arg("-c").arg(format!(
                    "id -u > {out}/server; echo x >> {copy}/main.c; touch {orig}/planted 2>/dev/null; true",
                    out = out.display(),
                    copy = copy.display(),
                    orig = original.display()
                ));
                c
            },
        )
        .unwrap();
        let uid = std::fs::read_to_string(&built.binary).unwrap();
        if let Some(id) = privilege::privilege().identity() {
            assert_eq!(uid.trim(), id.uid.to_string());
        }
        assert!(!original.join("planted").exists());
        assert_eq!(
            std::fs::read_to_string(original.join("main.c")).unwrap(),
            "int main;"
        );
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(&built.binary).unwrap().uid(), unsafe {
            libc::geteuid()
        });
    }

    #[test]
    fn a_binary_planted_in_the_cache_is_rebuilt_not_used() {
        let src = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("main.c"), "honest").unwrap();
        let first = fake_build(src.path(), cache.path());
        assert_eq!(std::fs::read_to_string(&first.binary).unwrap(), "honest");
        // Replaced in place: the manifest no longer vouches for it.
        std::fs::write(&first.binary, "planted").unwrap();
        let again = fake_build(src.path(), cache.path());
        assert_eq!(std::fs::read_to_string(&again.binary).unwrap(), "honest");
        assert_eq!(again.binary_hash, first.binary_hash);
        // Planted with no manifest at all: the same.
        std::fs::remove_file(cache.path().join(format!(
            "{}.manifest.json",
            recipe("fake", &c_sources()).key(&first.source_hash)
        )))
        .unwrap();
        std::fs::write(&first.binary, "planted").unwrap();
        let third = fake_build(src.path(), cache.path());
        assert_eq!(std::fs::read_to_string(&third.binary).unwrap(), "honest");
    }
}
