//! The commit trailers: the evidence a champion's commit carries, so that
//! `git log` alone tells what was measured. The loop writes them here and
//! `ratchet log` and the lineage read them here, so the two cannot drift.

use anyhow::{Context, Result};

use crate::agent::Origin;

const RUN: &str = "Ratchet-Run";
const ATTEMPT: &str = "Ratchet-Attempt";
const METER: &str = "Ratchet-Meter";
const COST: &str = "Ratchet-Cost-Per-Connection";
const RATIO: &str = "Ratchet-Ratio";
/// The interval of the decision, at its own level; the trailer keeps the
/// name commits have always carried.
const INTERVAL: &str = "Ratchet-CI95";
const VS_CONTROL: &str = "Ratchet-Vs-Control";
const ORIGIN: &str = "Ratchet-Origin";
const STACK_OF: &str = "Ratchet-Stack-Of";
const RETRY_OF: &str = "Ratchet-Retry-Of";

/// Where an attempt came from, as every commit of it says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Provenance {
    pub origin: Origin,
    pub stack_of: Vec<usize>,
    pub retry_of: Option<usize>,
}

impl Provenance {
    fn render(&self) -> String {
        let mut s = format!("{ORIGIN}: {}\n", self.origin.name());
        if !self.stack_of.is_empty() {
            let parts: Vec<String> = self.stack_of.iter().map(|n| n.to_string()).collect();
            s += &format!("{STACK_OF}: {}\n", parts.join(" "));
        }
        if let Some(n) = self.retry_of {
            s += &format!("{RETRY_OF}: {n}\n");
        }
        s
    }

    /// Absent trailers (a commit of an older ratchet) read as the agent's.
    fn parse(message: &str) -> Self {
        Self {
            origin: value(message, ORIGIN)
                .and_then(Origin::parse)
                .unwrap_or_default(),
            stack_of: value(message, STACK_OF)
                .map(|v| {
                    v.split_whitespace()
                        .filter_map(|n| n.parse().ok())
                        .collect()
                })
                .unwrap_or_default(),
            retry_of: value(message, RETRY_OF).and_then(|v| v.parse().ok()),
        }
    }
}

/// What a kept commit records about its measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct Evidence {
    pub run: String,
    pub attempt: usize,
    /// The meter's event and unit, as `task-clock (ns)`.
    pub meter: String,
    pub unit: String,
    pub cost_per_connection: Option<f64>,
    pub ratio: Option<f64>,
    pub interval: Option<[f64; 2]>,
    pub vs_control: Option<f64>,
    pub provenance: Provenance,
}

/// The trailers of an attempt's own commit (its ref), which carries no measurement.
pub fn attempt(run: &str, attempt: usize, provenance: &Provenance) -> String {
    format!(
        "{RUN}: {run}\n{ATTEMPT}: {attempt}\n{}",
        provenance.render()
    )
}

impl Evidence {
    pub fn render(&self) -> String {
        let num = |v: Option<f64>, digits: usize| v.map_or("-".into(), |x| format!("{x:.digits$}"));
        let ci = self
            .interval
            .map_or("-".into(), |[lo, hi]| format!("{lo:.4} {hi:.4}"));
        format!(
            "{}{METER}: {}\n{COST}: {} {}\n{RATIO}: {}\n{INTERVAL}: {ci}\n{VS_CONTROL}: {}\n",
            attempt(&self.run, self.attempt, &self.provenance),
            self.meter,
            num(self.cost_per_connection, 1),
            self.unit,
            num(self.ratio, 4),
            num(self.vs_control, 4),
        )
    }

    /// Reads the trailers of `message`; only the attempt number is required,
    /// so a commit written by an older ratchet still reads.
    pub fn parse(oid: &str, message: &str) -> Result<Self> {
        let attempt = value(message, ATTEMPT)
            .and_then(|a| a.parse().ok())
            .with_context(|| format!("commit {oid} has no {ATTEMPT} trailer"))?;
        let interval = value(message, INTERVAL).and_then(|c| {
            let v: Vec<f64> = c
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            (v.len() == 2).then(|| [v[0], v[1]])
        });
        let cost = value(message, COST);
        Ok(Self {
            run: value(message, RUN).unwrap_or_default().to_string(),
            attempt,
            meter: value(message, METER).unwrap_or_default().to_string(),
            unit: cost
                .and_then(|c| c.split_whitespace().nth(1))
                .unwrap_or_default()
                .to_string(),
            cost_per_connection: number(cost),
            ratio: number(value(message, RATIO)),
            interval,
            vs_control: number(value(message, VS_CONTROL)),
            provenance: Provenance::parse(message),
        })
    }
}

fn value<'a>(message: &'a str, key: &str) -> Option<&'a str> {
    message
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

fn number(s: Option<&str>) -> Option<f64> {
    s?.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence() -> Evidence {
        Evidence {
            run: "r1".into(),
            attempt: 6,
            meter: "task-clock (ns)".into(),
            unit: "ns".into(),
            cost_per_connection: Some(12916.7),
            ratio: Some(0.878),
            interval: Some([0.857, 0.978]),
            vs_control: Some(0.4771),
            provenance: Provenance {
                origin: Origin::Stack,
                stack_of: vec![3, 5],
                retry_of: None,
            },
        }
    }

    #[test]
    fn what_is_written_reads_back() {
        let e = evidence();
        let message = format!("Use multishot accept\n\nAgent: playbook\n\n{}", e.render());
        assert_eq!(Evidence::parse("abc", &message).unwrap(), e);
    }

    #[test]
    fn a_commit_without_provenance_reads_as_the_agents() {
        let old = "subject\n\nRatchet-Run: r\nRatchet-Attempt: 2\n";
        assert_eq!(
            Evidence::parse("abc", old).unwrap().provenance,
            Provenance::default()
        );
        let retry = Provenance {
            origin: Origin::Retry,
            stack_of: vec![],
            retry_of: Some(4),
        };
        let text = attempt("r", 9, &retry);
        assert!(text.contains("Ratchet-Retry-Of: 4"), "{text}");
        assert_eq!(Evidence::parse("abc", &text).unwrap().provenance, retry);
    }

    #[test]
    fn missing_values_read_as_none() {
        let e = Evidence {
            vs_control: None,
            interval: None,
            ..evidence()
        };
        let back = Evidence::parse("abc", &e.render()).unwrap();
        assert_eq!(back.vs_control, None);
        assert_eq!(back.interval, None);
    }

    #[test]
    fn a_commit_without_the_attempt_is_named() {
        let err = Evidence::parse("abc123", "subject\n\nRatchet-Run: r\n").unwrap_err();
        assert!(err.to_string().contains("abc123"), "{err}");
    }
}
