//! A recorded run read back for review: its journal, and its champions'
//! lineage from git (the run branch and the evidence in its commit trailers).
//!
//! A run's branch and attempt refs live in the repository of the machine that
//! ran it; a clone elsewhere has only `results/`. The journal holds the base
//! commit and every attempt's diff, so each tree of the lineage can be rebuilt
//! from it; a rebuilt file is checked against the blob id in the diff's
//! `index` line, so a journal that does not match its history is caught
//! rather than measured.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

use crate::record::journal::AttemptRecord;
use crate::record::recorded::RecordedRun;
use crate::record::trailers;

/// Where the lineage was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The run branch and its commit trailers.
    Git,
    /// The journal: the branch is not in this repository.
    Journal,
}

/// One champion of the lineage; step 0 is the run's starting point.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Step {
    pub attempt: usize,
    pub hypothesis: String,
    /// The commit that made it champion, when this repository has it.
    pub commit: Option<String>,
    /// The commit recorded for it (absent from this repository when `commit` is None).
    pub recorded_commit: String,
    pub playbook_id: Option<String>,
    /// Cost ratio to the previous champion, and its 95% interval.
    pub ratio: Option<f64>,
    #[serde(alias = "ci95")]
    pub interval: Option<[f64; 2]>,
    /// Product of the ratios so far: cost relative to the run's start.
    pub cumulative: f64,
    /// Cost ratio to the control measured in the keeping attempt.
    pub vs_control: Option<f64>,
    pub cost_per_connection: Option<f64>,
}

pub struct Lineage {
    pub source: Source,
    pub steps: Vec<Step>,
    /// Disagreements between the branch and the journal.
    pub warnings: Vec<String>,
}

/// A step from a kept commit's message: the subject is the hypothesis, the
/// trailers the evidence.
pub fn step_from_commit(oid: &str, message: &str) -> Result<Step> {
    let e = trailers::Evidence::parse(oid, message)?;
    Ok(Step {
        attempt: e.attempt,
        hypothesis: message.lines().next().unwrap_or("").to_string(),
        commit: Some(oid.to_string()),
        recorded_commit: oid.to_string(),
        playbook_id: None,
        ratio: e.ratio,
        interval: e.interval,
        cumulative: 1.0,
        vs_control: e.vs_control,
        cost_per_connection: e.cost_per_connection,
    })
}

fn base_step(run: &RecordedRun, in_repo: bool) -> Step {
    Step {
        attempt: 0,
        hypothesis: "the run's starting point".into(),
        commit: in_repo.then(|| run.run.base_commit.clone()),
        recorded_commit: run.run.base_commit.clone(),
        playbook_id: None,
        ratio: None,
        interval: None,
        cumulative: 1.0,
        vs_control: run
            .attempts
            .first()
            .and_then(|a| a.champion_vs_control.as_ref())
            .and_then(|c| c.ratio_median),
        cost_per_connection: run.run.baseline_cost,
    }
}

/// The tree of commit `oid`, when this repository has the commit.
fn commit_tree(repo: &git2::Repository, oid: &str) -> Option<git2::Oid> {
    let oid = git2::Oid::from_str(oid).ok()?;
    repo.find_commit(oid).ok()?.tree().ok().map(|t| t.id())
}

fn has_commit(repo: &git2::Repository, oid: &str) -> bool {
    commit_tree(repo, oid).is_some()
}

fn steps_from_journal(run: &RecordedRun, repo: &git2::Repository) -> Vec<Step> {
    run.attempts
        .iter()
        .filter(|a| a.verdict.is_keep())
        .map(|a| {
            let recorded = a.commit.clone().unwrap_or_default();
            Step {
                attempt: a.number,
                hypothesis: a.hypothesis.clone(),
                commit: has_commit(repo, &recorded).then(|| recorded.clone()),
                recorded_commit: recorded,
                playbook_id: a.playbook_id.clone(),
                ratio: a.vs_champion.as_ref().and_then(|c| c.ratio_median),
                interval: a.vs_champion.as_ref().and_then(|c| c.ratio_interval),
                cumulative: 1.0,
                vs_control: a.vs_control.as_ref().and_then(|c| c.ratio_median),
                cost_per_connection: a.samples.as_ref().and_then(|s| {
                    let c = s.arm_summary(1, "candidate").cost_per_connection.median;
                    (c > 0.0).then_some(c)
                }),
            }
        })
        .collect()
}

/// The kept commits of the run branch, oldest first, back to the base.
fn steps_from_branch(repo: &git2::Repository, run: &RecordedRun) -> Result<Option<Vec<Step>>> {
    let Ok(branch) = repo.find_branch(&run.run.branch, git2::BranchType::Local) else {
        return Ok(None);
    };
    let base = git2::Oid::from_str(&run.run.base_commit)?;
    let mut commit = branch.get().peel_to_commit()?;
    let mut steps = Vec::new();
    while commit.id() != base {
        steps.push(step_from_commit(
            &commit.id().to_string(),
            commit.message().unwrap_or(""),
        )?);
        commit = commit.parent(0).with_context(|| {
            format!(
                "branch {} does not descend from the run's base commit {}",
                run.run.branch, run.run.base_commit
            )
        })?;
    }
    steps.reverse();
    Ok(Some(steps))
}

impl Lineage {
    pub fn read(repo: &git2::Repository, run: &RecordedRun) -> Result<Self> {
        let journal = steps_from_journal(run, repo);
        let mut warnings = Vec::new();
        let base_in_repo = has_commit(repo, &run.run.base_commit);
        if !base_in_repo {
            warnings.push(format!(
                "the base commit {} is not in this repository: nothing of this run can be rebuilt",
                run.run.base_commit
            ));
        }
        let (source, mut steps) = match steps_from_branch(repo, run)? {
            Some(mut git) => {
                for s in &mut git {
                    match run.attempt(s.attempt) {
                        Some(a) if a.verdict.is_keep() => s.playbook_id = a.playbook_id.clone(),
                        Some(a) => warnings.push(format!(
                            "commit {} says attempt {} was kept; the journal says {}",
                            s.recorded_commit, s.attempt, a.verdict
                        )),
                        None => warnings.push(format!(
                            "commit {} names attempt {}, which the journal does not have",
                            s.recorded_commit, s.attempt
                        )),
                    }
                }
                let g: Vec<usize> = git.iter().map(|s| s.attempt).collect();
                let j: Vec<usize> = journal.iter().map(|s| s.attempt).collect();
                if g != j {
                    warnings.push(format!(
                        "the branch keeps attempts {g:?}, the journal {j:?}"
                    ));
                }
                (Source::Git, git)
            }
            None => (Source::Journal, journal),
        };
        let mut cumulative = 1.0;
        for s in &mut steps {
            cumulative *= s.ratio.unwrap_or(1.0);
            s.cumulative = cumulative;
        }
        steps.insert(0, base_step(run, base_in_repo));
        Ok(Self {
            source,
            steps,
            warnings,
        })
    }
}

/// The lineage and the tree of each of its steps, oldest first: what every
/// command that rebuilds a run's champions starts from.
pub fn with_trees(repo: &git2::Repository, run: &RecordedRun) -> Result<(Lineage, Vec<git2::Oid>)> {
    let lineage = Lineage::read(repo, run)?;
    let trees = Trees::new(repo).of_lineage(run, &lineage)?;
    Ok((lineage, trees))
}

/// The treatment trees of a run's history, each from git when this
/// repository has the commit, else rebuilt from the journal's diffs.
pub struct Trees<'r> {
    pub repo: &'r git2::Repository,
}

/// Applies a unified diff (as the journal records it) to `tree`.
pub fn apply(repo: &git2::Repository, tree: git2::Oid, diff: &str) -> Result<git2::Oid> {
    let patch = git2::Diff::from_buffer(diff.as_bytes()).context("the diff does not parse")?;
    let tree = repo.find_tree(tree)?;
    let mut index = repo
        .apply_to_tree(&tree, &patch, None)
        .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    Ok(index.write_tree_to(repo)?)
}

/// The post-image blob id of every file a diff changes, from its `index
/// <old>..<new>` and `+++ b/<path>` lines.
fn post_images(diff: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut id = None;
    for line in diff.lines() {
        if line.starts_with("diff --git ") {
            id = None;
        } else if let Some(ids) = line.strip_prefix("index ") {
            id = ids
                .split_whitespace()
                .next()
                .and_then(|r| r.split_once(".."))
                .map(|(_, new)| new.to_string());
        } else if let Some(path) = line.strip_prefix("+++ b/") {
            if let Some(new) = id.take() {
                out.push((path.to_string(), new));
            }
        }
    }
    out
}

/// Checks the files a rebuilt tree holds against the blob ids the diff
/// recorded: the rebuilt sources are byte for byte the measured ones.
fn verify_post_image(repo: &git2::Repository, tree: git2::Oid, diff: &str) -> Result<()> {
    let tree = repo.find_tree(tree)?;
    for (path, expected) in post_images(diff) {
        let actual = tree
            .get_path(Path::new(&path))
            .map(|e| e.id().to_string())
            .unwrap_or_default();
        if !actual.starts_with(&expected) {
            bail!("{path} rebuilt as blob {actual}, the journal recorded {expected}");
        }
    }
    Ok(())
}

impl<'r> Trees<'r> {
    pub fn new(repo: &'r git2::Repository) -> Self {
        Self { repo }
    }

    /// The tree each step of the lineage stands for, oldest first.
    pub fn of_lineage(&self, run: &RecordedRun, lineage: &Lineage) -> Result<Vec<git2::Oid>> {
        let base = commit_tree(self.repo, &run.run.base_commit).with_context(|| {
            format!(
                "the run's base commit {} is not in this repository",
                run.run.base_commit
            )
        })?;
        let mut trees = vec![base];
        for step in &lineage.steps[1..] {
            let previous = *trees.last().expect("base first");
            let tree = match step
                .commit
                .as_deref()
                .and_then(|c| commit_tree(self.repo, c))
            {
                Some(t) => t,
                None => {
                    let attempt = run.attempt(step.attempt).with_context(|| {
                        format!("attempt {} is not in the journal", step.attempt)
                    })?;
                    self.rebuild(previous, attempt)?
                }
            };
            trees.push(tree);
        }
        Ok(trees)
    }

    /// An attempt's tree: its ref when this repository has it, else its diff
    /// applied to `champion` (the tree of the champion it was made against).
    pub fn of_attempt(
        &self,
        run: &RecordedRun,
        attempt: &AttemptRecord,
        champion: git2::Oid,
    ) -> Result<git2::Oid> {
        let from_ref = attempt
            .attempt_ref
            .as_deref()
            .and_then(|r| self.repo.refname_to_id(r).ok())
            .and_then(|o| commit_tree(self.repo, &o.to_string()));
        match from_ref {
            Some(t) => Ok(t),
            None => self.rebuild(champion, attempt).with_context(|| {
                format!(
                    "rebuilding attempt {} of run {} from its diff",
                    attempt.number, run.run.run_id
                )
            }),
        }
    }

    fn rebuild(&self, champion: git2::Oid, attempt: &AttemptRecord) -> Result<git2::Oid> {
        if attempt.diff.trim().is_empty() {
            bail!("attempt {} recorded no diff", attempt.number);
        }
        let tree = apply(self.repo, champion, &attempt.diff)
            .with_context(|| format!("applying the diff of attempt {}", attempt.number))?;
        verify_post_image(self.repo, tree, &attempt.diff)
            .with_context(|| format!("attempt {} does not rebuild as recorded", attempt.number))?;
        Ok(tree)
    }
}

/// Carries the change from `base` to `theirs` over to `ours` with a
/// three-way merge (as `git revert` and `git cherry-pick` do), so nearby
/// edits of other changes do not stop it. Conflicting edits are an error
/// naming the files.
pub fn carry_over(
    repo: &git2::Repository,
    base: git2::Oid,
    ours: git2::Oid,
    theirs: git2::Oid,
) -> Result<git2::Oid> {
    let (b, o, t) = (
        repo.find_tree(base)?,
        repo.find_tree(ours)?,
        repo.find_tree(theirs)?,
    );
    let mut index = repo.merge_trees(&b, &o, &t, None)?;
    if index.has_conflicts() {
        let files: Vec<String> = index
            .conflicts()?
            .flatten()
            .filter_map(|c| c.our.or(c.their).or(c.ancestor))
            .map(|e| String::from_utf8_lossy(&e.path).to_string())
            .collect();
        bail!("conflicting edits in {}", files.join(", "));
    }
    Ok(index.write_tree_to(repo)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailers_become_a_step() {
        let msg = "Use multishot accept\n\nAgent: playbook\n\nRatchet-Run: r1\nRatchet-Attempt: 6\n\
                   Ratchet-Meter: task-clock (ns)\nRatchet-Cost-Per-Connection: 12916.7 ns\n\
                   Ratchet-Ratio: 0.8780\nRatchet-CI95: 0.8570 0.9780\nRatchet-Vs-Control: 0.4771\n";
        let s = step_from_commit("abc", msg).unwrap();
        assert_eq!(s.attempt, 6);
        assert_eq!(s.hypothesis, "Use multishot accept");
        assert_eq!(s.ratio, Some(0.878));
        assert_eq!(s.interval, Some([0.857, 0.978]));
        assert_eq!(s.vs_control, Some(0.4771));
        assert_eq!(s.cost_per_connection, Some(12916.7));
    }

    #[test]
    fn a_commit_without_trailers_is_an_error_naming_it() {
        let e = step_from_commit("abc123", "hand-made commit\n").unwrap_err();
        assert!(e.to_string().contains("abc123"), "{e}");
    }

    #[test]
    fn post_images_name_each_file_with_its_new_blob() {
        let d = "diff --git a/t/s.c b/t/s.c\nindex 1913980..85ab89e 100644\n--- a/t/s.c\n+++ b/t/s.c\n@@ -1 +1 @@\n-a\n+b\n\
                 diff --git a/t/n.h b/t/n.h\nnew file mode 100644\nindex 0000000..e69de29\n--- /dev/null\n+++ b/t/n.h\n";
        assert_eq!(
            post_images(d),
            [
                ("t/s.c".to_string(), "85ab89e".to_string()),
                ("t/n.h".to_string(), "e69de29".to_string())
            ]
        );
    }

    /// A repository with one commit of `t/s.c`, and a way to make trees.
    fn repo_with(text: &str) -> (tempfile::TempDir, git2::Repository, git2::Oid) {
        let d = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(d.path()).unwrap();
        let tree = tree_of(&repo, text);
        let sig = git2::Signature::now("t", "t@t").unwrap();
        let t = repo.find_tree(tree).unwrap();
        repo.commit(Some("HEAD"), &sig, &sig, "base", &t, &[])
            .unwrap();
        drop(t);
        (d, repo, tree)
    }

    fn tree_of(repo: &git2::Repository, text: &str) -> git2::Oid {
        let blob = repo.blob(text.as_bytes()).unwrap();
        let mut inner = repo.treebuilder(None).unwrap();
        inner.insert("s.c", blob, 0o100644).unwrap();
        let inner = inner.write().unwrap();
        let mut outer = repo.treebuilder(None).unwrap();
        outer.insert("t", inner, 0o040000).unwrap();
        outer.write().unwrap()
    }

    fn diff(repo: &git2::Repository, a: git2::Oid, b: git2::Oid) -> String {
        let (a, b) = (repo.find_tree(a).unwrap(), repo.find_tree(b).unwrap());
        let d = repo.diff_tree_to_tree(Some(&a), Some(&b), None).unwrap();
        crate::record::gitops::patch_text(&d).unwrap()
    }

    fn text_at(repo: &git2::Repository, tree: git2::Oid) -> String {
        let t = repo.find_tree(tree).unwrap();
        let e = t.get_path(Path::new("t/s.c")).unwrap();
        String::from_utf8(repo.find_blob(e.id()).unwrap().content().to_vec()).unwrap()
    }

    const LINES: &str = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";

    #[test]
    fn a_recorded_diff_rebuilds_the_same_tree_and_is_verified() {
        let (_d, repo, base) = repo_with(LINES);
        let changed = tree_of(&repo, &LINES.replace("c\n", "C\n"));
        let patch = diff(&repo, base, changed);
        let rebuilt = apply(&repo, base, &patch).unwrap();
        assert_eq!(rebuilt, changed);
        verify_post_image(&repo, rebuilt, &patch).unwrap();
        // A diff whose recorded blob id does not match what it builds is caught.
        let forged = patch.replace("C\n", "X\n");
        let other = apply(&repo, base, &forged).unwrap();
        let e = verify_post_image(&repo, other, &forged).unwrap_err();
        assert!(e.to_string().contains("t/s.c"), "{e}");
    }

    #[test]
    fn a_diff_that_does_not_fit_is_an_error() {
        let (_d, repo, base) = repo_with(LINES);
        let changed = tree_of(&repo, &LINES.replace("c\n", "C\n"));
        let patch = diff(&repo, base, changed);
        let elsewhere = tree_of(&repo, "something else entirely\n");
        assert!(apply(&repo, elsewhere, &patch).is_err());
    }

    #[test]
    fn carry_over_reverts_a_change_next_to_a_later_one_and_names_conflicts() {
        let (_d, repo, base) = repo_with(LINES);
        let first = tree_of(&repo, &LINES.replace("b\n", "B\n"));
        let second = tree_of(&repo, &LINES.replace("b\n", "B\n").replace("e\n", "E\n"));
        // Revert the first change from the second: base = first, theirs = before it.
        let reverted = carry_over(&repo, first, second, base).unwrap();
        assert_eq!(text_at(&repo, reverted), LINES.replace("e\n", "E\n"));
        // A later change to the same line conflicts, and the file is named.
        let rewritten = tree_of(&repo, &LINES.replace("b\n", "BB\n"));
        let e = carry_over(&repo, first, rewritten, base).unwrap_err();
        assert!(e.to_string().contains("t/s.c"), "{e}");
    }

    #[test]
    fn missing_vs_control_is_none() {
        let s = step_from_commit("a", "x\n\nRatchet-Attempt: 1\nRatchet-Vs-Control: -\n").unwrap();
        assert_eq!(s.vs_control, None);
    }
}
