//! Crash recovery: a resumed run first puts its git state back in line with
//! its journal.

use anyhow::Result;

use crate::record::gitops::{short, RunRepo};
use crate::record::journal::{AttemptRecord, ChampionRecord, Journal};

/// Puts the run's git state back to its champion after a crash: the branch is
/// rewound past any commit the journal does not know, and the worktree reset.
pub fn reconcile(
    git: &RunRepo,
    journal: &Journal,
    attempts: &[AttemptRecord],
    champion: &mut ChampionRecord,
) -> Result<()> {
    let head = git.head()?.to_string();
    if head != champion.commit {
        if let Some(a) = attempts
            .iter()
            .find(|a| a.commit.as_deref() == Some(head.as_str()))
        {
            // Crashed after journaling a keep but before champion.json: finish it.
            let parts: Vec<&AttemptRecord> = attempts
                .iter()
                .filter(|p| a.stack_of.contains(&p.number))
                .collect();
            *champion = champion.succeeded_by(a, &parts, head, None);
            journal.write_champion(champion)?;
        } else {
            tracing::warn!(
                "branch head {} is not in the journal: rewinding to the champion",
                short(&head)
            );
        }
    }
    git.reset_hard(git2::Oid::from_str(&champion.commit)?)
}
