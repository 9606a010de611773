//! Arms on the command line, for the commands that measure them (compare,
//! check, sweep): every spec checked before any is built, each built, and
//! the environment fingerprint that names their sources.

use anyhow::Result;

use crate::bench::environment;
use crate::bench::servers::arm::{Arm, ArmSpec};
use crate::record::{lineage, recorded};
use crate::session::Session;

/// Checks every arm spec, so a typo in the last is named before the first
/// is built.
pub fn check(specs: &[String]) -> Result<()> {
    for a in specs {
        ArmSpec::parse(a)?;
    }
    Ok(())
}

/// Builds every arm; a `champion:<run>` arm is the final tree of that
/// recorded run's lineage, from git or rebuilt from its journal.
pub fn prepare(session: &Session, specs: &[String]) -> Result<Vec<Arm>> {
    let workspace = &session.workspace;
    specs
        .iter()
        .map(|label| match ArmSpec::parse(label)? {
            ArmSpec::Champion(id) => {
                let repo = git2::Repository::open(&workspace.root)?;
                let results = workspace.root.join(&workspace.config.paths.results);
                let run = recorded::RecordedRun::open(&results, Some(&id))?;
                let (_, trees) = lineage::with_trees(&repo, &run)?;
                let tree = *trees.last().expect("a lineage has its base");
                workspace.prepare_tree(&repo, tree, label)
            }
            _ => workspace.prepare(label),
        })
        .collect()
}

/// The environment fingerprint, with the sources of the control and the
/// treatment when they are among `arms`.
pub fn fingerprint(session: &Session, arms: &[Arm]) -> environment::Fingerprint {
    let hash_of = |label: &str| {
        arms.iter()
            .find(|a| a.label == label)
            .and_then(|a| a.source_hash.clone())
    };
    environment::fingerprint(&session.plan, hash_of("control"), hash_of("treatment"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn every_arm_kind_passes_the_check() {
        let all = [
            "control",
            "treatment",
            "rev:HEAD~1",
            "champion:r1",
            "cmd:./srv",
        ];
        check(&specs(&all)).unwrap();
    }

    #[test]
    fn a_typo_in_the_last_arm_is_named() {
        let err = check(&specs(&["control", "treatment", "treatmnet"])).unwrap_err();
        assert!(err.to_string().contains("\"treatmnet\""), "{err}");
    }
}
