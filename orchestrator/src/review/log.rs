//! `ratchet log`: a run's champion lineage as a reviewer reads it, from git
//! and the evidence in the commit trailers, and with `--all` every attempt
//! that did not become champion, from its ref, with its verdict.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::record::gitops::short;
use crate::record::journal::{AttemptRecord, RunStatus};
use crate::record::lineage::{Lineage, Source, Step};
use crate::record::recorded::RecordedRun;
use crate::record::stack_ablation::PartInStack;
use crate::referee::figures::{fmt_ci, fmt_ci_at, fmt_ratio};
use crate::referee::verdict::AttemptVerdict;
use crate::review::tree;

/// One attempt of the run, whatever became of it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AttemptLine {
    pub number: usize,
    pub verdict: AttemptVerdict,
    pub hypothesis: String,
    pub playbook_id: Option<String>,
    pub attempt_ref: Option<String>,
    /// The commit the ref points to, when this repository has the ref.
    pub ref_commit: Option<String>,
    pub ratio: Option<f64>,
    #[serde(alias = "ci95")]
    pub interval: Option<[f64; 2]>,
    /// The coverage `interval` was computed at (0.975 for a keep decision's look).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_level: Option<f64>,
    pub vs_control: Option<f64>,
    pub detail: Option<String>,
    /// Where a generation's attempt ranked in its screen, when the keep
    /// rule judged it (a screened one's detail says so itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen: Option<String>,
}

/// The document `ratchet log --json` prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct History {
    pub run_id: String,
    pub status: RunStatus,
    pub agent: String,
    pub meter: String,
    pub unit: String,
    pub threshold: f64,
    pub base_commit: String,
    pub branch: String,
    pub source: Source,
    pub warnings: Vec<String>,
    pub lineage: Vec<Step>,
    pub attempts: Option<Vec<AttemptLine>>,
    /// Every ablated stack, kept or not: what each part gave in it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<StackParts>,
    /// With `--all`: the search drawn as a tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<Vec<tree::Level>>,
}

/// A stack's parts as its ablation measured them before the keep
/// (`run/ablation.rs`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StackParts {
    pub attempt: usize,
    pub parts: Vec<PartInStack>,
}

/// The stacks of `attempts` that were ablated.
pub fn stacks(attempts: &[AttemptRecord]) -> Vec<StackParts> {
    attempts
        .iter()
        .filter_map(|a| {
            Some(StackParts {
                attempt: a.number,
                parts: a.ablation.as_ref()?.parts.clone(),
            })
        })
        .collect()
}

/// The lines under attempt `n`: what each of its parts gave, when it is an
/// ablated stack.
pub fn part_lines(stacks: &[StackParts], n: usize) -> impl Iterator<Item = String> + '_ {
    stacks
        .iter()
        .filter(move |s| s.attempt == n)
        .flat_map(|s| s.parts.iter().map(PartInStack::line))
}

pub fn read(repo: &git2::Repository, run: &RecordedRun, all: bool) -> Result<History> {
    let lineage = Lineage::read(repo, run)?;
    let attempts = all.then(|| {
        run.attempts
            .iter()
            .map(|a| AttemptLine {
                number: a.number,
                verdict: a.verdict,
                hypothesis: a.hypothesis.clone(),
                playbook_id: a.playbook_id.clone(),
                attempt_ref: a.attempt_ref.clone(),
                ref_commit: a
                    .attempt_ref
                    .as_deref()
                    .and_then(|r| repo.refname_to_id(r).ok())
                    .map(|o| o.to_string()),
                ratio: a.vs_champion.as_ref().and_then(|c| c.ratio_median),
                interval: a.vs_champion.as_ref().and_then(|c| c.ratio_interval),
                ci_level: a.vs_champion.as_ref().map(|c| c.ci_level),
                vs_control: a.vs_control.as_ref().and_then(|c| c.ratio_median),
                detail: a
                    .evidence()
                    .map(|d| d.lines().next().unwrap_or("").to_string()),
                screen: judged_screen(a),
            })
            .collect()
    });
    Ok(History {
        run_id: run.run.run_id.clone(),
        status: run.run.status,
        agent: run.run.agent.clone(),
        meter: run.run.fingerprint.meter_event.clone(),
        unit: run.unit().to_string(),
        threshold: run.threshold(),
        base_commit: run.run.base_commit.clone(),
        branch: run.run.branch.clone(),
        source: lineage.source,
        warnings: lineage.warnings,
        lineage: lineage.steps,
        attempts,
        stacks: stacks(&run.attempts),
        tree: all.then(|| tree::levels(&run.attempts)),
    })
}

/// Where a judged attempt of a generation ranked in its screen.
pub fn judged_screen(a: &AttemptRecord) -> Option<String> {
    a.screen
        .as_ref()
        .filter(|_| a.verdict != AttemptVerdict::Screened)
        .map(|s| s.describe())
}

/// How to read a stack's part lines, in `ratchet log` and the report.
pub const PARTS_LEGEND: &str = "part: a stack's part, measured before the keep; without it: \
    cost(the stack without it) / cost(the stack), side by side, at 95% (> 1: the part gives)\n";

pub fn render(h: &History) -> String {
    let mut out = format!(
        "run {} ({}; {} agent; meter {} in {}; threshold {:.1}%)\n",
        h.run_id,
        h.status,
        h.agent,
        h.meter,
        h.unit,
        h.threshold * 100.0
    );
    out += &match h.source {
        Source::Git => format!("lineage from branch {}\n", h.branch),
        Source::Journal => format!(
            "lineage from the journal (branch {} is not in this repository)\n",
            h.branch
        ),
    };
    for w in &h.warnings {
        out += &format!("warning: {w}\n");
    }
    out += &format!(
        "\n{:>7}  {:<10}  {:>6}  {:<16}  {:>8}  {:>10}  hypothesis\n",
        "attempt", "commit", "ratio", "interval", "to start", "to control"
    );
    for s in &h.lineage {
        let commit = match &s.commit {
            Some(c) => short(c).to_string(),
            None => format!("{}*", short(&s.recorded_commit)),
        };
        out += &format!(
            "{:>7}  {:<10}  {:>6}  {:<16}  {:>8.3}  {:>10}  {}\n",
            if s.attempt == 0 {
                "start".to_string()
            } else {
                s.attempt.to_string()
            },
            commit,
            fmt_ratio(s.ratio),
            fmt_ci(s.interval),
            s.cumulative,
            fmt_ratio(s.vs_control),
            s.hypothesis
        );
        for line in part_lines(&h.stacks, s.attempt) {
            out += &format!("{:>7}  {line}\n", "");
        }
    }
    if h.lineage.iter().any(|s| s.commit.is_none()) {
        out += "* commit not in this repository; `ratchet replay` rebuilds it from the journal's diff\n";
    }
    out += "ratio: cost / the previous champion's, side by side (< 1 is cheaper); interval: the keep \
            decision's, from exact order statistics (its coverage is in `--all`); to start: product of the \
            ratios; to control: cost / the control's in the same attempt\n";
    if !h.stacks.is_empty() {
        out += PARTS_LEGEND;
    }
    if let Some(attempts) = &h.attempts {
        out += &format!(
            "\nevery attempt:\n{:>7}  {:<13}  {:>6}  {:<24}  {:<10}  hypothesis / detail\n",
            "attempt", "verdict", "ratio", "interval (coverage)", "ref"
        );
        for a in attempts {
            let reference = match (&a.ref_commit, &a.attempt_ref) {
                (Some(c), _) => short(c).to_string(),
                (None, Some(_)) => "(missing)".into(),
                (None, None) => "-".into(),
            };
            out += &format!(
                "{:>7}  {:<13}  {:>6}  {:<24}  {:<10}  {}\n",
                a.number,
                a.verdict,
                fmt_ratio(a.ratio),
                fmt_ci_at(a.interval, a.ci_level),
                reference,
                a.hypothesis
            );
            let details = a.screen.iter().chain(&a.detail).filter(|d| !d.is_empty());
            for d in details.cloned().chain(part_lines(&h.stacks, a.number)) {
                out += &format!("{:>7}  {:<13}  {d}\n", "", "");
            }
        }
    }
    if let Some(levels) = &h.tree {
        out += "\n";
        out += &tree::render_text(levels);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::referee::compare::Comparison;

    fn step(attempt: usize, hypothesis: &str) -> Step {
        Step {
            attempt,
            hypothesis: hypothesis.into(),
            commit: Some("0123456789abcdef".into()),
            recorded_commit: "0123456789abcdef".into(),
            playbook_id: None,
            ratio: Some(0.8),
            interval: Some([0.78, 0.82]),
            cumulative: 0.8,
            vs_control: None,
            cost_per_connection: None,
        }
    }

    #[test]
    fn a_kept_stack_shows_what_each_part_gave_under_its_champion() {
        let part = |attempt, idea: &str, lo, hi| PartInStack {
            attempt,
            idea: idea.into(),
            without: Some(Comparison::judged((lo + hi) / 2.0, lo, hi, 0.03)),
            note: None,
        };
        let h = History {
            run_id: "r".into(),
            status: RunStatus::Stopped,
            agent: "playbook".into(),
            meter: "emulated".into(),
            unit: "instructions".into(),
            threshold: 0.03,
            base_commit: "b".into(),
            branch: "ratchet/r".into(),
            source: Source::Git,
            warnings: Vec::new(),
            lineage: vec![step(0, "start"), step(3, "the pair")],
            attempts: None,
            stacks: vec![StackParts {
                attempt: 3,
                parts: vec![part(1, "d", 1.2, 1.3), part(2, "e", 0.98, 1.01)],
            }],
            tree: None,
        };
        let text = render(&h);
        let lines: Vec<&str> = text.lines().collect();
        let at = lines.iter().position(|l| l.contains("the pair")).unwrap();
        assert!(
            lines[at + 1].contains("part #1 (d): without it 1.250 [1.200, 1.300]: gives")
                && lines[at + 2].contains("part #2 (e): without it")
                && lines[at + 2].ends_with(": not resolved"),
            "{text}"
        );
        assert!(text.contains(PARTS_LEGEND), "{text}");
    }
}
