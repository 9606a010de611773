//! Arms: what `ratchet compare` can measure, and how each becomes a runnable
//! server command.

use anyhow::{bail, Result};

use crate::bench::servers::build;
use crate::bench::servers::launch::ServerCommand;
use crate::bench::servers::target::TargetConfig;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArmSpec {
    /// The frozen Go server in `control/`.
    Control,
    /// The treatment in the working tree.
    Treatment,
    /// `treatment/` at a git revision.
    Rev(String),
    /// Any prebuilt server, run through `sh -c`; ratchet appends the
    /// target's port arguments.
    Cmd(String),
    /// The treatment in the working tree with these playbook entries
    /// applied in order (`playbook:a+b`): a known combination measured with
    /// the loop's own edit application and build.
    Playbook(Vec<String>),
    /// The final champion of a recorded run, from git or rebuilt from its
    /// journal: resolved by the caller from the record, then built with
    /// [`crate::session::workspace::Workspace::prepare_tree`].
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
            _ if s.starts_with("playbook:") && s[9..].split('+').all(|id| !id.is_empty()) => {
                ArmSpec::Playbook(s[9..].split('+').map(str::to_string).collect())
            }
            _ => bail!(
                "unknown arm {s:?}: expected control, treatment, rev:<git-rev>, champion:<run-id>, playbook:<id>[+<id>...] or cmd:<command line>"
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

/// `arms` with the control, if there is one, last: where every
/// measurement of a run puts it.
pub fn with_control(arms: impl IntoIterator<Item = Arm>, control: Option<&Arm>) -> Vec<Arm> {
    arms.into_iter().chain(control.cloned()).collect()
}

/// An arm that runs a built binary of `target` as it is.
pub fn built_arm(label: &str, b: build::Built, target: &TargetConfig) -> Arm {
    Arm {
        label: label.to_string(),
        command: ServerCommand::new(b.binary.clone(), vec![], target),
        source_hash: Some(b.source_hash),
        binary_hash: Some(b.binary_hash),
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
        assert_eq!(
            ArmSpec::parse("playbook:send-msg-more+multishot-accept").unwrap(),
            ArmSpec::Playbook(vec!["send-msg-more".into(), "multishot-accept".into()])
        );
    }

    #[test]
    fn rejects_unknown_and_empty_arms() {
        for bad in [
            "",
            "rev:",
            "cmd:  ",
            "champion:",
            "treatmnet",
            "playbook:",
            "playbook:a++b",
        ] {
            let err = ArmSpec::parse(bad).unwrap_err().to_string();
            assert!(err.contains("expected control"), "{bad}: {err}");
        }
    }
}
