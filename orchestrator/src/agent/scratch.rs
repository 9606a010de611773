//! The copy of a worktree a command agent edits. The agent runs as the
//! unprivileged user (see [`crate::bench::servers::privilege`]), which cannot write
//! the root-owned worktree, so it works on a copy of it without `.git` and
//! its changes are carried back file by file. It can therefore never touch
//! the repository's git directory, and whatever it changed outside the
//! allowed paths still lands where the scope check sees it.

use anyhow::{Context, Result};
use std::path::Path;

use crate::bench::servers::privilege::{self, Identity};

/// What a copy leaves out: the repository itself.
fn skipped(name: &std::ffi::OsStr) -> bool {
    name == ".git"
}

/// Copies `from` into the new directory `to`, leaving out `.git`; symlinks
/// stay symlinks (never followed), modes are kept. With `owner`, the copy
/// is handed to that user.
pub fn copy_tree(from: &Path, to: &Path, owner: Option<&Identity>) -> Result<()> {
    std::fs::create_dir(to).with_context(|| format!("creating {}", to.display()))?;
    copy_into(from, to)?;
    if let Some(id) = owner {
        privilege::give(to, id).with_context(|| format!("handing {} over", to.display()))?;
    }
    Ok(())
}

fn copy_into(from: &Path, to: &Path) -> Result<()> {
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        if skipped(&entry.file_name()) {
            continue;
        }
        copy_entry(&entry.path(), &to.join(entry.file_name()))?;
    }
    Ok(())
}

/// Copies one file, symlink or directory (with its contents) to `to`.
fn copy_entry(path: &Path, to: &Path) -> Result<()> {
    let kind = std::fs::symlink_metadata(path)?.file_type();
    if kind.is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(path)?, to)?;
    } else if kind.is_dir() {
        std::fs::create_dir(to)?;
        std::fs::set_permissions(to, std::fs::metadata(path)?.permissions())?;
        copy_into(path, to)?;
    } else if kind.is_file() {
        std::fs::copy(path, to).with_context(|| format!("copying {}", path.display()))?;
    }
    Ok(())
}

/// Makes `worktree` (but its `.git`) match `edited`: changed and new files
/// are copied in, files gone from `edited` are removed.
pub fn carry_back(edited: &Path, worktree: &Path) -> Result<()> {
    for entry in std::fs::read_dir(worktree)? {
        let entry = entry?;
        if skipped(&entry.file_name()) {
            continue;
        }
        let theirs = edited.join(entry.file_name());
        if std::fs::symlink_metadata(&theirs).is_err() {
            remove(&entry.path())?;
        }
    }
    for entry in std::fs::read_dir(edited)? {
        let entry = entry?;
        if skipped(&entry.file_name()) {
            continue;
        }
        let (theirs, ours) = (entry.path(), worktree.join(entry.file_name()));
        let (t, o) = (
            std::fs::symlink_metadata(&theirs)?.file_type(),
            std::fs::symlink_metadata(&ours).ok().map(|m| m.file_type()),
        );
        match o {
            Some(o) if o.is_dir() && t.is_dir() => carry_back(&theirs, &ours)?,
            Some(o) if o.is_file() && t.is_file() && same_file(&theirs, &ours)? => {}
            Some(_) => {
                remove(&ours)?;
                copy_entry(&theirs, &ours)?;
            }
            None => copy_entry(&theirs, &ours)?,
        }
    }
    Ok(())
}

fn same_file(a: &Path, b: &Path) -> Result<bool> {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| -> Result<u32> { Ok(std::fs::metadata(p)?.permissions().mode()) };
    Ok(mode(a)? == mode(b)? && std::fs::read(a)? == std::fs::read(b)?)
}

fn remove(path: &Path) -> Result<()> {
    let kind = std::fs::symlink_metadata(path)?.file_type();
    if kind.is_dir() {
        std::fs::remove_dir_all(path)?;
    } else {
        std::fs::remove_file(path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_new_files_and_deletions_are_carried_back_and_git_is_untouched() {
        let wt = tempfile::tempdir().unwrap();
        let w = wt.path();
        std::fs::create_dir_all(w.join(".git")).unwrap();
        std::fs::write(w.join(".git/HEAD"), "ref").unwrap();
        std::fs::create_dir_all(w.join("treatment")).unwrap();
        std::fs::write(w.join("treatment/server.c"), "old").unwrap();
        std::fs::write(w.join("gone.txt"), "x").unwrap();
        std::fs::write(w.join("same.txt"), "y").unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let copy = scratch.path().join("work");
        copy_tree(w, &copy, None).unwrap();
        assert!(
            !copy.join(".git").exists(),
            "the agent sees no git directory"
        );
        std::fs::write(copy.join("treatment/server.c"), "new").unwrap();
        std::fs::write(copy.join("treatment/extra.h"), "h").unwrap();
        std::fs::remove_file(copy.join("gone.txt")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", copy.join("link")).unwrap();
        carry_back(&copy, w).unwrap();
        assert_eq!(
            std::fs::read_to_string(w.join("treatment/server.c")).unwrap(),
            "new"
        );
        assert_eq!(
            std::fs::read_to_string(w.join("treatment/extra.h")).unwrap(),
            "h"
        );
        assert!(!w.join("gone.txt").exists());
        assert_eq!(std::fs::read_to_string(w.join("same.txt")).unwrap(), "y");
        assert_eq!(
            std::fs::read_link(w.join("link")).unwrap(),
            Path::new("/etc/passwd")
        );
        assert_eq!(std::fs::read_to_string(w.join(".git/HEAD")).unwrap(), "ref");
    }
}
