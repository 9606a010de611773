//! What the loop says about its attempts: the record of each as it ends
//! (the journal, a line for the user), the summary table at the end, the
//! history agents read, and the lesson each attempt leaves.

use anyhow::Result;

use super::{say, Loop};
use crate::agent::AttemptSummary;
use crate::record::gitops::short;
use crate::record::journal::AttemptRecord;
use crate::record::knowledge::Lesson;
use crate::referee::figures::{fmt_ci, fmt_comparison, fmt_ratio};
use crate::referee::verdict::AttemptVerdict;

impl Loop<'_> {
    /// Records an ended attempt: a line for the user, then, unless a
    /// generation is under way (its attempts are journaled together, in
    /// order, when it ends), the journal and the lesson.
    pub(super) fn record(&mut self, a: AttemptRecord) -> Result<()> {
        self.say_ended(&a);
        match self.gathering.as_mut() {
            Some(g) => {
                g.end(a);
                Ok(())
            }
            None => self.journal_attempt(a),
        }
    }

    /// The journal, then the attempt's lesson in the knowledge base.
    pub(super) fn journal_attempt(&mut self, a: AttemptRecord) -> Result<()> {
        self.journal.append_attempt(&a)?;
        if let Some(lesson) = lesson_of(&self.run.run_id, &a) {
            if let Err(e) = self.kb.record(&lesson) {
                tracing::warn!("knowledge base not updated: {e:#}");
            }
        }
        self.attempts.push(a);
        Ok(())
    }

    fn say_ended(&self, a: &AttemptRecord) {
        let ratio = a.vs_champion.as_ref().and_then(|c| c.ratio_median);
        let ratio = ratio.map_or(String::new(), |r| format!(" ratio {}", fmt_ratio(Some(r))));
        // Why, when the referee said: an invalid attempt with a fine ratio
        // is otherwise a riddle until someone opens the journal.
        let why = a
            .detail
            .as_ref()
            .map_or(String::new(), |d| format!("\n     {d}"));
        say(
            &self.bar,
            format!(
                "#{:<3} {:<13} {}{ratio}{why}",
                a.number, a.verdict, a.hypothesis
            ),
        );
    }

    pub(super) fn history(&self) -> Vec<AttemptSummary> {
        self.attempts
            .iter()
            .chain(self.unjournaled())
            .map(|a| AttemptSummary {
                number: a.number,
                hypothesis: a.hypothesis.clone(),
                verdict: a.verdict,
                ratio: a.vs_champion.as_ref().and_then(|c| c.ratio_median),
                interval: a.vs_champion.as_ref().and_then(|c| c.ratio_interval),
                ci_level: a.vs_champion.as_ref().map_or(0.95, |c| c.ci_level),
                playbook_id: a.playbook_id.clone(),
                champion: a.champion.clone(),
                detail: a.build_log_tail.clone().or_else(|| a.detail.clone()),
                idea: a.idea.clone(),
                origin: a.origin,
                stack_of: a.stack_of.clone(),
                retry_of: a.retry_of,
                costly_parts: a
                    .ablation
                    .as_ref()
                    .and_then(|x| x.costliest())
                    .map(|p| vec![p.attempt])
                    .unwrap_or_default(),
            })
            .collect()
    }

    pub(super) fn summary(&self) -> String {
        let mut s = format!(
            "\nrun {} ({}): {} attempts, {} kept; branch {}\n",
            self.run.run_id,
            self.run.status,
            self.attempts.len(),
            self.attempts.iter().filter(|a| a.verdict.is_keep()).count(),
            self.git.branch
        );
        s += &format!(
            "{:>4}  {:<13} {:>8} {:>20}  hypothesis (interval: 97.5% per look for a keep decision)\n",
            "#", "verdict", "ratio", "interval"
        );
        for a in &self.attempts {
            let c = a.vs_champion.as_ref();
            s += &format!(
                "{:>4}  {:<13} {:>8} {:>20}  {}\n",
                a.number,
                a.verdict,
                fmt_ratio(c.and_then(|c| c.ratio_median)),
                fmt_ci(c.and_then(|c| c.ratio_interval)),
                a.hypothesis
            );
        }
        let vs_control = match self.champion.vs_control {
            Some(r) => format!("; vs control {r:.3}"),
            None if !self.run.config.run.has_control() => "; no control".into(),
            None => "; vs control -".into(),
        };
        s += &format!(
            "champion {} (attempt {}): product of the kept ratios {:.3}{vs_control}\n",
            short(&self.champion.commit),
            self.champion.attempt,
            self.champion.cumulative_ratio,
        );
        if let Some(st) = &self.run.standing {
            let control = match &st.vs_control {
                Some(c) => format!(" and {} of the control", fmt_comparison(c)),
                None => " (no control)".into(),
            };
            s += &format!(
                "re-measured side by side: the champion costs {} of the run's start{control}\n",
                fmt_comparison(&st.vs_start),
            );
        }
        s
    }
}

/// The lesson an attempt teaches, if any: an agent that gave no usable
/// proposal (`malformed`, `agent_error`) says nothing about the server,
/// and its line would only take room in every later prompt.
pub fn lesson_of(run: &str, a: &AttemptRecord) -> Option<Lesson> {
    if matches!(
        a.verdict,
        AttemptVerdict::Malformed | AttemptVerdict::AgentError
    ) {
        return None;
    }
    let meter = a
        .meter
        .map_or("-".to_string(), |m| format!("{} ({})", m.name(), m.unit()));
    Some(Lesson {
        run: run.to_string(),
        attempt: a.number,
        hypothesis: a.hypothesis.clone(),
        category: a.category.clone(),
        playbook_id: a.playbook_id.clone(),
        verdict: a.verdict,
        ratio: a.vs_champion.as_ref().and_then(|c| c.ratio_median),
        interval: a.vs_champion.as_ref().and_then(|c| c.ratio_interval),
        meter,
        champion: a.champion.clone(),
        attempt_ref: a.attempt_ref.clone(),
        detail: a.detail.clone(),
        stack_of: a.stack_of.clone(),
    })
}
