//! An agent's proposals sampled without a referee: which replies are well
//! formed, which apply to the champion, which build. Whether a model can
//! drive the loop at all shows here in minutes, before any measurement.

use anyhow::Result;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{Agent, AgentFailure, ProposalContext, Proposed, Round, Usage};
use crate::bench::servers::build::build_overlaid;
use crate::bench::servers::target::TargetConfig;

/// One proposal and how far it got.
#[derive(Debug, Serialize)]
pub struct Sample {
    /// `usable`, `not_applied`, `unparsed`, `agent_error`, `stack` or `retry`.
    pub outcome: String,
    /// What the first reply was, before any repair round.
    pub first_round: Option<String>,
    pub rounds: Vec<Round>,
    pub hypothesis: Option<String>,
    /// Whether the edited treatment built; `None` when there was no edit.
    pub builds: Option<bool>,
    pub error: Option<String>,
    pub usage: Option<Usage>,
    pub seconds: f64,
}

/// Asks `agent` once and, for an edit, builds the edited treatment from a
/// copy of `treatment` (whose files `ctx.files` names under `prefix`).
pub fn sample(
    agent: &mut dyn Agent,
    ctx: &ProposalContext,
    treatment: &Path,
    prefix: &str,
    target: &TargetConfig,
    cache: &Path,
) -> Result<Sample> {
    let t = Instant::now();
    let proposed = agent.propose(ctx);
    let rounds = agent.rounds().to_vec();
    let mut s = Sample {
        outcome: String::new(),
        first_round: rounds.first().map(|r| r.outcome.clone()),
        rounds,
        hypothesis: None,
        builds: None,
        error: None,
        usage: None,
        seconds: 0.0,
    };
    match proposed {
        Ok(Proposed::Edits(p)) => {
            s.hypothesis = Some(p.hypothesis.clone());
            s.usage = p.usage.clone();
            let files = super::edit::apply_all(&ctx.files, &p.edits)?;
            match build_edited(treatment, prefix, &files, target, cache) {
                Ok(()) => s.builds = Some(true),
                Err(e) => {
                    s.builds = Some(false);
                    s.error = Some(format!("{e:#}"));
                }
            }
            s.outcome = "usable".into();
        }
        Ok(Proposed::Stack { usage, .. }) => {
            s.outcome = "stack".into();
            s.usage = usage;
        }
        Ok(Proposed::Retry { usage, .. }) => {
            s.outcome = "retry".into();
            s.usage = usage;
        }
        Ok(Proposed::WorktreeChanged { hypothesis, .. }) => {
            s.outcome = "worktree".into();
            s.hypothesis = Some(hypothesis);
        }
        Ok(Proposed::Exhausted) => s.outcome = "exhausted".into(),
        Err(e) => {
            let (outcome, usage) = match e.downcast_ref::<AgentFailure>() {
                Some(AgentFailure::Malformed { usage, .. }) => (
                    s.rounds
                        .last()
                        .map_or("unparsed".to_string(), |r| r.outcome.clone()),
                    usage.clone(),
                ),
                Some(AgentFailure::Unavailable { usage, .. }) => {
                    ("agent_error".to_string(), usage.clone())
                }
                None => return Err(e),
            };
            s.outcome = outcome;
            s.usage = Some(usage);
            s.error = Some(format!("{e:#}"));
        }
    }
    s.seconds = t.elapsed().as_secs_f64();
    Ok(s)
}

fn build_edited(
    treatment: &Path,
    prefix: &str,
    files: &BTreeMap<String, String>,
    target: &TargetConfig,
    cache: &Path,
) -> Result<()> {
    let relative = files
        .iter()
        .map(|(path, text)| {
            let rel = path.strip_prefix(prefix).unwrap_or(path);
            (rel.trim_start_matches('/').to_string(), text.clone())
        })
        .collect();
    build_overlaid(
        treatment,
        &relative,
        target,
        cache,
        Duration::from_secs(120),
    )
    .map(|_| ())
}

/// The shares over a set of samples, final and first-round.
#[derive(Debug, Serialize)]
pub struct Shares {
    pub proposals: usize,
    pub well_formed: usize,
    pub applies: usize,
    pub builds: usize,
    pub agent_errors: usize,
    pub first_round_well_formed: usize,
    pub first_round_applies: usize,
}

pub fn shares(samples: &[Sample]) -> Shares {
    let count = |f: &dyn Fn(&Sample) -> bool| samples.iter().filter(|s| f(s)).count();
    let formed = |o: &str| matches!(o, "usable" | "not_applied" | "stack" | "retry");
    Shares {
        proposals: samples.len(),
        well_formed: count(&|s| formed(&s.outcome)),
        applies: count(&|s| s.outcome == "usable"),
        builds: count(&|s| s.builds == Some(true)),
        agent_errors: count(&|s| s.outcome == "agent_error"),
        first_round_well_formed: count(&|s| s.first_round.as_deref().is_some_and(formed)),
        first_round_applies: count(&|s| s.first_round.as_deref() == Some("usable")),
    }
}
