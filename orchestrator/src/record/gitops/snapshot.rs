//! Guards around an agent: snapshots of the run's git directory and of the
//! user's own working tree taken before it runs, and restored after, so
//! nothing an agent does outside its worktree survives it.

use anyhow::Result;
use std::path::Path;

use super::RunRepo;

/// What the git directory looked like before an agent ran: every ref, and
/// the files a hostile agent could use to change what git or the harness
/// does (config, hooks, info/, the worktree's own admin files).
pub struct GitDirSnapshot {
    refs: std::collections::BTreeMap<String, git2::Oid>,
    files: std::collections::BTreeMap<std::path::PathBuf, Vec<u8>>,
    watched: Vec<std::path::PathBuf>,
}

fn watched_files(
    dirs: &[std::path::PathBuf],
) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    for d in dirs {
        if d.is_file() {
            if let Ok(b) = std::fs::read(d) {
                out.insert(d.clone(), b);
            }
        } else if let Ok(entries) = std::fs::read_dir(d) {
            for e in entries.flatten() {
                let p = e.path();
                if p.is_file() {
                    if let Ok(b) = std::fs::read(&p) {
                        out.insert(p, b);
                    }
                }
            }
        }
    }
    out
}

impl GitDirSnapshot {
    pub fn take(run: &RunRepo) -> Result<Self> {
        let admin = run.repo.path().to_path_buf();
        // A worktree's admin directory names the shared git directory.
        let common = std::fs::read_to_string(admin.join("commondir"))
            .ok()
            .and_then(|rel| admin.join(rel.trim()).canonicalize().ok())
            .unwrap_or_else(|| admin.clone());
        let watched = vec![
            common.join("config"),
            common.join("HEAD"),
            common.join("hooks"),
            common.join("info"),
            common.join("packed-refs"),
            admin.join("HEAD"),
            admin.join("gitdir"),
            admin.join("commondir"),
        ];
        let mut refs = std::collections::BTreeMap::new();
        for r in run.repo.references()?.flatten() {
            if let (Some(name), Some(oid)) = (r.name(), r.target()) {
                refs.insert(name.to_string(), oid);
            }
        }
        Ok(Self {
            refs,
            files: watched_files(&watched),
            watched,
        })
    }

    /// Names what changed since the snapshot, and puts it back.
    pub fn restore(&self, run: &RunRepo) -> Result<Vec<String>> {
        let mut changed = Vec::new();
        let now = watched_files(&self.watched);
        for (path, bytes) in &now {
            if self.files.get(path) != Some(bytes) {
                changed.push(path.display().to_string());
                match self.files.get(path) {
                    Some(old) => std::fs::write(path, old)?,
                    None => std::fs::remove_file(path)?,
                }
            }
        }
        for (path, old) in &self.files {
            if !now.contains_key(path) {
                changed.push(path.display().to_string());
                std::fs::write(path, old)?;
            }
        }
        let repo = git2::Repository::open(&run.path)?;
        let mut current = std::collections::BTreeMap::new();
        for r in repo.references()?.flatten() {
            if let (Some(name), Some(oid)) = (r.name(), r.target()) {
                current.insert(name.to_string(), oid);
            }
        }
        for (name, oid) in &current {
            match self.refs.get(name) {
                Some(old) if old == oid => {}
                Some(old) => {
                    changed.push(format!("ref {name}"));
                    repo.reference(name, *old, true, "ratchet: undo an agent's ref change")?;
                }
                None => {
                    changed.push(format!("ref {name} (added)"));
                    repo.find_reference(name)?.delete()?;
                }
            }
        }
        for (name, oid) in &self.refs {
            if !current.contains_key(name) {
                changed.push(format!("ref {name} (deleted)"));
                repo.reference(name, *oid, true, "ratchet: restore a ref an agent deleted")?;
            }
        }
        Ok(changed)
    }
}

/// The state of the user's own working tree before an agent ran, so that
/// anything an agent writes there (through `../` paths, say) is detected and
/// put back: files that were clean return to HEAD, files the user had
/// changed return to the user's version.
pub struct MainTreeSnapshot {
    root: std::path::PathBuf,
    dirty: std::collections::BTreeMap<String, Option<Vec<u8>>>,
}

fn dirty_paths(repo: &git2::Repository) -> Result<Vec<String>> {
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false);
    Ok(repo
        .statuses(Some(&mut opts))?
        .iter()
        .filter_map(|s| s.path().map(str::to_string))
        .collect())
}

impl MainTreeSnapshot {
    pub fn take(root: &Path) -> Result<Self> {
        let repo = git2::Repository::open(root)?;
        let dirty = dirty_paths(&repo)?
            .into_iter()
            .map(|p| {
                let content = std::fs::read(root.join(&p)).ok();
                (p, content)
            })
            .collect();
        Ok(Self {
            root: root.to_path_buf(),
            dirty,
        })
    }

    /// Names the paths that changed since the snapshot and restores them.
    pub fn restore(&self) -> Result<Vec<String>> {
        let repo = git2::Repository::open(&self.root)?;
        let head = repo.head()?.peel_to_tree()?;
        let now: std::collections::BTreeSet<String> = dirty_paths(&repo)?.into_iter().collect();
        let mut changed = Vec::new();
        let candidates: std::collections::BTreeSet<&String> =
            now.iter().chain(self.dirty.keys()).collect();
        for path in candidates {
            let file = self.root.join(path);
            let current = std::fs::read(&file).ok();
            let wanted = match self.dirty.get(path) {
                Some(saved) => saved.clone(),
                None => match head.get_path(Path::new(path)) {
                    Ok(entry) => Some(repo.find_blob(entry.id())?.content().to_vec()),
                    Err(_) => None,
                },
            };
            if current == wanted {
                continue;
            }
            changed.push(path.clone());
            match wanted {
                Some(bytes) => std::fs::write(&file, bytes)?,
                None => std::fs::remove_file(&file)?,
            }
        }
        Ok(changed)
    }
}
