//! What a stack's ablation found: each part left out of the stack in turn,
//! measured beside the whole before the keep (`run/ablation.rs`), and which
//! part, if any, the champion must not carry.

use serde::{Deserialize, Serialize};

use crate::bench::samples::Samples;
use crate::referee::compare::Comparison;
use crate::referee::figures::{fmt_ci, fmt_ratio};
use crate::referee::verdict::Verdict;

/// What each part of a stack gives in it: the stack without the part,
/// measured side by side with the whole stack in one measurement.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StackAblation {
    pub parts: Vec<PartInStack>,
    /// The arms: the stack, then the stack without each part that could be
    /// reverted and built, in `parts` order.
    pub samples: Samples,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PartInStack {
    pub attempt: usize,
    pub idea: String,
    /// cost(stack without it) / cost(stack), at 95%: above 1, the part
    /// gives; wholly below 1, it costs more than it gives. None when the
    /// part could not be reverted or built (`note` says why).
    pub without: Option<Comparison>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl StackAblation {
    /// The part to leave out: of those that cost more than they give, the
    /// one whose absence measured cheapest. One at a time, because two
    /// parts may each cost only beside the other.
    pub fn costliest(&self) -> Option<&PartInStack> {
        self.parts
            .iter()
            .filter(|p| p.costs_more_than_it_gives())
            .min_by(|a, b| {
                let r = |p: &PartInStack| {
                    p.without
                        .as_ref()
                        .and_then(|c| c.ratio_median)
                        .unwrap_or(f64::INFINITY)
                };
                r(a).total_cmp(&r(b))
            })
    }
}

impl PartInStack {
    /// `#3 (msg-more): without it 1.042 [1.030, 1.055]`: the part named, as
    /// the loop's messages, `ratchet log` and the report show it.
    pub fn named(&self) -> String {
        format!("#{} ({}): {}", self.attempt, self.idea, self.describe())
    }

    /// `part #3 (msg-more): without it 1.042 [1.030, 1.055]: gives`: one
    /// line of `ratchet log` and the report.
    pub fn line(&self) -> String {
        format!("part {}: {}", self.named(), self.finding())
    }

    /// What the measurement says the part does in the stack.
    pub fn finding(&self) -> &'static str {
        match &self.without {
            None => "not measured",
            Some(c) if c.verdict == Verdict::Invalid => "not judged",
            Some(_) if self.costs_more_than_it_gives() => "costs more than it gives",
            Some(c) if c.ratio_interval.is_some_and(|[lo, _]| lo > 1.0) => "gives",
            Some(_) => "not resolved",
        }
    }

    /// `without it 0.962 [0.955, 0.970]`, or why it was not measured.
    pub fn describe(&self) -> String {
        match &self.without {
            Some(c) => format!(
                "without it {} {}",
                fmt_ratio(c.ratio_median),
                fmt_ci(c.ratio_interval)
            ),
            None => format!(
                "not measured without it ({})",
                self.note.as_deref().unwrap_or("no reason recorded")
            ),
        }
    }

    /// The stack is cheaper without it: the measurement resolved it.
    pub fn costs_more_than_it_gives(&self) -> bool {
        self.without.as_ref().is_some_and(|c| {
            c.verdict != Verdict::Invalid && c.ratio_interval.is_some_and(|[_, hi]| hi < 1.0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_costs_more_than_it_gives_only_when_the_stack_is_resolved_cheaper_without_it() {
        let part = |c: Option<Comparison>| PartInStack {
            attempt: 1,
            idea: "a".into(),
            without: c,
            note: None,
        };
        let costs = |lo, hi| part(Some(Comparison::judged((lo + hi) / 2.0, lo, hi, 0.03)));
        assert!(costs(0.97, 0.99).costs_more_than_it_gives());
        assert!(
            !costs(0.99, 1.01).costs_more_than_it_gives(),
            "not resolved"
        );
        assert!(!costs(1.1, 1.2).costs_more_than_it_gives(), "it gives");
        assert!(!part(None).costs_more_than_it_gives(), "not measured");
        let mut failed = Comparison::judged(0.9, 0.88, 0.92, 0.03);
        failed.verdict = Verdict::Invalid;
        assert!(!part(Some(failed)).costs_more_than_it_gives());
        let named = |n, p: PartInStack| PartInStack { attempt: n, ..p };
        let ablation = StackAblation {
            parts: vec![
                named(1, costs(1.1, 1.2)),
                named(2, costs(0.97, 0.99)),
                named(3, costs(0.95, 0.97)),
            ],
            samples: Samples::new(4),
        };
        assert_eq!(ablation.costliest().map(|p| p.attempt), Some(3));
        let findings: Vec<_> = ablation.parts.iter().map(PartInStack::finding).collect();
        assert_eq!(
            findings,
            [
                "gives",
                "costs more than it gives",
                "costs more than it gives"
            ]
        );
        assert_eq!(costs(0.99, 1.01).finding(), "not resolved");
        assert_eq!(part(None).finding(), "not measured");
        assert!(
            ablation.parts[0]
                .named()
                .starts_with("#1 (a): without it 1.150 [1.100, 1.200]"),
            "{}",
            ablation.parts[0].named()
        );
    }
}
