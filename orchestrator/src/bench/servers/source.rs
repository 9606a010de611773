//! A server's source at a git revision or tree, written out for a build
//! without touching any working tree.

use anyhow::{bail, Context, Result};
use std::path::Path;

/// Writes the files of `subdir` at `rev` into `dest`.
pub fn export_subtree(repo_root: &Path, rev: &str, subdir: &Path, dest: &Path) -> Result<()> {
    let repo = git2::Repository::discover(repo_root)
        .with_context(|| format!("{} is not inside a git repository", repo_root.display()))?;
    let object = repo
        .revparse_single(rev)
        .with_context(|| format!("unknown git revision {rev:?}"))?;
    let tree = object
        .peel_to_tree()
        .with_context(|| format!("revision {rev:?} has no tree"))?;
    export_tree_subdir(&repo, tree.id(), subdir, dest)
        .with_context(|| format!("exporting {} at revision {rev:?}", subdir.display()))
}

/// Writes the files of `subdir` in the tree `tree` into `dest`.
pub fn export_tree_subdir(
    repo: &git2::Repository,
    tree: git2::Oid,
    subdir: &Path,
    dest: &Path,
) -> Result<()> {
    let tree = repo.find_tree(tree)?;
    let entry = tree
        .get_path(subdir)
        .with_context(|| format!("no {} in the tree", subdir.display()))?;
    let sub = repo
        .find_tree(entry.id())
        .with_context(|| format!("{} is not a directory", subdir.display()))?;
    write_tree(repo, &sub, dest)
}

fn write_tree(repo: &git2::Repository, tree: &git2::Tree, dest: &Path) -> Result<()> {
    std::fs::create_dir_all(dest)?;
    for entry in tree.iter() {
        let name = entry.name().context("non-UTF-8 file name in git tree")?;
        if name.contains('/') || name == ".." {
            bail!("refusing git tree entry {name:?}");
        }
        let path = dest.join(name);
        match entry.kind() {
            Some(git2::ObjectType::Blob) => {
                let blob = repo.find_blob(entry.id())?;
                std::fs::write(&path, blob.content())?;
            }
            Some(git2::ObjectType::Tree) => write_tree(repo, &repo.find_tree(entry.id())?, &path)?,
            _ => {}
        }
    }
    Ok(())
}
