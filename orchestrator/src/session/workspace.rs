//! The workspace: where a repository's servers live, and how each kind of
//! arm becomes a built, runnable server.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::agent::{edit, playbook};
use crate::bench::servers::arm::{built_arm, Arm, ArmSpec};
use crate::bench::servers::build;
use crate::bench::servers::launch::ServerCommand;
use crate::bench::servers::source;
use crate::config::Config;

/// Where a repository's servers live and how to build them.
pub struct Workspace {
    pub root: PathBuf,
    pub config: Config,
}

impl Workspace {
    pub fn new(root: PathBuf, config: Config) -> Self {
        Self { root, config }
    }

    pub fn treatment_dir(&self) -> PathBuf {
        self.root.join(&self.config.paths.treatment)
    }

    pub fn control_dir(&self) -> PathBuf {
        self.root.join(&self.config.paths.control)
    }

    fn build_timeout(&self) -> Duration {
        Duration::from_secs(self.config.build.timeout_s)
    }

    pub fn build_treatment_at(&self, src: &Path) -> Result<build::Built> {
        build::build_target(
            src,
            &self.config.target,
            &build::cache_dir()?,
            self.build_timeout(),
        )
    }

    /// A built treatment as an arm, told its port as the target says.
    pub fn treatment_arm(&self, label: &str, b: build::Built) -> Arm {
        built_arm(label, b, &self.config.target)
    }

    /// The control built from `src` (a run builds it from its base commit,
    /// so no later edit of the working tree can move it).
    pub fn control_at(&self, src: &Path) -> Result<Arm> {
        let b = build::build_control(src, &build::cache_dir()?, self.build_timeout())?;
        Ok(Arm {
            label: "control".into(),
            command: ServerCommand {
                env: vec![("GOMAXPROCS".into(), "1".into())],
                ..ServerCommand::new(b.binary, vec![], &Default::default())
            },
            source_hash: Some(b.source_hash),
            binary_hash: Some(b.binary_hash),
        })
    }

    /// The treatment of a git tree (a commit's, or one rebuilt from a
    /// journal), exported to a temporary directory and built.
    pub fn prepare_tree(
        &self,
        repo: &git2::Repository,
        tree: git2::Oid,
        label: &str,
    ) -> Result<Arm> {
        let tmp = tempfile::tempdir()?;
        source::export_tree_subdir(repo, tree, &self.config.paths.treatment, tmp.path())?;
        Ok(self.treatment_arm(label, self.build_treatment_at(tmp.path())?))
    }

    /// The control as it was at `rev` (a run's base commit), exported into
    /// `dest` (emptied first) and built: a run and its replays measure
    /// against the control the run had, not today's.
    pub fn control_at_rev(&self, rev: &str, dest: &Path) -> Result<Arm> {
        if dest.exists() {
            std::fs::remove_dir_all(dest)
                .with_context(|| format!("clearing {}", dest.display()))?;
        }
        std::fs::create_dir_all(dest).with_context(|| format!("creating {}", dest.display()))?;
        source::export_subtree(&self.root, rev, &self.config.paths.control, dest)?;
        self.control_at(dest)
    }

    /// The control a run measures beside every attempt, as `run.control`
    /// says: the Go control as it was at `base` (exported into `dest`), a
    /// fixed arm, or none.
    pub fn run_control(&self, base: &str, dest: &Path) -> Result<Option<Arm>> {
        if !self.config.run.has_control() {
            return Ok(None);
        }
        let spec = self.config.run.control.as_str();
        let arm = match ArmSpec::parse(spec)? {
            ArmSpec::Control => self.control_at_rev(base, dest)?,
            _ => self.prepare(spec)?,
        };
        Ok(Some(Arm {
            label: "control".into(),
            ..arm
        }))
    }

    /// The working tree's treatment with playbook entries applied in the
    /// order given, built from a temporary copy: how benchmarks make a known
    /// combination, with the loop's own edit application and build instead
    /// of a second implementation.
    fn build_with_playbook(&self, ids: &[String]) -> Result<build::Built> {
        let arm = format!("arm playbook:{}", ids.join("+"));
        let dir = self
            .root
            .join(&self.config.paths.knowledge_base)
            .join("playbook");
        let entries = playbook::load(&dir)?;
        let prefix = format!("{}/", self.config.paths.treatment.display());
        let treatment = self.treatment_dir();
        let mut files = BTreeMap::new();
        for rel in build::source_files(&treatment, &self.config.target.globs())? {
            if let Ok(text) = std::fs::read_to_string(treatment.join(&rel)) {
                files.insert(format!("{prefix}{rel}"), text);
            }
        }
        for id in ids {
            let entry = entries
                .iter()
                .find(|e| e.id == *id)
                .with_context(|| format!("{arm}: no entry {id:?} in {}", dir.display()))?;
            if entry.param.is_some() {
                bail!("{arm}: {id} is a parameter, explored by the playbook agent, not an edit");
            }
            files = edit::apply_all(&files, &entry.edits)
                .with_context(|| format!("{arm}: {id} does not apply"))?;
        }
        let mut relative = BTreeMap::new();
        for (path, text) in files {
            let rel = path
                .strip_prefix(&prefix)
                .with_context(|| format!("{arm}: an edit of {path}, outside {prefix}"))?;
            relative.insert(rel.to_string(), text);
        }
        build::build_overlaid(
            &treatment,
            &relative,
            &self.config.target,
            &build::cache_dir()?,
            self.build_timeout(),
        )
    }

    pub fn prepare(&self, label: &str) -> Result<Arm> {
        let built = |b: build::Built| self.treatment_arm(label, b);
        Ok(match ArmSpec::parse(label)? {
            ArmSpec::Control => self.control_at(&self.control_dir())?,
            ArmSpec::Treatment => built(self.build_treatment_at(&self.treatment_dir())?),
            ArmSpec::Rev(rev) => {
                let tmp = tempfile::tempdir()?;
                source::export_subtree(&self.root, &rev, &self.config.paths.treatment, tmp.path())?;
                built(self.build_treatment_at(tmp.path())?)
            }
            ArmSpec::Champion(run) => {
                bail!("arm champion:{run} is a recorded run's: resolve it from results/ first")
            }
            ArmSpec::Playbook(ids) => built(self.build_with_playbook(&ids)?),
            ArmSpec::Cmd(line) => Arm {
                label: label.to_string(),
                command: ServerCommand::new(
                    "/bin/sh".into(),
                    vec!["-c".into(), format!("exec {line} \"$@\""), "sh".into()],
                    &self.config.target,
                ),
                source_hash: None,
                binary_hash: None,
            },
        })
    }
}
