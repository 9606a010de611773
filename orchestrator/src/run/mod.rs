//! `ratchet run`: the optimization loop. Each iteration asks the agent for one
//! mutation and passes it through the stages in order, each of which can end
//! the attempt with its own verdict:
//!
//! propose -> scope -> build -> no-op -> smoke -> measure -> keep rule
//!
//! The champion is rebuilt from git and re-measured in every iteration, side by
//! side with the candidate and the control; no stored score is ever trusted.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::agent::{make_agent, Agent, AgentFailure, AttemptSummary, ProposalContext, Proposed};
use crate::bench::arm::Arm;
use crate::bench::build::BuildFailure;
use crate::referee::compare::{Comparison, Samples, Tampered};
use crate::config::Config;
use crate::bench::environment;
use crate::record::gitops::{short, GitDirSnapshot, MainTreeSnapshot, RunRepo};
use crate::interrupt;
use crate::record::journal::{AaCheck, AttemptRecord, ChampionRecord, Durations, Journal, RunRecord};
use crate::referee::keep::{self, Decision};
use crate::record::knowledge::{self, KnowledgeBase, Lesson};
use crate::bench::launch::ServerCommand;
use crate::bench::profile;
mod scope;
use crate::bench::session::Session;
use crate::clock::now_utc;
use crate::bench::trial::{self, TrialSettings};

#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub resume: Option<String>,
    pub agent: Option<String>,
}

/// Arms in every measurement: the champion is the baseline (index 0).
const CHAMPION: usize = 0;
const CANDIDATE: usize = 1;
const CONTROL: usize = 2;

fn new_run_id() -> String {
    now_utc()
        .replace(['-', ':'], "")
        .replace('T', "-")
        .trim_end_matches('Z')
        .to_string()
}

/// Blocks needed so the 95% interval of the median block ratio is about as
/// narrow as the threshold, given the A/A coefficient of variation.
pub fn blocks_needed(cv: f64, threshold: f64) -> usize {
    let half_width_per_block = 1.96 * 1.2533 * cv;
    ((half_width_per_block / threshold).powi(2)).ceil().max(1.0) as usize
}

struct Loop<'a> {
    session: &'a Session,
    journal: Journal,
    run: RunRecord,
    git: RunRepo,
    kb: KnowledgeBase,
    agent: Box<dyn Agent>,
    control: Arm,
    /// The control's source at the run's base commit.
    control_src: PathBuf,
    champion: ChampionRecord,
    champion_arm: Arm,
    attempts: Vec<AttemptRecord>,
    profile_text: Option<String>,
    bar: ProgressBar,
    /// Set when a built binary was found modified: rebuild before going on.
    tampered: bool,
}

impl Loop<'_> {
    fn config(&self) -> &Config {
        self.session.config()
    }

    fn unit(&self) -> &'static str {
        self.session.plan.event.unit()
    }

    fn settings(&self) -> TrialSettings {
        self.session.trial_settings()
    }

    fn treatment_in_worktree(&self) -> PathBuf {
        self.git.path.join(&self.config().paths.treatment)
    }

    /// Drops the cached builds of the champion and the control and builds
    /// them again from their sources (the worktree is at the champion).
    fn rebuild_after_tampering(&mut self) -> Result<()> {
        for arm in [&self.champion_arm, &self.control] {
            if let Some(dir) = arm.command.program.parent() {
                std::fs::remove_dir_all(dir).ok();
            }
        }
        self.champion_arm = self.build_champion()?;
        self.control = self.session.workspace.control_at(&self.control_src)?;
        say(
            &self.bar,
            "rebuilt the champion and the control after a binary was modified on disk",
        );
        Ok(())
    }

    fn build_champion(&self) -> Result<Arm> {
        let built = self
            .session
            .workspace
            .build_treatment_at(&self.treatment_in_worktree())
            .context("building the champion")?;
        Ok(crate::bench::arm::built_arm("champion", built))
    }

    /// The allowed files of the worktree, by repository-relative path.
    fn allowed_files(&self) -> Result<BTreeMap<String, String>> {
        let patterns = &self.config().run.allowed_paths;
        let mut files = BTreeMap::new();
        let dir = self.treatment_in_worktree();
        let prefix = self.config().paths.treatment.display().to_string();
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            if !entry.file_type()?.is_file() {
                continue;
            }
            let rel = format!("{prefix}/{}", entry.file_name().to_string_lossy());
            if scope::allowed(patterns, &rel) {
                files.insert(rel, std::fs::read_to_string(entry.path())?);
            }
        }
        Ok(files)
    }

    fn history(&self) -> Vec<AttemptSummary> {
        self.attempts
            .iter()
            .map(|a| AttemptSummary {
                number: a.number,
                hypothesis: a.hypothesis.clone(),
                verdict: a.verdict.clone(),
                ratio: a.vs_champion.as_ref().and_then(|c| c.ratio_median),
                ci95: a.vs_champion.as_ref().and_then(|c| c.ratio_ci95),
                playbook_id: a.playbook_id.clone(),
                champion: a.champion.clone(),
                detail: a.build_log_tail.clone().or_else(|| a.detail.clone()),
            })
            .collect()
    }

    fn measure(
        &mut self,
        candidate: &Arm,
        blocks: usize,
        samples: &mut Samples,
        label: &str,
    ) -> Result<()> {
        let arms = [
            self.champion_arm.clone(),
            candidate.clone(),
            self.control.clone(),
        ];
        let settings = self.settings();
        let bar = self.bar.clone();
        let seed = self.attempts.len() as u64 + 1;
        let champion = format!(
            "champion {:.3} of start, {} of control",
            self.champion.cumulative_ratio,
            self.champion
                .vs_control
                .map_or("-".into(), |v| format!("{v:.3}"))
        );
        samples.run_blocks(
            &arms,
            blocks,
            seed,
            &self.session.plan,
            &settings,
            &mut |s| {
                let ratio = s.ratio_so_far.map_or("-".into(), |r| format!("{r:.3}"));
                bar.set_message(format!(
                    "{label}: block {}/{} {} | candidate/champion so far {ratio} | {champion}",
                    s.block, s.blocks, s.arm
                ));
            },
        )
    }

    /// Measures like [`Self::measure`], but a binary found modified on disk
    /// ends only this attempt (`scope`, rebuild pending), never the run.
    /// Returns false in that case.
    fn measure_candidate(
        &mut self,
        candidate: &Arm,
        blocks: usize,
        samples: &mut Samples,
        label: &str,
        record: &mut AttemptRecord,
    ) -> Result<bool> {
        match self.measure(candidate, blocks, samples, label) {
            Ok(()) => Ok(true),
            Err(e) => match e.downcast_ref::<Tampered>() {
                Some(t) => {
                    record.verdict = "scope".into();
                    record.detail = Some(t.to_string());
                    self.tampered = true;
                    Ok(false)
                }
                None => Err(e),
            },
        }
    }

    fn aa_check(&mut self) -> Result<Option<String>> {
        let blocks = self.config().compare.blocks;
        let threshold = self.config().compare.threshold;
        let mut samples = Samples::new(3);
        let twin = Arm {
            label: "champion (A/A twin)".into(),
            ..self.champion_arm.clone()
        };
        self.measure(&twin, blocks, &mut samples, "A/A check of the champion")?;
        let aa = samples.compare(CANDIDATE, CHAMPION, threshold);
        if !samples.gate(CHAMPION).passed || !samples.gate(CONTROL).passed {
            return Ok(Some(format!(
                "the starting champion or the control fails the gate: {:?} / {:?}",
                samples.gate(CHAMPION).detail,
                samples.gate(CONTROL).detail
            )));
        }
        let cv = aa.ratio_cv.unwrap_or(0.0);
        let needed = blocks_needed(cv, threshold).max(blocks);
        let champ = samples.arm_summary(CHAMPION, "champion");
        let control = samples.arm_summary(CONTROL, "control");
        self.run.aa = Some(AaCheck {
            block_ratios: aa.block_ratios.clone(),
            cv,
            ci95: aa.ratio_ci95.unwrap_or([1.0, 1.0]),
            blocks_needed: needed,
        });
        self.run.baseline_cost = Some(champ.cost_per_connection.median);
        self.run.control_start_cost = Some(control.cost_per_connection.median);
        self.champion.cost_per_connection = Some(champ.cost_per_connection.median);
        self.champion.vs_control = samples.compare(CHAMPION, CONTROL, threshold).ratio_median;
        let max_blocks = self.config().run.max_blocks;
        let message = format!(
            "A/A check: spread (cv of block ratios) {:.1}%; resolving a {:.1}% change needs about {needed} blocks",
            cv * 100.0,
            threshold * 100.0
        );
        say(&self.bar, &message);
        if needed > max_blocks {
            return Ok(Some(format!(
                "{message}, more than run.max_blocks = {max_blocks}. This machine cannot resolve the threshold: \
                 raise run.max_blocks, lengthen trial.window_ms, or raise compare.threshold. Not running a lottery."
            )));
        }
        if needed > blocks {
            say(
                &self.bar,
                format!("raising blocks per measurement from {blocks} to {needed}"),
            );
        }
        self.run.blocks = needed;
        Ok(None)
    }

    fn refresh_profile(&mut self) {
        if !self.config().run.profile {
            return;
        }
        self.bar
            .set_message("profiling the champion (extra window, not scored)");
        let settings = self.settings();
        match profile::record(
            &self.champion_arm.command,
            &self.session.plan,
            &settings,
            settings.window,
        ) {
            Ok(p) => {
                if let Err(e) = p.store(&self.kb.dir, &self.run.run_id, self.champion.attempt) {
                    tracing::warn!("could not store the profile: {e:#}");
                }
                self.profile_text = Some(p.render());
            }
            Err(e) => say(&self.bar, format!("profile skipped: {e:#}")),
        }
    }

    fn record(&mut self, a: AttemptRecord) -> Result<()> {
        self.journal.append_attempt(&a)?;
        let lesson = lesson_of(&self.run.run_id, &a);
        if let Err(e) = self.kb.record(&lesson) {
            tracing::warn!("knowledge base not updated: {e:#}");
        }
        let ratio = a
            .vs_champion
            .as_ref()
            .and_then(|c| c.ratio_median)
            .map_or(String::new(), |r| format!(" ratio {r:.3}"));
        say(
            &self.bar,
            format!("#{:<3} {:<13} {}{ratio}", a.number, a.verdict, a.hypothesis),
        );
        self.attempts.push(a);
        Ok(())
    }

    fn commit_message(
        &self,
        record: &AttemptRecord,
        cmp: &Comparison,
        vs_control: Option<f64>,
        cost: f64,
    ) -> String {
        let (n, hypothesis, category, playbook) = (
            record.number,
            &record.hypothesis,
            &record.category,
            record.playbook_id.as_deref(),
        );
        let [lo, hi] = cmp.ratio_ci95.unwrap_or([0.0, 0.0]);
        let ratio = cmp.ratio_median.unwrap_or(0.0);
        format!(
            "{hypothesis}\n\nAgent: {}{}\nCategory: {category}\nMeasured side by side with the champion and the control in {} blocks;\n\
             per-block cost ratios candidate/champion: [{}].\n\n\
             Ratchet-Run: {}\nRatchet-Attempt: {n}\nRatchet-Meter: {} ({})\nRatchet-Cost-Per-Connection: {cost:.1} {}\n\
             Ratchet-Ratio: {ratio:.4}\nRatchet-CI95: {lo:.4} {hi:.4}\nRatchet-Vs-Control: {}\n",
            self.agent.name(),
            playbook.map_or(String::new(), |p| format!(" (playbook entry {p})")),
            cmp.block_ratios.len(),
            cmp.block_ratios.iter().map(|r| format!("{r:.3}")).collect::<Vec<_>>().join(", "),
            self.run.run_id,
            self.session.plan.event.name(),
            self.unit(),
            self.unit(),
            vs_control.map_or("-".into(), |v| format!("{v:.4}")),
        )
    }

    /// One iteration. Returns false when the agent has nothing left.
    fn iterate(&mut self) -> Result<bool> {
        let n = self.attempts.len() + 1;
        let started = Instant::now();
        let started_at = now_utc();
        let champion_commit = self.champion.commit.clone();
        let champion_oid = git2::Oid::from_str(&champion_commit)?;
        let mut record = AttemptRecord {
            number: n,
            agent: self.agent.name().to_string(),
            hypothesis: String::new(),
            category: "uncategorized".into(),
            playbook_id: None,
            champion: champion_commit.clone(),
            attempt_ref: None,
            commit: None,
            diff: String::new(),
            build_ok: None,
            build_log_tail: None,
            binary_sha256: None,
            verdict: String::new(),
            detail: None,
            meter: Some(self.session.plan.event),
            samples: None,
            vs_champion: None,
            vs_control: None,
            champion_vs_control: None,
            extended: false,
            control_drift: None,
            durations: Durations::default(),
            usage: None,
            started_at,
            finished_at: String::new(),
        };
        let finish = |mut r: AttemptRecord, verdict: &str, detail: Option<String>| {
            r.verdict = verdict.into();
            if detail.is_some() {
                r.detail = detail;
            }
            r.durations.total_s = started.elapsed().as_secs_f64();
            r.finished_at = now_utc();
            r
        };

        // propose
        self.bar
            .set_message(format!("#{n} asking the {} agent", self.agent.name()));
        let ctx = ProposalContext {
            files: self.allowed_files()?,
            champion_commit: champion_commit.clone(),
            kept_ids: self.champion.kept_ids.clone(),
            history: self.history(),
            lessons: self.kb.digest(),
            profile: self.profile_text.clone(),
            contract_request: self.config().contract.request.clone(),
            contract_response: self.config().contract.response.clone(),
            allowed_paths: self.config().run.allowed_paths.clone(),
            worktree: self.git.path.clone(),
        };
        let t = Instant::now();
        let git_before = GitDirSnapshot::take(&self.git)?;
        let tree_before = MainTreeSnapshot::take(&self.session.workspace.root)?;
        let proposed = self.agent.propose(&ctx);
        record.durations.propose_s = t.elapsed().as_secs_f64();
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
                    Some(AgentFailure::Malformed { usage, .. }) => ("malformed", usage.clone()),
                    Some(AgentFailure::Unavailable { usage, .. }) => ("agent_error", usage.clone()),
                    None => return Err(e),
                };
                record.hypothesis = "(no usable proposal)".into();
                record.usage = Some(usage);
                let r = finish(record, verdict, Some(format!("{e:#}")));
                self.record(r)?;
                return Ok(true);
            }
        };
        match proposed {
            Proposed::Exhausted => return Ok(false),
            Proposed::Edits(p) => {
                record.hypothesis = p.hypothesis;
                record.category = p.category;
                record.playbook_id = p.playbook_id;
                record.usage = p.usage;
                match crate::agent::edit::apply_all(&ctx.files, &p.edits) {
                    Ok(files) => {
                        for (path, text) in files {
                            std::fs::write(self.git.path.join(&path), text)?;
                        }
                    }
                    Err(e) => {
                        let r = finish(record, "malformed", Some(format!("{e:#}")));
                        self.record(r)?;
                        return Ok(true);
                    }
                }
            }
            Proposed::WorktreeChanged {
                hypothesis,
                category,
            } => {
                record.hypothesis = hypothesis;
                record.category = category;
            }
        }

        // scope
        let changed = self.git.changed_paths()?;
        let mut outside = scope::violations(&self.config().run.allowed_paths, &changed);
        outside.extend(tampering);
        let attempt_ref = format!("refs/ratchet/{}/attempts/{n}", self.run.run_id);
        if changed.is_empty() && outside.is_empty() {
            let r = finish(record, "no_op", Some("the proposal changed nothing".into()));
            self.record(r)?;
            return Ok(true);
        }
        let message = format!(
            "attempt {n}: {}\n\nRatchet-Run: {}\nRatchet-Attempt: {n}\n",
            record.hypothesis, self.run.run_id
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
            let r = finish(record, "scope", Some(detail));
            self.record(r)?;
            return Ok(true);
        }
        let attempt_oid = self.git.commit_worktree(&message, false)?;
        self.git
            .set_ref(&attempt_ref, attempt_oid, "ratchet attempt")?;
        record.attempt_ref = Some(attempt_ref);
        record.diff = self.git.diff(champion_oid, attempt_oid)?;

        let verdict = self.judge(&mut record, n)?;
        match verdict {
            Some((cmp, cost, vs_control)) => {
                let msg = self.commit_message(&record, &cmp, vs_control, cost);
                let commit = self.git.commit_worktree(&msg, true)?;
                record.commit = Some(commit.to_string());
                let mut kept_ids = self.champion.kept_ids.clone();
                kept_ids.extend(record.playbook_id.clone());
                let ratio = cmp.ratio_median.unwrap_or(1.0);
                let new_champion = ChampionRecord {
                    commit: commit.to_string(),
                    attempt: n,
                    hypothesis: record.hypothesis.clone(),
                    cost_per_connection: Some(cost),
                    unit: self.unit().into(),
                    cumulative_ratio: self.champion.cumulative_ratio * ratio,
                    vs_control,
                    kept_ids,
                };
                let r = finish(record, "keep", None);
                self.record(r)?;
                self.journal.write_champion(&new_champion)?;
                self.champion = new_champion;
                self.champion_arm = self.build_champion()?;
                self.refresh_profile();
            }
            None => {
                self.git.reset_hard(champion_oid)?;
                if std::mem::take(&mut self.tampered) {
                    self.rebuild_after_tampering()?;
                }
                let verdict = record.verdict.clone();
                let r = finish(record, &verdict, None);
                self.record(r)?;
            }
        }
        Ok(true)
    }

    /// build -> no-op -> smoke -> measure -> keep rule. Returns the evidence
    /// for a keep, or None with `record.verdict` set.
    fn judge(
        &mut self,
        record: &mut AttemptRecord,
        n: usize,
    ) -> Result<Option<(Comparison, f64, Option<f64>)>> {
        self.bar.set_message(format!("#{n} building"));
        let t = Instant::now();
        let built = self
            .session
            .workspace
            .build_treatment_at(&self.treatment_in_worktree());
        record.durations.build_s = t.elapsed().as_secs_f64();
        let built = match built {
            Ok(b) => b,
            Err(e) => match e.downcast_ref::<BuildFailure>() {
                Some(f) => {
                    record.build_ok = Some(false);
                    record.build_log_tail = Some(f.log_tail.clone());
                    record.verdict = "build_failed".into();
                    return Ok(None);
                }
                None => return Err(e),
            },
        };
        record.build_ok = Some(true);
        record.binary_sha256 = Some(built.binary_hash.clone());
        if Some(&built.binary_hash) == self.champion_arm.binary_hash.as_ref() {
            record.verdict = "no_op".into();
            record.detail = Some("the built binary is identical to the champion's".into());
            return Ok(None);
        }
        let candidate = crate::bench::arm::built_arm("candidate", built);

        self.bar.set_message(format!("#{n} smoke run"));
        let smoke_window = Duration::from_millis(self.config().run.smoke_window_ms);
        let settings = self.settings();
        if let Some(failure) = trial::smoke(
            &candidate.command,
            &self.session.plan,
            &settings,
            smoke_window,
        )? {
            record.verdict = "invalid".into();
            record.detail = Some(failure);
            return Ok(None);
        }

        let t = Instant::now();
        let threshold = self.config().compare.threshold;
        let suspicious = self.config().run.suspicious_gain;
        let mut samples = Samples::new(3);
        let blocks = self.run.blocks;
        let judged = keep::judge_measured(
            &mut samples,
            CANDIDATE,
            CHAMPION,
            threshold,
            suspicious,
            &mut |samples, extending| {
                record.extended |= extending;
                let label = if extending {
                    format!("#{n} extending")
                } else {
                    format!("#{n} measuring")
                };
                self.measure_candidate(&candidate, blocks, samples, &label, record)
            },
        )?;
        let Some(judged) = judged else {
            return Ok(None);
        };
        let (cmp, decision) = (judged.comparison, judged.decision);
        record.durations.measure_s = t.elapsed().as_secs_f64();
        let vs_control = samples.compare(CANDIDATE, CONTROL, threshold);
        let champ_vs_control = samples.compare(CHAMPION, CONTROL, threshold);
        let control_cost = samples
            .arm_summary(CONTROL, "control")
            .cost_per_connection
            .median;
        if let Some(start) = self.run.control_start_cost.filter(|c| *c > 0.0) {
            let drift = control_cost / start - 1.0;
            record.control_drift = Some(drift);
            if drift.abs() > self.config().run.drift_warning {
                say(&self.bar, format!(
                    "warning: the control's cost moved {:+.1}% since the run started (machine drift); ratios stay comparable, raw costs do not",
                    drift * 100.0
                ));
            }
        }
        let cost = samples
            .arm_summary(CANDIDATE, "candidate")
            .cost_per_connection
            .median;
        record.vs_champion = Some(cmp.clone());
        record.vs_control = Some(vs_control.clone());
        record.champion_vs_control = Some(champ_vs_control);
        record.samples = Some(samples);
        Ok(match decision {
            Decision::Keep => Some((cmp, cost, vs_control.ratio_median)),
            Decision::Invalid => {
                record.verdict = "invalid".into();
                record.detail = Some("a gate failed during measurement".into());
                None
            }
            Decision::Discard | Decision::Extend => {
                record.verdict = "discard".into();
                None
            }
        })
    }

    fn stop_reason(&self, started: Instant, iterations_this_call: usize) -> Option<String> {
        let r = &self.config().run;
        if self.attempts.len() >= r.max_iterations {
            return Some(format!("reached run.max_iterations = {}", r.max_iterations));
        }
        if started.elapsed() > Duration::from_secs(r.max_wall_minutes * 60)
            && iterations_this_call > 0
        {
            return Some(format!(
                "reached run.max_wall_minutes = {}",
                r.max_wall_minutes
            ));
        }
        let spent: f64 = self
            .attempts
            .iter()
            .filter_map(|a| a.usage.as_ref())
            .map(|u| u.cost_usd)
            .sum();
        if spent >= r.max_cost_usd {
            return Some(format!(
                "spent ${spent:.2}, run.max_cost_usd = {}",
                r.max_cost_usd
            ));
        }
        let streak = self
            .attempts
            .iter()
            .rev()
            .take_while(|a| a.verdict != "keep")
            .count();
        if streak >= r.max_consecutive_failures {
            return Some(format!(
                "{streak} attempts in a row without a keep (run.max_consecutive_failures)"
            ));
        }
        None
    }

    fn summary(&self) -> String {
        let mut s = format!(
            "\nrun {} ({}): {} attempts, {} kept; branch {}\n",
            self.run.run_id,
            self.run.status,
            self.attempts.len(),
            self.attempts.iter().filter(|a| a.verdict == "keep").count(),
            self.git.branch
        );
        s += &format!(
            "{:>4}  {:<13} {:>8} {:>20}  hypothesis\n",
            "#", "verdict", "ratio", "CI95"
        );
        for a in &self.attempts {
            let c = a.vs_champion.as_ref();
            s += &format!(
                "{:>4}  {:<13} {:>8} {:>20}  {}\n",
                a.number,
                a.verdict,
                c.and_then(|c| c.ratio_median)
                    .map_or("-".into(), |r| format!("{r:.3}")),
                c.and_then(|c| c.ratio_ci95)
                    .map_or("-".into(), |[l, h]| format!("[{l:.3}, {h:.3}]")),
                a.hypothesis
            );
        }
        s +=
            &format!(
            "champion {} (attempt {}): cumulative ratio to the run's start {:.3}; vs control {}\n",
            short(&self.champion.commit),
            self.champion.attempt,
            self.champion.cumulative_ratio,
            self.champion.vs_control.map_or("-".into(), |v| format!("{v:.3}"))
        );
        s
    }
}

/// A line for the user: above the progress bar on a terminal, plain stderr
/// otherwise (indicatif hides everything when stderr is not a terminal).
fn say(bar: &ProgressBar, line: impl AsRef<str>) {
    if bar.is_hidden() {
        eprintln!("{}", line.as_ref());
    } else {
        bar.println(line.as_ref());
    }
}

fn bar() -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
            .expect("valid template"),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

fn lesson_of(run: &str, a: &AttemptRecord) -> Lesson {
    let meter = a
        .meter
        .map_or("-".to_string(), |m| format!("{} ({})", m.name(), m.unit()));
    Lesson {
        run: run.to_string(),
        attempt: a.number,
        hypothesis: a.hypothesis.clone(),
        category: a.category.clone(),
        playbook_id: a.playbook_id.clone(),
        verdict: a.verdict.clone(),
        ratio: a.vs_champion.as_ref().and_then(|c| c.ratio_median),
        ci95: a.vs_champion.as_ref().and_then(|c| c.ratio_ci95),
        meter,
        champion: a.champion.clone(),
        attempt_ref: a.attempt_ref.clone(),
        detail: a.detail.clone(),
    }
}

/// Puts the run's git state back to its champion after a crash: the branch is
/// rewound past any commit the journal does not know, and the worktree reset.
fn reconcile(
    git: &RunRepo,
    journal: &Journal,
    attempts: &[AttemptRecord],
    champion: &mut ChampionRecord,
) -> Result<()> {
    let head = git.head()?.to_string();
    if head != champion.commit {
        if let Some(a) = attempts
            .iter()
            .find(|a| a.commit.as_deref() == Some(head.as_str()))
        {
            // Crashed after journaling a keep but before champion.json: finish it.
            let ratio = a
                .vs_champion
                .as_ref()
                .and_then(|c| c.ratio_median)
                .unwrap_or(1.0);
            let mut kept_ids = champion.kept_ids.clone();
            kept_ids.extend(a.playbook_id.clone());
            *champion = ChampionRecord {
                commit: head,
                attempt: a.number,
                hypothesis: a.hypothesis.clone(),
                cost_per_connection: None,
                unit: champion.unit.clone(),
                cumulative_ratio: champion.cumulative_ratio * ratio,
                vs_control: a.vs_control.as_ref().and_then(|c| c.ratio_median),
                kept_ids,
            };
            journal.write_champion(champion)?;
        } else {
            tracing::warn!(
                "branch head {} is not in the journal: rewinding to the champion",
                short(&head)
            );
        }
    }
    git.reset_hard(git2::Oid::from_str(&champion.commit)?)
}

pub fn run(config_path: &Path, config: Config, options: RunOptions) -> Result<()> {
    let agent_name = options
        .agent
        .clone()
        .unwrap_or_else(|| config.run.agent.clone());
    let session = Session::open(config_path, config, "run")?;
    let root = session.workspace.root.clone();
    let cfg = session.config().clone();
    let results = root.join(&cfg.paths.results);
    let kb = knowledge::at(&root, &cfg.paths.knowledge_base, &cfg.paths.lessons);
    let mut agent_config = cfg.clone();
    agent_config.paths.knowledge_base = root.join(&cfg.paths.knowledge_base);
    let agent = make_agent(&agent_name, &agent_config)?;
    let bar = bar();

    let (journal, run, git, champion, attempts, fresh) = match &options.resume {
        Some(id) => {
            let (journal, run) = Journal::open(&results, id)?;
            let git = RunRepo::open(&root, id, &run.worktree)?;
            let attempts = journal.attempts()?;
            let mut champion = journal.champion()?.context("champion.json is missing")?;
            reconcile(&git, &journal, &attempts, &mut champion)?;
            kb.sync(id, attempts.iter().map(|a| lesson_of(id, a)))?;
            say(
                &bar,
                format!(
                    "resuming run {id} after {} recorded attempts",
                    attempts.len()
                ),
            );
            (journal, run, git, champion, attempts, false)
        }
        None => {
            let run_id = new_run_id();
            let worktree = root.join(".ratchet").join("worktrees").join(&run_id);
            let git = RunRepo::create(&root, &run_id, &worktree)?;
            let base = git.head()?.to_string();
            let treatment_hash =
                crate::bench::build::hash_sources(&git.path.join(&cfg.paths.treatment)).ok();
            let control_hash = crate::bench::build::hash_sources(&root.join(&cfg.paths.control)).ok();
            let run = RunRecord {
                run_id: run_id.clone(),
                started_at: now_utc(),
                config: cfg.clone(),
                fingerprint: environment::fingerprint(&session.plan, control_hash, treatment_hash),
                base_commit: base.clone(),
                branch: git.branch.clone(),
                worktree,
                agent: agent_name.clone(),
                status: "running".into(),
                stop_reason: None,
                aa: None,
                blocks: cfg.compare.blocks,
                baseline_cost: None,
                control_start_cost: None,
            };
            let journal = Journal::create(&results, &run)?;
            let champion = ChampionRecord {
                commit: base,
                attempt: 0,
                hypothesis: "the run's starting point".into(),
                cost_per_connection: None,
                unit: session.plan.event.unit().into(),
                cumulative_ratio: 1.0,
                vs_control: None,
                kept_ids: vec![],
            };
            journal.write_champion(&champion)?;
            say(
                &bar,
                format!(
                    "run {run_id}: branch {}, results in {}",
                    git.branch,
                    journal.dir.display()
                ),
            );
            (journal, run, git, champion, Vec::new(), true)
        }
    };
    bar.set_message("building the control and the champion");
    // Beside the run's worktree, not in /tmp: a killed run leaves nothing
    // there, and a resume exports it afresh to the same place.
    let control_src = root.join(".ratchet").join("control").join(&run.run_id);
    let control = session
        .workspace
        .control_at_rev(&run.base_commit, &control_src)
        .context("building the control of the run's base commit")?;
    let mut lp = Loop {
        session: &session,
        journal,
        run,
        git,
        kb,
        agent,
        control,
        control_src,
        champion_arm: Arm {
            label: String::new(),
            command: ServerCommand {
                program: PathBuf::new(),
                args: vec![],
                env: vec![],
            },
            source_hash: None,
            binary_hash: None,
        },
        champion,
        attempts,
        profile_text: None,
        bar,
        tampered: false,
    };
    lp.champion_arm = lp.build_champion()?;
    let outcome = lp.drive(fresh);
    lp.bar.finish_and_clear();
    let (status, reason) = match &outcome {
        Ok(reason) => (reason.0.clone(), Some(reason.1.clone())),
        Err(e) if e.is::<interrupt::Interrupted>() => (
            "interrupted".to_string(),
            Some("Ctrl-C or SIGTERM".to_string()),
        ),
        Err(e) => ("failed".to_string(), Some(format!("{e:#}"))),
    };
    if let Ok(oid) = git2::Oid::from_str(&lp.champion.commit) {
        lp.git.reset_hard(oid).ok();
    }
    lp.run.status = status;
    lp.run.stop_reason = reason.clone();
    let written = lp.journal.write_run(&lp.run);
    print!("{}", lp.summary());
    println!("stopped: {}", reason.unwrap_or_default());
    if lp.run.status == "interrupted" {
        println!("resume with: ratchet run --resume {}", lp.run.run_id);
    }
    written?;
    outcome.map(|_| ())
}

impl Loop<'_> {
    /// Runs iterations until a limit, the agent's end, or an error. Returns
    /// (status, reason).
    fn drive(&mut self, fresh: bool) -> Result<(String, String)> {
        if fresh || self.run.aa.is_none() {
            if let Some(refusal) = self.aa_check()? {
                self.journal.write_run(&self.run)?;
                return Ok(("stopped".into(), refusal));
            }
            self.journal.write_run(&self.run)?;
            self.journal.write_champion(&self.champion)?;
            self.kb.regenerate().ok();
        }
        self.refresh_profile();
        let started = Instant::now();
        let mut iterations = 0;
        loop {
            if let Some(reason) = self.stop_reason(started, iterations) {
                return Ok(("stopped".into(), reason));
            }
            interrupt::check()?;
            let champion = git2::Oid::from_str(&self.champion.commit)?;
            match self.iterate() {
                Ok(true) => iterations += 1,
                Ok(false) => {
                    return Ok((
                        "converged".into(),
                        "the agent has nothing left to propose".into(),
                    ))
                }
                Err(e) => {
                    self.git.reset_hard(champion).ok();
                    return Err(e);
                }
            }
            self.bar.set_message(format!(
                "champion {}: {:.3} of the run's start, {} of the control",
                short(&self.champion.commit),
                self.champion.cumulative_ratio,
                self.champion
                    .vs_control
                    .map_or("-".into(), |v| format!("{v:.3}"))
            ));
        }
    }
}
