//! The record: what a run leaves behind and reads back. The journal under
//! `results/`, the commit trailers, the git worktree and refs, the lineage of
//! champions, and the knowledge base of lessons.

pub mod gitops;
pub mod journal;
pub mod knowledge;
pub mod lineage;
pub mod recorded;
pub mod stack_ablation;
pub mod trailers;
