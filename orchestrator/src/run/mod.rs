//! `ratchet run`: the optimization loop. Each iteration asks the agent for one
//! mutation and passes it through the stages in order, each of which can end
//! the attempt with its own verdict:
//!
//! propose -> scope -> build -> no-op -> smoke -> measure -> keep rule
//!
//! The stages from build on are the referee's one judging sequence
//! ([`crate::referee::judge`]). The champion is rebuilt from git and
//! re-measured in every iteration, side by side with the candidate and the
//! control; no stored score is ever trusted.

mod aa;
mod iterate;
mod moves;
mod recover;
pub mod scope;
mod search;
mod stop;
mod summary;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::agent::{make_agent, Agent};
use crate::bench::arm::{built_arm, Arm};
use crate::bench::environment;
use crate::bench::profile;
use crate::bench::samples::Samples;
use crate::bench::session::Session;
use crate::bench::trial::TrialSettings;
use crate::clock::now_utc;
use crate::config::Config;
use crate::interrupt;
use crate::record::gitops::{short, RunRepo};
use crate::record::journal::{AttemptRecord, ChampionRecord, Journal, RunRecord, Standing};
use crate::record::knowledge::{self, KnowledgeBase};
use crate::referee::compare::ratio_so_far;
use crate::referee::format::fmt_ratio;

#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub resume: Option<String>,
    pub agent: Option<String>,
}

/// How a run ended, for its record and its exit code.
pub struct Ending {
    /// stopped | converged | interrupted | failed
    pub status: String,
    pub reason: String,
    /// The A/A check refused to run: the threshold cannot be resolved.
    pub refused: bool,
}

/// A run that ended without deciding anything: an error for the exit code
/// (a script must not mistake it for a run), after the record is written.
#[derive(Debug)]
pub struct Undecided {
    /// [`EXIT_REFUSED`] or [`EXIT_UNDECIDED`].
    pub code: i32,
    pub reason: String,
}

/// Exit code of a run the A/A check refused.
pub const EXIT_REFUSED: i32 = 3;
/// Exit code of a run that stopped before the referee decided any attempt
/// (kept or discarded one).
pub const EXIT_UNDECIDED: i32 = 4;

impl std::fmt::Display for Undecided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.code == EXIT_REFUSED {
            "the run refused to start"
        } else {
            "the run stopped before deciding any attempt"
        };
        write!(f, "{what}: {}", self.reason)
    }
}

impl std::error::Error for Undecided {}

fn new_run_id() -> String {
    now_utc()
        .replace(['-', ':'], "")
        .replace('T', "-")
        .trim_end_matches('Z')
        .to_string()
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

    /// The champion and the control, as the status line shows them.
    fn standing(&self) -> String {
        format!(
            "champion {}: {:.3} of the run's start, {} of the control",
            short(&self.champion.commit),
            self.champion.cumulative_ratio,
            fmt_ratio(self.champion.vs_control)
        )
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
        let head = self.git.repo.head()?.peel_to_tree()?.id();
        self.session
            .workspace
            .prepare_tree(&self.git.repo, head, "champion")
            .context("building the champion")
    }

    /// Measures `blocks` more blocks of `arms` into `samples`, showing the
    /// ratio so far and the standing champion under `label`.
    fn measure(
        &self,
        arms: &[Arm],
        blocks: usize,
        samples: &mut Samples,
        label: &str,
        settings: &TrialSettings,
    ) -> Result<()> {
        let bar = self.bar.clone();
        let seed = self.attempts.len() as u64 + 1;
        let standing = self.standing();
        samples.measure(arms, blocks, seed, &self.session.plan, settings, &mut |s| {
            bar.set_message(format!(
                "{label}: block {}/{} {} | candidate/champion so far {} | {standing}",
                s.block,
                s.blocks,
                s.arm,
                fmt_ratio(ratio_so_far(s.so_far))
            ));
        })
    }

    fn refresh_profile(&mut self) {
        if !self.config().run.profile {
            return;
        }
        self.bar
            .set_message("profiling the champion (extra window, not scored)");
        let settings = self.settings();
        match profile::record(
            &self.champion_arm,
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

    /// Measures the final champion beside the run's start and the control,
    /// under the run's schedule and sample count.
    fn measure_standing(&mut self) -> Result<()> {
        self.bar
            .set_message("measuring the final champion against the run's start");
        let start = self
            .session
            .workspace
            .prepare(&format!("rev:{}", self.run.base_commit))
            .context("building the run's start")?;
        let arms = [
            Arm {
                label: "start".into(),
                ..start
            },
            self.champion_arm.clone(),
            self.control.clone(),
        ];
        let mut samples = Samples::new(3);
        let settings = self.settings();
        let blocks = self.run.blocks;
        self.measure(&arms, blocks, &mut samples, "standing", &settings)?;
        let t = self.config().compare.threshold;
        self.run.standing = Some(Standing {
            champion: self.champion.commit.clone(),
            vs_start: samples.compare(1, 0, t),
            vs_control: samples.compare(1, 2, t),
            start_vs_control: samples.compare(0, 2, t),
            samples,
        });
        Ok(())
    }

    /// Runs iterations until a limit, the agent's end, or an error.
    fn drive(&mut self, fresh: bool) -> Result<Ending> {
        if fresh || self.run.aa.is_none() {
            if let Some(refusal) = self.aa_check()? {
                self.journal.write_run(&self.run)?;
                return Ok(Ending {
                    status: "stopped".into(),
                    reason: refusal,
                    refused: true,
                });
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
                return Ok(Ending {
                    status: "stopped".into(),
                    reason,
                    refused: false,
                });
            }
            interrupt::check()?;
            let champion = git2::Oid::from_str(&self.champion.commit)?;
            match self.iterate() {
                Ok(true) => iterations += 1,
                Ok(false) => {
                    return Ok(Ending {
                        status: "converged".into(),
                        reason: "the agent has nothing left to propose".into(),
                        refused: false,
                    })
                }
                Err(e) => {
                    self.git.reset_hard(champion).ok();
                    return Err(e);
                }
            }
            self.bar.set_message(self.standing());
        }
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

/// A run is judged in one meter from start to end: a count of emulated
/// instructions and one of task-clock (or of the PMU) are never mixed in
/// one lineage.
fn same_meter(
    recorded: &environment::Fingerprint,
    plan: &crate::bench::meter::MeterPlan,
) -> Result<()> {
    let source = plan.source.name();
    let recorded_source = match recorded.meter_source.as_str() {
        // Records from before the emulated meter: the event says which.
        "" if recorded.meter_event == "instructions" => "pmu",
        "" => "os",
        s => s,
    };
    if recorded.meter_event != plan.event.name() || recorded_source != source {
        anyhow::bail!(
            "it was measured in {} ({}), and this command measures in {} ({}): results from two meters are never mixed; \
             pass --meter {} to measure as it did",
            recorded.meter_event,
            recorded_source,
            plan.event.name(),
            source,
            match recorded_source {
                "emulated" => "emulated",
                "pmu" => "instructions",
                _ => "task-clock",
            }
        );
    }
    Ok(())
}

/// Runs the loop, new or resumed. An error is a failure of ratchet itself,
/// an interrupt, or an [`Undecided`] run, each recorded in `run.json` first.
pub fn run(config_path: &Path, config: Config, options: RunOptions) -> Result<()> {
    let session = Session::open(config_path, config, "run")?;
    let root = session.workspace.root.clone();
    let cfg = session.config().clone();
    let results = root.join(&cfg.paths.results);
    // A resumed run keeps the agent it was started with, unless told otherwise.
    let recorded_agent = match &options.resume {
        Some(id) => Some(Journal::open(&results, id)?.1.agent),
        None => None,
    };
    let agent_name = options
        .agent
        .clone()
        .or(recorded_agent)
        .unwrap_or_else(|| cfg.run.agent.clone());
    let kb = knowledge::at(&root, &cfg.paths.knowledge_base, &cfg.paths.lessons);
    let mut agent_config = cfg.clone();
    agent_config.paths.knowledge_base = root.join(&cfg.paths.knowledge_base);
    let agent = make_agent(&agent_name, &agent_config)?;
    let bar = bar();

    let (journal, run, git, champion, attempts, fresh) = match &options.resume {
        Some(id) => {
            let (journal, run) = Journal::open(&results, id)?;
            same_meter(&run.fingerprint, &session.plan)
                .with_context(|| format!("resuming run {id}"))?;
            let git = RunRepo::open(&root, id, &run.worktree)?;
            let attempts = journal.attempts()?;
            let mut champion = journal.champion()?.context("champion.json is missing")?;
            recover::reconcile(&git, &journal, &attempts, &mut champion)?;
            kb.sync(
                id,
                attempts.iter().filter_map(|a| summary::lesson_of(id, a)),
            )?;
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
            let control_hash =
                crate::bench::build::hash_sources(&root.join(&cfg.paths.control)).ok();
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
                standing: None,
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
                kept_ideas: vec![],
                lineage: vec![],
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
    let champion_src = git.path.join(&cfg.paths.treatment);
    let champion_arm = built_arm(
        "champion",
        session
            .workspace
            .build_treatment_at(&champion_src)
            .context("building the champion")?,
    );
    let mut lp = Loop {
        session: &session,
        journal,
        run,
        git,
        kb,
        agent,
        control,
        control_src,
        champion_arm,
        champion,
        attempts,
        profile_text: None,
        bar,
    };
    let mut outcome = lp.drive(fresh);
    if outcome.is_ok() && lp.champion.attempt > 0 {
        if let Err(e) = lp.measure_standing() {
            outcome = Err(e);
        }
    }
    lp.bar.finish_and_clear();
    let (status, reason) = match &outcome {
        Ok(e) => (e.status.clone(), e.reason.clone()),
        Err(e) if e.is::<interrupt::Interrupted>() => {
            ("interrupted".to_string(), "Ctrl-C or SIGTERM".to_string())
        }
        Err(e) => ("failed".to_string(), format!("{e:#}")),
    };
    if let Ok(oid) = git2::Oid::from_str(&lp.champion.commit) {
        lp.git.reset_hard(oid).ok();
    }
    lp.run.status = status;
    lp.run.stop_reason = Some(reason.clone());
    let written = lp.journal.write_run(&lp.run);
    print!("{}", lp.summary());
    println!("stopped: {reason}");
    if lp.run.status == "interrupted" {
        println!("resume with: ratchet run --resume {}", lp.run.run_id);
    }
    written?;
    let ending = outcome?;
    let decided = lp.attempts.iter().any(|a| a.verdict.is_decided());
    match (ending.refused, decided) {
        (true, _) => Err(Undecided {
            code: EXIT_REFUSED,
            reason: ending.reason,
        }
        .into()),
        (false, false) => Err(Undecided {
            code: EXIT_UNDECIDED,
            reason: ending.reason,
        }
        .into()),
        (false, true) => Ok(()),
    }
}
