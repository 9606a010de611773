//! A stack the keep rule passed is ablated before it is kept: each part
//! left out in turn, and every such stack measured beside the whole in one
//! measurement. What each part gives in the stack is then on record, and
//! the champion carries no part that costs more than it gives: a stack with
//! one is not kept, and the same stack without those parts is the loop's
//! next move (`View::pruned` in `probes.rs`).

use anyhow::{Context, Result};

use super::iterate::Attempt;
use super::{say, Loop};
use crate::bench::samples::Samples;
use crate::record::lineage::carry_over;
use crate::record::stack_ablation::{PartInStack, StackAblation};
use crate::referee::verdict::AttemptVerdict;

/// Seeds an ablation apart from its stack's judging and from any screen.
const SEED: u64 = 2 << 32;

impl Loop<'_> {
    /// Whether an attempt the keep rule passed may be kept: a stack only
    /// when no part costs more than it gives in it. One that does is
    /// marked a discard, naming the part.
    pub(super) fn survives_ablation(&self, at: &mut Attempt, tree: git2::Oid) -> Result<bool> {
        at.record.ablation = self.ablate_stack(at, tree)?;
        let Some(costly) = at
            .record
            .ablation
            .as_ref()
            .and_then(|a| a.costliest())
            .map(PartInStack::named)
        else {
            return Ok(true);
        };
        at.record.verdict = AttemptVerdict::Discard;
        at.record.detail = Some(format!(
            "the keep rule passed it, but the stack measured cheaper without {costly}: \
             it is not kept, and the stack without it is the next move{}",
            at.record
                .detail
                .as_ref()
                .map_or(String::new(), |d| format!("; {d}"))
        ));
        say(
            &self.bar,
            format!("#{} the stack is cheaper without {costly}", at.n),
        );
        Ok(false)
    }

    /// The ablation of `at`, a stack of two or more parts whose tree is
    /// `tree`, when `search.ablate_stacks` asks for one.
    pub(super) fn ablate_stack(
        &self,
        at: &Attempt,
        tree: git2::Oid,
    ) -> Result<Option<StackAblation>> {
        if !self.config().search.ablate_stacks || at.record.stack_of.len() < 2 {
            return Ok(None);
        }
        let workspace = &self.session.workspace;
        let mut arms = vec![workspace.prepare_tree(&self.git.repo, tree, "stack")?];
        let mut parts = Vec::new();
        let mut arm_of = Vec::new();
        for &n in &at.record.stack_of {
            let mut part = PartInStack {
                attempt: n,
                idea: self.idea_of(n),
                without: None,
                note: None,
            };
            let label = format!("stack without #{n}");
            match self
                .without_part(tree, n)
                .and_then(|t| workspace.prepare_tree(&self.git.repo, t, &label))
            {
                Ok(arm) => {
                    arm_of.push(Some(arms.len()));
                    arms.push(arm);
                }
                Err(e) => {
                    arm_of.push(None);
                    part.note = Some(format!("{e:#}"));
                }
            }
            parts.push(part);
        }
        let mut samples = Samples::new(arms.len());
        if arms.len() > 1 {
            self.measure_seeded(
                &arms,
                self.run.sample_count,
                &mut samples,
                &format!("#{} ablating the stack", at.n),
                &self.settings(),
                SEED + at.n as u64,
            )?;
        }
        let threshold = self.config().compare.threshold;
        for (part, arm) in parts.iter_mut().zip(arm_of) {
            part.without = arm.map(|a| samples.compare(a, 0, threshold));
        }
        Ok(Some(StackAblation { parts, samples }))
    }

    fn idea_of(&self, n: usize) -> String {
        self.attempts
            .iter()
            .find(|a| a.number == n)
            .map_or_else(|| format!("#{n}"), |a| a.idea.clone())
    }

    /// The stack's tree without part `n`: the part's own change reverted
    /// by a three-way merge, as `git revert` would.
    fn without_part(&self, tree: git2::Oid, n: usize) -> Result<git2::Oid> {
        let part = self
            .attempts
            .iter()
            .find(|a| a.number == n)
            .with_context(|| format!("part #{n} is not in the journal"))?;
        let repo = &self.git.repo;
        let name = part
            .attempt_ref
            .as_deref()
            .with_context(|| format!("part #{n} has no ref"))?;
        let part_tree = repo.revparse_single(name)?.peel_to_tree()?.id();
        let base = repo
            .find_commit(git2::Oid::from_str(&part.champion)?)?
            .tree_id();
        carry_over(repo, part_tree, tree, base)
            .with_context(|| format!("reverting #{n} from the stack: later parts edit its lines"))
    }
}
