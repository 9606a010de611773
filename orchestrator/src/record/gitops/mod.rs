//! A run's git state: its branch and worktree, commits, refs and diffs, and
//! the guards that undo what an agent did to the git directory or to files
//! outside the worktree.

use anyhow::{Context, Result};
use std::path::Path;

mod snapshot;
pub use snapshot::{GitDirSnapshot, MainTreeSnapshot};

/// The first ten characters of a commit id, as every output shows them.
pub fn short(oid: &str) -> &str {
    oid.char_indices().nth(10).map_or(oid, |(i, _)| &oid[..i])
}

/// A run's git state: its branch `ratchet/<run-id>` checked out in its own
/// worktree, so the user's working tree is never touched.
pub struct RunRepo {
    pub repo: git2::Repository,
    pub path: std::path::PathBuf,
    pub branch: String,
}

fn signature(repo: &git2::Repository) -> Result<git2::Signature<'static>> {
    Ok(match repo.signature() {
        Ok(s) => s.to_owned(),
        Err(_) => git2::Signature::now("ratchet", "ratchet@localhost")?,
    })
}

impl RunRepo {
    /// Creates the branch at the main repository's HEAD and its worktree.
    pub fn create(root: &Path, run_id: &str, path: &Path) -> Result<Self> {
        let main = git2::Repository::open(root)
            .with_context(|| format!("{} is not a git repository", root.display()))?;
        let head = main
            .head()
            .and_then(|h| h.peel_to_commit())
            .context("the repository has no commit to start a run from")?;
        let branch_name = format!("ratchet/{run_id}");
        let branch = main
            .branch(&branch_name, &head, false)
            .with_context(|| format!("creating branch {branch_name}"))?;
        let reference = branch.into_reference();
        let mut opts = git2::WorktreeAddOptions::new();
        opts.reference(Some(&reference));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        main.worktree(&format!("ratchet-{run_id}"), path, Some(&opts))
            .with_context(|| format!("creating worktree {}", path.display()))?;
        Self::open(root, run_id, path)
    }

    /// Opens an existing run's worktree, re-creating it from the branch if
    /// it was deleted.
    pub fn open(root: &Path, run_id: &str, path: &Path) -> Result<Self> {
        let branch = format!("ratchet/{run_id}");
        if !path.join(".git").exists() {
            let main = git2::Repository::open(root)?;
            if let Ok(wt) = main.find_worktree(&format!("ratchet-{run_id}")) {
                wt.prune(Some(
                    git2::WorktreePruneOptions::new()
                        .valid(true)
                        .working_tree(true),
                ))
                .ok();
            }
            let reference = main
                .find_branch(&branch, git2::BranchType::Local)
                .with_context(|| format!("branch {branch} is missing"))?
                .into_reference();
            let mut opts = git2::WorktreeAddOptions::new();
            opts.reference(Some(&reference));
            main.worktree(&format!("ratchet-{run_id}"), path, Some(&opts))?;
        }
        let repo = git2::Repository::open(path)?;
        Ok(Self {
            repo,
            path: path.to_path_buf(),
            branch,
        })
    }

    pub fn head(&self) -> Result<git2::Oid> {
        Ok(self.repo.head()?.peel_to_commit()?.id())
    }

    /// Every path that differs from HEAD in the worktree, untracked and
    /// ignored files included, with whether it is a symbolic link. It
    /// compares HEAD's tree with a tree hashed afresh from the files, so no
    /// index flag (`--skip-worktree`, `--assume-unchanged`) can hide a change.
    pub fn changed_paths(&self) -> Result<Vec<(String, bool)>> {
        self.changed_since(self.repo.head()?.peel_to_tree()?.id())
    }

    /// Every path where the worktree differs from `tree` (see
    /// [`Self::changed_paths`]).
    pub fn changed_since(&self, tree: git2::Oid) -> Result<Vec<(String, bool)>> {
        let then = self.repo.find_tree(tree)?;
        let now = self.repo.find_tree(self.tree_of_worktree()?)?;
        let diff = self.repo.diff_tree_to_tree(Some(&then), Some(&now), None)?;
        let mut out = Vec::new();
        for d in diff.deltas() {
            let file = if d.status() == git2::Delta::Deleted {
                d.old_file()
            } else {
                d.new_file()
            };
            let Some(path) = file.path().and_then(|p| p.to_str()) else {
                continue;
            };
            let link = d.new_file().mode() == git2::FileMode::Link;
            out.push((path.to_string(), link));
        }
        Ok(out)
    }

    /// Files of the worktree with more than one hard link: the other name
    /// could be anywhere, outside the repository included.
    pub fn hard_links(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        walk(&self.path, &self.path, &mut |rel, meta| {
            use std::os::unix::fs::MetadataExt;
            if meta.is_file() && meta.nlink() > 1 {
                out.push(rel.to_string());
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// The worktree as a git tree, hashed from the files themselves (not
    /// through the index), `.git` left out.
    pub fn tree_of_worktree(&self) -> Result<git2::Oid> {
        tree_of_dir(&self.repo, &self.path)
    }

    /// Commits `tree` on top of HEAD. With `advance`, the branch moves to
    /// the commit (a kept mutation); without, the commit is only returned (a
    /// discarded attempt, kept under a ref).
    pub fn commit_tree(&self, tree: git2::Oid, message: &str, advance: bool) -> Result<git2::Oid> {
        let tree = self.repo.find_tree(tree)?;
        let parent = self.repo.head()?.peel_to_commit()?;
        let sig = signature(&self.repo)?;
        let update = if advance { Some("HEAD") } else { None };
        Ok(self
            .repo
            .commit(update, &sig, &sig, message, &tree, &[&parent])?)
    }

    /// Commits the worktree as it is now (see [`Self::commit_tree`]).
    pub fn commit_worktree(&self, message: &str, advance: bool) -> Result<git2::Oid> {
        self.commit_tree(self.tree_of_worktree()?, message, advance)
    }

    pub fn set_ref(&self, name: &str, oid: git2::Oid, log: &str) -> Result<()> {
        self.repo.reference(name, oid, true, log)?;
        Ok(())
    }

    /// `git reset --hard <oid>` plus removal of untracked and ignored files:
    /// nothing an attempt wrote survives it.
    pub fn reset_hard(&self, oid: git2::Oid) -> Result<()> {
        let obj = self.repo.find_object(oid, None)?;
        self.repo.reset(&obj, git2::ResetType::Hard, None)?;
        let tree = self.repo.find_commit(oid)?.tree()?;
        for (path, _) in self.changed_paths()? {
            let p = self.path.join(&path);
            if let Ok(m) = std::fs::symlink_metadata(&p) {
                if m.is_dir() {
                    std::fs::remove_dir_all(&p)?;
                } else {
                    std::fs::remove_file(&p)?;
                }
            }
            // What reset left different (a file the index was told to
            // skip) comes back from the commit.
            if let Ok(entry) = tree.get_path(Path::new(&path)) {
                if entry.kind() == Some(git2::ObjectType::Blob) {
                    std::fs::write(&p, self.repo.find_blob(entry.id())?.content())?;
                }
            }
        }
        Ok(())
    }

    /// Merges each attempt commit of `parts` onto `champion`'s tree in turn,
    /// three-way (the attempt's parent is the base: a cherry-pick), and
    /// writes the union into the worktree; HEAD stays at the champion. A
    /// part whose change conflicts with the champion or an earlier part is
    /// named with its paths: the merge stops there and the worktree is
    /// left as it was.
    pub fn merge_into_worktree(
        &self,
        champion: git2::Oid,
        parts: &[(usize, git2::Oid)],
    ) -> Result<std::result::Result<(), String>> {
        let mut ours = self.repo.find_commit(champion)?.tree()?;
        for (n, oid) in parts {
            let commit = self.repo.find_commit(*oid)?;
            let theirs = commit.tree()?;
            let base = commit.parent(0)?.tree()?;
            let mut index = self.repo.merge_trees(&base, &ours, &theirs, None)?;
            if index.has_conflicts() {
                let paths: Vec<String> = index
                    .conflicts()?
                    .filter_map(|c| c.ok())
                    .filter_map(|c| c.our.or(c.their).or(c.ancestor))
                    .map(|e| String::from_utf8_lossy(&e.path).to_string())
                    .collect();
                return Ok(Err(format!(
                    "attempt #{n} does not apply to the champion {}: its change conflicts in {}",
                    short(&champion.to_string()),
                    paths.join(", ")
                )));
            }
            let tree = index.write_tree_to(&self.repo)?;
            ours = self.repo.find_tree(tree)?;
        }
        let mut checkout = git2::build::CheckoutBuilder::new();
        checkout.force();
        self.repo
            .checkout_tree(ours.as_object(), Some(&mut checkout))?;
        Ok(Ok(()))
    }

    /// The unified diff between two commits.
    pub fn diff(&self, from: git2::Oid, to: git2::Oid) -> Result<String> {
        let a = self.repo.find_commit(from)?.tree()?;
        let b = self.repo.find_commit(to)?.tree()?;
        let diff = self.repo.diff_tree_to_tree(Some(&a), Some(&b), None)?;
        patch_text(&diff)
    }
}

/// Calls `f` with the repository-relative path and metadata of every entry
/// under `dir` (not following symbolic links), `.git` left out.
fn walk(
    root: &Path,
    dir: &Path,
    f: &mut dyn FnMut(&str, &std::fs::Metadata) -> Result<()>,
) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let path = e.path();
        if dir == root && e.file_name() == ".git" {
            continue;
        }
        let meta = std::fs::symlink_metadata(&path)?;
        let rel = path
            .strip_prefix(root)?
            .to_str()
            .with_context(|| format!("{} is not UTF-8", path.display()))?
            .to_string();
        f(&rel, &meta)?;
        if meta.is_dir() {
            walk(root, &path, f)?;
        }
    }
    Ok(())
}

/// `dir` written into `repo`'s object database as a tree: regular files as
/// blobs (executable or not), symbolic links as links; empty directories,
/// like git, vanish.
fn tree_of_dir(repo: &git2::Repository, dir: &Path) -> Result<git2::Oid> {
    use std::os::unix::fs::PermissionsExt;
    let mut builder = repo.treebuilder(None)?;
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let name = e.file_name();
        if name == ".git" {
            continue;
        }
        let path = e.path();
        let meta = std::fs::symlink_metadata(&path)?;
        let (oid, mode) = if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path)?;
            (
                repo.blob(target.as_os_str().as_encoded_bytes())?,
                git2::FileMode::Link,
            )
        } else if meta.is_dir() {
            let t = tree_of_dir(repo, &path)?;
            if repo.find_tree(t)?.is_empty() {
                continue;
            }
            (t, git2::FileMode::Tree)
        } else if meta.is_file() {
            let exec = meta.permissions().mode() & 0o111 != 0;
            (
                repo.blob_path(&path)?,
                if exec {
                    git2::FileMode::BlobExecutable
                } else {
                    git2::FileMode::Blob
                },
            )
        } else {
            continue;
        };
        builder.insert(&name, oid, mode.into())?;
    }
    Ok(builder.write()?)
}

/// A diff as a unified patch, the form the journal records and
/// [`crate::record::lineage::apply`] reads back.
pub fn patch_text(diff: &git2::Diff) -> Result<String> {
    let mut out = String::new();
    diff.print(git2::DiffFormat::Patch, |_, _, line| {
        if matches!(line.origin(), '+' | '-' | ' ') {
            out.push(line.origin());
        }
        out.push_str(&String::from_utf8_lossy(line.content()));
        true
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    /// An attempt: the champion's file with `line` replaced, committed off
    /// the branch as the loop does.
    fn attempt(run: &RunRepo, champion: git2::Oid, from: &str, to: &str) -> git2::Oid {
        run.reset_hard(champion).unwrap();
        let f = run.path.join("a.c");
        let text = std::fs::read_to_string(&f).unwrap().replace(from, to);
        std::fs::write(&f, text).unwrap();
        let oid = run.commit_worktree("attempt", false).unwrap();
        run.reset_hard(champion).unwrap();
        oid
    }

    #[test]
    fn a_stack_merges_its_parts_and_a_conflicting_part_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("a.c"), "one\ntwo\nthree\nfour\nfive\nsix\n").unwrap();
        git(&root, &["init", "-q", "-b", "main"]);
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-qm", "base"]);
        let run = RunRepo::create(&root, "r", &dir.path().join("wt")).unwrap();
        let champion = run.head().unwrap();
        let a = attempt(&run, champion, "two\n", "TWO\n");
        let b = attempt(&run, champion, "two\n", "deux\n");
        let c = attempt(&run, champion, "six\n", "SIX\n");
        run.merge_into_worktree(champion, &[(1, a), (3, c)])
            .unwrap()
            .unwrap();
        let merged = std::fs::read_to_string(run.path.join("a.c")).unwrap();
        assert_eq!(merged, "one\nTWO\nthree\nfour\nfive\nSIX\n");
        assert_eq!(run.head().unwrap(), champion, "HEAD stays at the champion");
        run.reset_hard(champion).unwrap();
        let why = run
            .merge_into_worktree(champion, &[(1, a), (2, b)])
            .unwrap()
            .unwrap_err();
        assert!(why.contains("#2") && why.contains("a.c"), "{why}");
        let left = std::fs::read_to_string(run.path.join("a.c")).unwrap();
        assert!(
            left.starts_with("one\ntwo\n"),
            "the worktree is untouched: {left}"
        );
    }
}
