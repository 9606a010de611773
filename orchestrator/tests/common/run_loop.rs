//! What the run_loop_* test files share: the planted playbook, which gives
//! one attempt of every verdict in a known order (the decision tests check
//! the verdicts, the fault tests that none is lost or repeated), and the
//! check that a run left its worktree clean.

use super::{entry, git, spin_entries};
use std::path::Path;

/// The worktree has nothing uncommitted, untracked or ignored.
pub fn assert_clean(worktree: &Path) {
    assert_eq!(
        git(worktree, &["status", "--porcelain", "--ignored"]),
        "",
        "worktree not clean"
    );
}

/// keep, discard, build_failed, then no_op and invalid.
pub fn planted_playbook() -> Vec<String> {
    let mut entries = spin_entries().to_vec();
    entries.extend([
        entry(
            "comment-only",
            "Reword a comment",
            " * Every connection object is malloc'd and freed. Nothing here is tuned; finding\n",
            " * Every connection object is malloc'd and freed. Nothing here is tuned: finding\n",
        ),
        entry(
            "wrong-length",
            "Announce a longer body",
            "Content-Length: 2\\r\\n",
            "Content-Length: 3\\r\\n",
        ),
    ]);
    entries
}
