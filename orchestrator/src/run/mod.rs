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
mod ablation;
mod commits;
mod generation;
mod iterate;
mod judging;
mod moves;
mod own_moves;
mod probes;
mod propose;
mod recover;
pub mod scope;
mod start;
mod stop;
mod summary;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::agent::Agent;
use crate::bench::choice;
use crate::bench::host::trial::TrialSettings;
use crate::bench::meaning::{self, Setting};
use crate::bench::profiling;
use crate::bench::samples::Samples;
use crate::bench::servers::arm::{with_control, Arm};
use crate::config::Config;
use crate::interrupt;
use crate::record::gitops::{short, RunRepo};
use crate::record::journal::{
    AttemptRecord, ChampionRecord, Journal, RunRecord, RunStatus, Standing,
};
use crate::record::knowledge::{self, KnowledgeBase};
use crate::referee::compare::ratio_so_far;
use crate::referee::figures::fmt_ratio;
use crate::session::Session;

#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub resume: Option<String>,
    pub agent: Option<String>,
    /// The measurement settings given on the command line, by flag: refused
    /// where the run's measuring host would ignore them.
    pub given: Vec<(&'static str, Setting)>,
}

/// How a run ended, for its record and its exit code.
pub struct Ending {
    pub status: RunStatus,
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

struct Loop<'a> {
    session: &'a Session,
    journal: Journal,
    run: RunRecord,
    git: RunRepo,
    kb: KnowledgeBase,
    agent: Box<dyn Agent>,
    /// The frozen reference beside every attempt (`run.control`), if any.
    control: Option<Arm>,
    /// Where the Go control's source at the run's base commit is exported.
    control_src: PathBuf,
    champion: ChampionRecord,
    champion_arm: Arm,
    attempts: Vec<AttemptRecord>,
    /// A generation under way: its attempts, not yet journaled.
    gathering: Option<generation::Gathering>,
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
        for arm in std::iter::once(&self.champion_arm).chain(&self.control) {
            if let Some(dir) = arm.command.program.parent() {
                std::fs::remove_dir_all(dir).ok();
            }
        }
        self.champion_arm = self.build_champion()?;
        self.control = self
            .session
            .workspace
            .run_control(&self.run.base_commit, &self.control_src)?;
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
        sample_count: usize,
        samples: &mut Samples,
        label: &str,
        settings: &TrialSettings,
    ) -> Result<()> {
        let seed = self.attempts.len() as u64 + 1;
        self.measure_seeded(arms, sample_count, samples, label, settings, seed)
    }

    /// [`Self::measure`] from `seed`, for a measurement that must not
    /// repeat the samples of another made at the same point of the run.
    fn measure_seeded(
        &self,
        arms: &[Arm],
        sample_count: usize,
        samples: &mut Samples,
        label: &str,
        settings: &TrialSettings,
        seed: u64,
    ) -> Result<()> {
        let bar = self.bar.clone();
        let standing = self.standing();
        choice::host_for(&self.session.plan, settings).measure(
            samples,
            arms,
            sample_count,
            seed,
            &mut |s| {
                bar.set_message(format!(
                    "{label}: block {}/{} {} | candidate/champion so far {} | {standing}",
                    s.block,
                    s.sample_count,
                    s.arm,
                    fmt_ratio(ratio_so_far(s.so_far))
                ));
            },
        )
    }

    fn refresh_profile(&mut self) {
        if !self.config().run.profile {
            return;
        }
        self.bar
            .set_message("profiling the champion (extra window, not scored)");
        let settings = self.settings();
        let seed = self.attempts.len() as u64 + 1;
        match profiling::profile(&self.champion_arm, &self.session.plan, &settings, seed) {
            Ok(p) => {
                if let Err(e) = p.store(&self.kb.results, &self.run.run_id, self.champion.attempt) {
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
        let start = Arm {
            label: "start".into(),
            ..start
        };
        let arms = with_control([start, self.champion_arm.clone()], self.control.as_ref());
        let mut samples = Samples::new(arms.len());
        let settings = self.settings();
        let sample_count = self.run.sample_count;
        self.measure(&arms, sample_count, &mut samples, "standing", &settings)?;
        let t = self.config().compare.threshold;
        self.run.standing = Some(Standing {
            champion: self.champion.commit.clone(),
            vs_start: samples.compare(1, 0, t),
            vs_control: (arms.len() > 2).then(|| samples.compare(1, 2, t)),
            start_vs_control: (arms.len() > 2).then(|| samples.compare(0, 2, t)),
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
                    status: RunStatus::Stopped,
                    reason: refusal,
                    refused: true,
                });
            }
            self.journal.write_run(&self.run)?;
            self.journal.write_champion(&self.champion)?;
            self.kb.write_digest(&self.run.run_id).ok();
        }
        self.refresh_profile();
        let started = Instant::now();
        let mut iterations = 0;
        loop {
            if let Some(reason) = self.stop_reason(started, iterations) {
                return Ok(Ending {
                    status: RunStatus::Stopped,
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
                        status: RunStatus::Converged,
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

    /// Drives the loop ([`Loop::drive`]); then, when it ended well with an
    /// attempt kept, measures the final champion against the run's start.
    fn drive_and_stand(&mut self, fresh: bool) -> Result<Ending> {
        let mut outcome = self.drive(fresh);
        if outcome.is_ok() && self.champion.attempt > 0 {
            if let Err(e) = self.measure_standing() {
                outcome = Err(e);
            }
        }
        outcome
    }

    /// Ends the run, however it ended: the worktree at the champion,
    /// `run.json` with the status, the summary printed, then the result.
    fn close(mut self, outcome: Result<Ending>) -> Result<()> {
        self.bar.finish_and_clear();
        let (status, reason) = status_of(&outcome);
        if let Ok(oid) = git2::Oid::from_str(&self.champion.commit) {
            self.git.reset_hard(oid).ok();
        }
        self.run.status = status;
        self.run.stop_reason = Some(reason.clone());
        let written = self.journal.write_run(&self.run);
        print!("{}", self.summary());
        println!("stopped: {reason}");
        if self.run.status == RunStatus::Interrupted {
            println!("resume with: ratchet run --resume {}", self.run.run_id);
        }
        written?;
        let ending = outcome?;
        let decided = self.attempts.iter().any(|a| a.verdict.is_decided());
        exit_of(ending, decided).map_err(Into::into)
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

/// Runs the loop, new or resumed. An error is a failure of ratchet itself,
/// an interrupt, or an [`Undecided`] run, each recorded in `run.json` first.
pub fn run(config_path: &Path, config: Config, options: RunOptions) -> Result<()> {
    let session = Session::open(config_path, config, "run")?;
    meaning::refuse_ignored(&session.plan, &options.given)?;
    let root = &session.workspace.root;
    let cfg = session.config();
    let results = root.join(&cfg.paths.results);
    let (agent_name, agent) = start::choose_agent(&session, &results, &options)?;
    let kb = knowledge::at(root, &cfg.paths.knowledge_base, &cfg.paths.results);
    let bar = bar();
    let opened = match &options.resume {
        Some(id) => start::resume(&session, &results, id, &kb, &bar)?,
        None => start::create(&session, &results, &agent_name, &bar)?,
    };
    let fresh = opened.fresh;
    let mut lp = Loop::open(&session, opened, kb, agent, bar)?;
    let outcome = lp.drive_and_stand(fresh);
    lp.close(outcome)
}

/// The status and the reason a run ended with, for `run.json`.
fn status_of(outcome: &Result<Ending>) -> (RunStatus, String) {
    match outcome {
        Ok(e) => (e.status, e.reason.clone()),
        Err(e) if e.is::<interrupt::Interrupted>() => {
            (RunStatus::Interrupted, "Ctrl-C or SIGTERM".to_string())
        }
        Err(e) => (RunStatus::Failed, format!("{e:#}")),
    }
}

/// The result of a run that ended on its own, for the exit code: one the
/// A/A check refused, or one that decided no attempt, is [`Undecided`].
fn exit_of(ending: Ending, decided: bool) -> Result<(), Undecided> {
    match (ending.refused, decided) {
        (true, _) => Err(Undecided {
            code: EXIT_REFUSED,
            reason: ending.reason,
        }),
        (false, false) => Err(Undecided {
            code: EXIT_UNDECIDED,
            reason: ending.reason,
        }),
        (false, true) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ending(status: RunStatus, refused: bool) -> Ending {
        Ending {
            status,
            reason: "why".into(),
            refused,
        }
    }

    #[test]
    fn a_run_ends_stopped_converged_interrupted_or_failed() {
        let s = |o: Result<Ending>| status_of(&o);
        let pair = |a: RunStatus, b: &str| (a, b.to_string());
        assert_eq!(
            s(Ok(ending(RunStatus::Converged, false))),
            pair(RunStatus::Converged, "why")
        );
        let interrupted = anyhow::Error::new(interrupt::Interrupted).context("measuring #3");
        assert_eq!(
            s(Err(interrupted)),
            pair(RunStatus::Interrupted, "Ctrl-C or SIGTERM")
        );
        let failed = anyhow::anyhow!("disk full").context("writing the journal");
        assert_eq!(
            s(Err(failed)),
            pair(RunStatus::Failed, "writing the journal: disk full")
        );
    }

    #[test]
    fn a_run_that_decided_nothing_is_no_success() {
        let code = |e: Ending, decided| exit_of(e, decided).err().map(|u| u.code);
        assert_eq!(
            code(ending(RunStatus::Stopped, true), true),
            Some(EXIT_REFUSED)
        );
        assert_eq!(
            code(ending(RunStatus::Stopped, true), false),
            Some(EXIT_REFUSED)
        );
        assert_eq!(
            code(ending(RunStatus::Stopped, false), false),
            Some(EXIT_UNDECIDED)
        );
        assert_eq!(code(ending(RunStatus::Converged, false), true), None);
        let u = exit_of(ending(RunStatus::Stopped, false), false).unwrap_err();
        assert_eq!(u.reason, "why");
    }
}
