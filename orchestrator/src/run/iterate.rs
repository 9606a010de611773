//! One iteration of the loop: propose -> scope, then the referee's judging
//! sequence, then keep (commit, new champion) or discard (reset), and the
//! record of it in the journal and the knowledge base.

use anyhow::Result;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::search::LoopMove;
use super::{say, scope, Loop};
use crate::agent::{AgentFailure, Origin, ProposalContext, Proposed};
use crate::bench::arm::Arm;
use crate::bench::samples::Samples;
use crate::clock::now_utc;
use crate::interrupt;
use crate::record::gitops::{GitDirSnapshot, MainTreeSnapshot};
use crate::record::journal::{AttemptRecord, Durations};
use crate::record::trailers;
use crate::referee::format::fmt_ratio;
use crate::referee::judge::{self, Judgement, Phase, Rules, Stages};
use crate::referee::verdict::AttemptVerdict;

fn provenance(record: &AttemptRecord) -> trailers::Provenance {
    trailers::Provenance {
        origin: record.origin,
        stack_of: record.stack_of.clone(),
        retry_of: record.retry_of,
    }
}

/// The loop's side of the judging sequence: it builds the attempt's
/// committed tree (exported where no agent or server writes, not the
/// worktree), and measures with the loop's status line.
struct LoopStages<'l, 'a> {
    lp: &'l Loop<'a>,
    n: usize,
    tree: git2::Oid,
}

impl Stages for LoopStages<'_, '_> {
    fn build(&mut self) -> Result<Arm> {
        self.lp.bar.set_message(format!("#{} building", self.n));
        let arm =
            self.lp
                .session
                .workspace
                .prepare_tree(&self.lp.git.repo, self.tree, "candidate")?;
        self.lp.bar.set_message(format!("#{} smoke run", self.n));
        Ok(arm)
    }

    fn measure(&mut self, arms: &[Arm], samples: &mut Samples, phase: Phase) -> Result<()> {
        let label = format!("#{} {}", self.n, phase.name());
        let (settings, n) = judge::phase_settings(phase, &self.lp.settings(), self.lp.run.blocks);
        self.lp.measure(arms, n, samples, &label, &settings)
    }
}

impl Loop<'_> {
    /// The allowed files of the worktree, by repository-relative path.
    fn allowed_files(&self) -> Result<BTreeMap<String, String>> {
        let prefix = self.config().paths.treatment.display().to_string();
        scope::allowed_files(
            &self.treatment_in_worktree(),
            &prefix,
            &self.config().run.allowed_paths,
        )
    }

    fn rules(&self) -> Rules {
        Rules {
            threshold: self.config().compare.threshold,
            suspicious_gain: self.config().run.suspicious_gain,
            max_p99_factor: self.config().compare.max_p99_factor,
            smoke_window: Duration::from_millis(self.config().run.smoke_window_ms),
        }
    }

    fn record(&mut self, a: AttemptRecord) -> Result<()> {
        self.journal.append_attempt(&a)?;
        if let Some(lesson) = super::summary::lesson_of(&self.run.run_id, &a) {
            if let Err(e) = self.kb.record(&lesson) {
                tracing::warn!("knowledge base not updated: {e:#}");
            }
        }
        let ratio = a.vs_champion.as_ref().and_then(|c| c.ratio_median);
        let ratio = ratio.map_or(String::new(), |r| format!(" ratio {}", fmt_ratio(Some(r))));
        say(
            &self.bar,
            format!("#{:<3} {:<13} {}{ratio}", a.number, a.verdict, a.hypothesis),
        );
        self.attempts.push(a);
        Ok(())
    }

    /// The kept commit's message: what was tried, by whom, and the evidence
    /// in trailers that `ratchet log` reads back.
    fn commit_message(&self, record: &AttemptRecord, cost: f64) -> String {
        let cmp = record.vs_champion.as_ref();
        let ratios = cmp.map_or(&[][..], |c| &c.block_ratios[..]);
        let evidence = trailers::Evidence {
            run: self.run.run_id.clone(),
            attempt: record.number,
            meter: format!("{} ({})", self.session.plan.event.name(), self.unit()),
            unit: self.unit().into(),
            cost_per_connection: Some(cost),
            ratio: cmp.and_then(|c| c.ratio_median),
            ci95: cmp.and_then(|c| c.ratio_ci95),
            vs_control: record.vs_control.as_ref().and_then(|c| c.ratio_median),
            provenance: provenance(record),
        };
        format!(
            "{}\n\nAgent: {}{}\nCategory: {}\nMeasured side by side with the champion and the control in {} blocks;\n\
             per-block cost ratios candidate/champion: [{}].\n\n{}",
            record.hypothesis,
            self.agent.name(),
            record
                .playbook_id
                .as_deref()
                .map_or(String::new(), |p| format!(" (playbook entry {p})")),
            record.category,
            ratios.len(),
            ratios
                .iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
                .join(", "),
            evidence.render(),
        )
    }

    /// Copies what the judge found into the attempt's record, and warns when
    /// the control drifted since the run started.
    fn take_judgement(&self, record: &mut AttemptRecord, j: &mut Judgement) {
        record.verdict = j.verdict;
        record.detail = j.detail.take();
        record.build_ok = j.build_ok;
        record.build_log_tail = j.build_log_tail.take();
        record.binary_sha256 = j.binary_sha256.take();
        record.extended = j.extended;
        record.durations.build_s = j.build_s;
        record.durations.measure_s = j.measure_s;
        let Some(e) = j.evidence.as_ref() else {
            return;
        };
        if let Some(start) = self.run.control_start_cost.filter(|c| *c > 0.0) {
            let drift = e.control_cost / start - 1.0;
            record.control_drift = Some(drift);
            if drift.abs() > self.config().run.drift_warning {
                say(&self.bar, format!(
                    "warning: the control's cost moved {:+.1}% since the run started (machine drift); ratios stay comparable, raw costs do not",
                    drift * 100.0
                ));
            }
        }
        record.vs_champion = Some(e.vs_champion.clone());
        record.vs_control = Some(e.vs_control.clone());
        record.champion_vs_control = Some(e.champion_vs_control.clone());
        record.samples = Some(e.samples.clone());
        record.confirmation = e.confirmation.as_ref().map(|(c, _)| c.clone());
    }

    /// One iteration. Returns false when the agent has nothing left.
    pub(super) fn iterate(&mut self) -> Result<bool> {
        let n = self.attempts.len() + 1;
        let started = Instant::now();
        let champion_commit = self.champion.commit.clone();
        let champion_oid = git2::Oid::from_str(&champion_commit)?;
        let mut record = AttemptRecord {
            number: n,
            agent: self.agent.name().to_string(),
            hypothesis: String::new(),
            category: "uncategorized".into(),
            playbook_id: None,
            idea: format!("#{n}"),
            origin: Origin::Agent,
            stack_of: vec![],
            retry_of: None,
            champion: champion_commit.clone(),
            attempt_ref: None,
            commit: None,
            diff: String::new(),
            build_ok: None,
            build_log_tail: None,
            binary_sha256: None,
            verdict: AttemptVerdict::Invalid,
            detail: None,
            meter: Some(self.session.plan.event),
            samples: None,
            vs_champion: None,
            vs_control: None,
            champion_vs_control: None,
            confirmation: None,
            extended: false,
            control_drift: None,
            durations: Durations::default(),
            usage: None,
            replies: vec![],
            started_at: now_utc(),
            finished_at: String::new(),
        };
        let finish = |mut r: AttemptRecord, verdict: AttemptVerdict, detail: Option<String>| {
            r.verdict = verdict;
            if detail.is_some() {
                r.detail = detail;
            }
            r.durations.total_s = started.elapsed().as_secs_f64();
            r.finished_at = now_utc();
            r
        };

        // propose: the loop's own move (a stack, or a retry for an agent
        // that plans none), else the agent's
        let history = self.history();
        let lineage = self.lineage();
        let (pool, retries_left) = {
            let view = self.view(&history, &lineage);
            (view.pool(), view.retries_left())
        };
        let ctx = ProposalContext {
            files: self.allowed_files()?,
            champion_commit: champion_commit.clone(),
            kept_ids: self.champion.kept_ids.clone(),
            kept_ideas: self.champion.kept_ideas.clone(),
            lineage: lineage.clone(),
            history: history.clone(),
            pool,
            retries_left,
            lessons: self.kb.digest(),
            profile: self.profile_text.clone(),
            contract_request: self.config().contract.request.clone(),
            contract_response: self.config().contract.response.clone(),
            allowed_paths: self.config().run.allowed_paths.clone(),
            worktree: self.git.path.clone(),
        };
        let forced = self
            .view(&history, &lineage)
            .next_move(self.agent.plans_retries(), self.agent.exploring(&ctx));
        let t = Instant::now();
        let git_before = GitDirSnapshot::take(&self.git)?;
        let tree_before = MainTreeSnapshot::take(&self.session.workspace.root)?;
        let asked = forced.is_none();
        let proposed = match forced {
            Some(LoopMove::Stack(parts)) => Ok(Proposed::Stack { parts, usage: None }),
            Some(LoopMove::Retry(of)) => Ok(Proposed::Retry { of, usage: None }),
            None => {
                self.bar
                    .set_message(format!("#{n} asking the {} agent", self.agent.name()));
                match self.agent.propose(&ctx) {
                    Ok(Proposed::Exhausted) => {
                        Ok(self.view(&history, &lineage).last_stack().map_or(
                            Proposed::Exhausted,
                            |parts| Proposed::Stack { parts, usage: None },
                        ))
                    }
                    other => other,
                }
            }
        };
        record.durations.propose_s = t.elapsed().as_secs_f64();
        if asked {
            record.replies = self.agent.rounds().to_vec();
        }
        let mut tampering: Vec<String> = git_before
            .restore(&self.git)?
            .into_iter()
            .map(|g| format!("the git directory: {g}"))
            .collect();
        tampering.extend(
            tree_before
                .restore()?
                .into_iter()
                .map(|p| format!("outside the worktree: {p}")),
        );
        interrupt::check()?;
        let proposed = match proposed {
            Ok(p) => p,
            Err(e) => {
                self.git.reset_hard(champion_oid)?;
                let (verdict, usage) = match e.downcast_ref::<AgentFailure>() {
                    Some(AgentFailure::Malformed { usage, .. }) => {
                        (AttemptVerdict::Malformed, usage.clone())
                    }
                    Some(AgentFailure::Unavailable { usage, .. }) => {
                        (AttemptVerdict::AgentError, usage.clone())
                    }
                    None => return Err(e),
                };
                record.hypothesis = "(no usable proposal)".into();
                record.usage = Some(usage);
                let r = finish(record, verdict, Some(format!("{e:#}")));
                self.record(r)?;
                return Ok(true);
            }
        };
        let refused = match proposed {
            Proposed::Exhausted => return Ok(false),
            Proposed::Edits(p) => {
                record.hypothesis = p.hypothesis;
                record.category = p.category;
                record.origin = p.origin;
                record.retry_of = p.retry_of;
                let retried = p
                    .retry_of
                    .and_then(|k| self.attempts.iter().find(|a| a.number == k));
                if let Some(idea) = p.playbook_id.clone().or(retried.map(|a| a.idea.clone())) {
                    record.idea = idea;
                }
                record.playbook_id = p.playbook_id;
                record.usage = p.usage;
                match crate::agent::edit::apply_all(&ctx.files, &p.edits) {
                    Ok(files) => {
                        for (path, text) in files {
                            std::fs::write(self.git.path.join(&path), text)?;
                        }
                        None
                    }
                    Err(e) => Some((AttemptVerdict::Malformed, format!("{e:#}"))),
                }
            }
            Proposed::WorktreeChanged {
                hypothesis,
                category,
            } => {
                record.hypothesis = hypothesis;
                record.category = category;
                None
            }
            Proposed::Stack { parts, usage } => {
                record.usage = usage;
                self.git.reset_hard(champion_oid)?;
                self.merge_move(&mut record, Origin::Stack, &parts)?
            }
            Proposed::Retry { of, usage } => {
                record.usage = usage;
                self.git.reset_hard(champion_oid)?;
                self.merge_move(&mut record, Origin::Retry, &[of])?
            }
        };
        // No (idea, champion) pair is measured twice, whoever proposed it.
        let refused = refused.or_else(|| {
            let view = self.view(&history, &lineage);
            view.tried_here(&record.idea).map(|k| {
                (
                    AttemptVerdict::NoOp,
                    format!(
                        "{} was already measured against this champion, as attempt #{k}",
                        record.idea
                    ),
                )
            })
        });
        if let Some((verdict, detail)) = refused {
            self.git.reset_hard(champion_oid)?;
            let r = finish(record, verdict, Some(detail));
            self.record(r)?;
            return Ok(true);
        }

        // scope
        let changed = self.git.changed_paths()?;
        let mut outside = scope::violations(&self.config().run.allowed_paths, &changed);
        outside.extend(
            self.git
                .hard_links()?
                .into_iter()
                .map(|p| format!("{p} (hard link)")),
        );
        outside.extend(tampering);
        let attempt_ref = format!("refs/ratchet/{}/attempts/{n}", self.run.run_id);
        if changed.is_empty() && outside.is_empty() {
            let detail = Some("the proposal changed nothing".into());
            let r = finish(record, AttemptVerdict::NoOp, detail);
            self.record(r)?;
            return Ok(true);
        }
        let message = format!(
            "attempt {n}: {}\n\n{}",
            record.hypothesis,
            trailers::attempt(&self.run.run_id, n, &provenance(&record))
        );
        if !outside.is_empty() {
            let detail = format!(
                "changed paths outside run.allowed_paths: {}",
                outside.join(", ")
            );
            // Keep the evidence of what was tried, without the symlinks' targets.
            if let Ok(oid) = self.git.commit_worktree(&message, false) {
                self.git
                    .set_ref(&attempt_ref, oid, "ratchet attempt (scope)")?;
                record.attempt_ref = Some(attempt_ref.clone());
            }
            self.git.reset_hard(champion_oid)?;
            let r = finish(record, AttemptVerdict::Scope, Some(detail));
            self.record(r)?;
            return Ok(true);
        }
        // The attempt is fixed here, before anything untrusted runs: the
        // build, the measurement and a keep all use this tree.
        let attempt_tree = self.git.tree_of_worktree()?;
        let attempt_oid = self.git.commit_tree(attempt_tree, &message, false)?;
        self.git
            .set_ref(&attempt_ref, attempt_oid, "ratchet attempt")?;
        record.attempt_ref = Some(attempt_ref);
        record.diff = self.git.diff(champion_oid, attempt_oid)?;

        // build -> no-op -> smoke -> measure -> keep rule
        let rules = self.rules();
        let settings = self.settings();
        let mut judgement = judge::judge(
            &mut LoopStages {
                lp: self,
                n,
                tree: attempt_tree,
            },
            &self.champion_arm,
            &self.control,
            &rules,
            &self.session.plan,
            &settings,
        )?;
        self.take_judgement(&mut record, &mut judgement);
        // What ran (the build, the servers) may have found the worktree.
        let moved = self.git.changed_since(attempt_tree)?;
        if !moved.is_empty() {
            judgement.verdict = AttemptVerdict::Scope;
            record.verdict = AttemptVerdict::Scope;
            record.detail = Some(format!(
                "the worktree changed after the scope check, while the candidate was built or measured: {}",
                moved
                    .iter()
                    .map(|(p, _)| p.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if judgement.verdict.is_keep() {
            let cost = judgement
                .evidence
                .as_ref()
                .map_or(0.0, |e| e.candidate_cost);
            let msg = self.commit_message(&record, cost);
            let commit = self.git.commit_tree(attempt_tree, &msg, true)?;
            self.git.reset_hard(commit)?;
            record.commit = Some(commit.to_string());
            let new_champion = self.successor(&record, commit.to_string(), cost);
            let r = finish(record, AttemptVerdict::Keep, None);
            self.record(r)?;
            self.journal.write_champion(&new_champion)?;
            self.champion = new_champion;
            self.champion_arm = self.build_champion()?;
            self.refresh_profile();
        } else {
            self.git.reset_hard(champion_oid)?;
            if judgement.tampered {
                self.rebuild_after_tampering()?;
            }
            let verdict = record.verdict;
            let r = finish(record, verdict, None);
            self.record(r)?;
        }
        Ok(true)
    }
}
