//! Arms: what `ratchet compare` can measure, and how each becomes a runnable
//! server command.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::bench::build;
use crate::config::Config;
use crate::record::gitops;
use crate::bench::launch::ServerCommand;
use crate::record::lineage::{self, RecordedRun};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArmSpec {
    /// The frozen Go server in `control/`.
    Control,
    /// The treatment in the working tree.
    Treatment,
    /// `treatment/` at a git revision.
    Rev(String),
    /// Any prebuilt server, run through `sh -c`; ratchet appends `--port N`.
    Cmd(String),
    /// The final champion of a recorded run, from git or rebuilt from its journal.
    Champion(String),
}

impl ArmSpec {
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "control" => ArmSpec::Control,
            "treatment" => ArmSpec::Treatment,
            _ if s.starts_with("rev:") && s.len() > 4 => ArmSpec::Rev(s[4..].to_string()),
            _ if s.starts_with("cmd:") && !s[4..].trim().is_empty() => ArmSpec::Cmd(s[4..].to_string()),
            _ if s.starts_with("champion:") && s.len() > 9 => ArmSpec::Champion(s[9..].to_string()),
            _ => bail!(
                "unknown arm {s:?}: expected control, treatment, rev:<git-rev>, champion:<run-id> or cmd:<command line>"
            ),
        })
    }
}

/// A prepared arm: its label as given and the command that starts it.
#[derive(Clone, Debug)]
pub struct Arm {
    pub label: String,
    pub command: ServerCommand,
    pub source_hash: Option<String>,
    pub binary_hash: Option<String>,
}

/// An arm that runs a built binary as it is.
pub fn built_arm(label: &str, b: build::Built) -> Arm {
    Arm {
        label: label.to_string(),
        command: ServerCommand {
            program: b.binary.clone(),
            args: vec![],
            env: vec![],
        },
        source_hash: Some(b.source_hash),
        binary_hash: Some(b.binary_hash),
    }
}

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

    pub fn build_cache(&self) -> PathBuf {
        self.root.join(".ratchet").join("builds")
    }

    fn build_timeout(&self) -> Duration {
        Duration::from_secs(self.config.build.timeout_s)
    }

    pub fn build_treatment_at(&self, src: &Path) -> Result<build::Built> {
        build::build_treatment(src, &self.build_cache(), self.build_timeout())
    }

    /// The control built from `src` (a run builds it from its base commit,
    /// so no later edit of the working tree can move it).
    pub fn control_at(&self, src: &Path) -> Result<Arm> {
        let b = build::build_control(src, &self.build_cache(), self.build_timeout())?;
        Ok(Arm {
            label: "control".into(),
            command: ServerCommand {
                program: b.binary,
                args: vec![],
                env: vec![("GOMAXPROCS".into(), "1".into())],
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
        gitops::export_tree_subdir(repo, tree, &self.config.paths.treatment, tmp.path())?;
        Ok(built_arm(label, self.build_treatment_at(tmp.path())?))
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
        gitops::export_subtree(&self.root, rev, &self.config.paths.control, dest)?;
        self.control_at(dest)
    }

    pub fn prepare(&self, label: &str) -> Result<Arm> {
        let built = |b: build::Built| built_arm(label, b);
        Ok(match ArmSpec::parse(label)? {
            ArmSpec::Control => self.control_at(&self.control_dir())?,
            ArmSpec::Treatment => built(self.build_treatment_at(&self.treatment_dir())?),
            ArmSpec::Rev(rev) => {
                let tmp = tempfile::tempdir()?;
                gitops::export_subtree(&self.root, &rev, &self.config.paths.treatment, tmp.path())?;
                built(self.build_treatment_at(tmp.path())?)
            }
            ArmSpec::Champion(run_id) => {
                let repo = git2::Repository::open(&self.root)?;
                let results = self.root.join(&self.config.paths.results);
                let run = RecordedRun::open(&results, Some(&run_id))?;
                let (_, trees) = lineage::with_trees(&repo, &run)?;
                let tree = *trees.last().expect("a lineage has its base");
                self.prepare_tree(&repo, tree, label)?
            }
            ArmSpec::Cmd(line) => Arm {
                label: label.to_string(),
                command: ServerCommand {
                    program: "/bin/sh".into(),
                    args: vec!["-c".into(), format!("exec {line} \"$@\""), "sh".into()],
                    env: vec![],
                },
                source_hash: None,
                binary_hash: None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_arm_kind() {
        assert_eq!(ArmSpec::parse("control").unwrap(), ArmSpec::Control);
        assert_eq!(ArmSpec::parse("treatment").unwrap(), ArmSpec::Treatment);
        assert_eq!(
            ArmSpec::parse("rev:HEAD~2").unwrap(),
            ArmSpec::Rev("HEAD~2".into())
        );
        assert_eq!(
            ArmSpec::parse("cmd:./srv --fast").unwrap(),
            ArmSpec::Cmd("./srv --fast".into())
        );
        assert_eq!(
            ArmSpec::parse("champion:20261202-145836").unwrap(),
            ArmSpec::Champion("20261202-145836".into())
        );
    }

    #[test]
    fn rejects_unknown_and_empty_arms() {
        for bad in ["", "rev:", "cmd:  ", "champion:", "treatmnet"] {
            let err = ArmSpec::parse(bad).unwrap_err().to_string();
            assert!(err.contains("expected control"), "{bad}: {err}");
        }
    }
}
