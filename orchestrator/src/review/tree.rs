//! The search as a tree, for `log --all` and the report: the champions are
//! the trunk (start, then each keep), and under each one hang the attempts
//! made against it, each saying where it came from: the agent's own idea, a
//! stack of earlier promising attempts, or a retry of an earlier idea. A
//! reviewer reads which idea was tried on which champion, stacked with what,
//! without joining attempt numbers by hand.

use serde::{Deserialize, Serialize};

use crate::agent::Origin;
use crate::record::gitops::short;
use crate::record::journal::AttemptRecord;
use crate::referee::figures::{fmt_ci_at, fmt_ratio};
use crate::referee::verdict::AttemptVerdict;
use crate::review::svg::escape;

/// One attempt under the champion it was measured against.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Branch {
    pub number: usize,
    pub idea: String,
    pub origin: Origin,
    pub stack_of: Vec<usize>,
    pub retry_of: Option<usize>,
    pub verdict: AttemptVerdict,
    pub ratio: Option<f64>,
    pub interval: Option<[f64; 2]>,
    /// The interval's coverage: 0.95, or 0.975 for a keep decision's look.
    pub interval_level: Option<f64>,
    pub hypothesis: String,
}

/// A champion and the attempts made against it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Level {
    /// The keep that made this champion; 0 for the start.
    pub champion: usize,
    pub commit: String,
    pub branches: Vec<Branch>,
}

/// The levels in the order the champions reigned. An attempt belongs to the
/// champion commit it records; a champion is named by the keep whose commit
/// it is.
pub fn levels(attempts: &[AttemptRecord]) -> Vec<Level> {
    let mut out: Vec<Level> = Vec::new();
    for a in attempts {
        let i = match out.iter().position(|l| l.commit == a.champion) {
            Some(i) => i,
            None => {
                let champion = attempts
                    .iter()
                    .find(|k| k.commit.as_deref() == Some(a.champion.as_str()))
                    .map_or(0, |k| k.number);
                out.push(Level {
                    champion,
                    commit: a.champion.clone(),
                    branches: Vec::new(),
                });
                out.len() - 1
            }
        };
        let c = a.vs_champion.as_ref();
        out[i].branches.push(Branch {
            number: a.number,
            idea: if a.idea.is_empty() {
                a.playbook_id
                    .clone()
                    .unwrap_or_else(|| format!("#{}", a.number))
            } else {
                a.idea.clone()
            },
            origin: a.origin,
            stack_of: a.stack_of.clone(),
            retry_of: a.retry_of,
            verdict: a.verdict,
            ratio: c.and_then(|c| c.ratio_median),
            interval: c.and_then(|c| c.ratio_interval),
            interval_level: c.and_then(|c| c.ratio_interval.map(|_| c.ci_level)),
            hypothesis: a.hypothesis.clone(),
        });
    }
    // The final champion, when nothing was measured against it yet.
    if let Some(k) = attempts.iter().rev().find(|a| a.verdict.is_keep()) {
        let commit = k.commit.clone().unwrap_or_default();
        if !out.iter().any(|l| l.commit == commit) {
            out.push(Level {
                champion: k.number,
                commit,
                branches: Vec::new(),
            });
        }
    }
    out
}

impl Branch {
    /// Where the attempt came from, as `agent`, `stack of #1+#3` or
    /// `retry of #2`.
    pub fn provenance(&self) -> String {
        self.origin.describe(&self.stack_of, self.retry_of)
    }

    fn estimate(&self) -> String {
        format!(
            "{} {}",
            fmt_ratio(self.ratio),
            fmt_ci_at(self.interval, self.interval_level)
        )
    }
}

fn champion_name(l: &Level) -> String {
    if l.champion == 0 {
        format!("start {}", short(&l.commit))
    } else {
        format!("champion #{} {}", l.champion, short(&l.commit))
    }
}

/// The tree as text: each champion, then its attempts, the keep last
/// leading down to the next champion.
pub fn render_text(levels: &[Level]) -> String {
    let mut s = String::from(
        "search tree (each champion, then the attempts against it; ratio to that champion [interval (coverage)]):\n",
    );
    for l in levels {
        s += &format!("{}\n", champion_name(l));
        for (i, b) in l.branches.iter().enumerate() {
            let fork = if i + 1 == l.branches.len() {
                "└─"
            } else {
                "├─"
            };
            s += &format!(
                "  {fork} #{:<3} {:<16} {:<10} {:<34} {}\n",
                b.number,
                b.provenance(),
                b.verdict.name(),
                b.estimate(),
                b.idea
            );
        }
    }
    s
}

/// The tree as nested HTML lists.
pub fn render_html(levels: &[Level]) -> String {
    let mut s = String::from("<ul class=\"tree\">");
    for l in levels {
        s += &format!("<li><strong>{}</strong><ul>", escape(&champion_name(l)));
        for b in &l.branches {
            s += &format!(
                "<li><a href=\"#attempt-{n}\">#{n}</a> {p}: <span class=\"v-{v}\">{v}</span> {e} <code>{i}</code></li>",
                n = b.number,
                p = escape(&b.provenance()),
                v = b.verdict.name(),
                e = escape(&b.estimate()),
                i = escape(&b.idea),
            );
        }
        s += "</ul></li>";
    }
    s + "</ul>"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(n: usize, champion: &str, verdict: AttemptVerdict) -> AttemptRecord {
        let mut a: AttemptRecord = serde_json::from_value(serde_json::json!({
            "number": n, "agent": "playbook", "hypothesis": format!("h{n}"),
            "category": "c", "playbook_id": format!("idea-{n}"), "champion": champion,
            "attempt_ref": null, "commit": null, "diff": "", "build_ok": true,
            "build_log_tail": null, "binary_sha256": null, "verdict": verdict,
            "detail": null, "meter": null, "samples": null, "vs_champion": null,
            "vs_control": null, "champion_vs_control": null, "extended": false,
            "control_drift": null, "durations": {"propose_s": 0.0, "build_s": 0.0,
            "measure_s": 0.0, "total_s": 0.0}, "usage": null,
            "started_at": "", "finished_at": ""
        }))
        .unwrap();
        a.idea = format!("idea-{n}");
        a
    }

    #[test]
    fn attempts_hang_under_the_champion_they_were_measured_against() {
        let mut a = vec![
            attempt(1, "base", AttemptVerdict::Promising),
            attempt(2, "base", AttemptVerdict::Promising),
            attempt(3, "base", AttemptVerdict::Keep),
            attempt(4, "c3", AttemptVerdict::Discard),
        ];
        a[2].origin = Origin::Stack;
        a[2].stack_of = vec![1, 2];
        a[2].commit = Some("c3".into());
        a[3].verdict = AttemptVerdict::Keep;
        a[3].commit = Some("c4".into());
        a[3].origin = Origin::Retry;
        a[3].retry_of = Some(1);
        let l = levels(&a);
        assert_eq!(l.len(), 3, "the final champion closes the tree");
        assert_eq!((l[2].champion, l[2].branches.len()), (4, 0));
        assert_eq!((l[0].champion, l[0].branches.len()), (0, 3));
        assert_eq!((l[1].champion, l[1].branches.len()), (3, 1));
        assert_eq!(l[0].branches[2].provenance(), "stack of #1+#2");
        assert_eq!(l[1].branches[0].provenance(), "retry of #1");
        let text = render_text(&l);
        assert!(text.contains("champion #3 c3"), "{text}");
        assert!(text.contains("└─ #4   retry of #1"), "{text}");
        let html = render_html(&l);
        assert_eq!(html.matches("<li><a href").count(), 4, "{html}");
    }
}
