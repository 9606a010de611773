//! Starting a run: its agent, then a new run (its id, branch, worktree,
//! journal and first champion) or a recorded one resumed (the same meter,
//! its git state put back in line with its journal), then the loop over it
//! with the control and the champion built.

use anyhow::{Context, Result};
use indicatif::ProgressBar;
use std::path::Path;

use super::{recover, say, summary, Loop, RunOptions};
use crate::agent::{make_agent, Agent};
use crate::bench::environment;
use crate::bench::meters::meter::{MeterEvent, MeterSource};
use crate::clock::now_utc;
use crate::record::gitops::RunRepo;
use crate::record::journal::{AttemptRecord, ChampionRecord, Journal, RunRecord, RunStatus};
use crate::record::knowledge::KnowledgeBase;
use crate::session::Session;

/// A run opened from its journal: new (`fresh`) or resumed.
pub(super) struct Opened {
    pub journal: Journal,
    pub run: RunRecord,
    pub git: RunRepo,
    pub champion: ChampionRecord,
    pub attempts: Vec<AttemptRecord>,
    pub fresh: bool,
}

/// The agent a run uses: the one named on the command line (`told`), else
/// the one a resumed run was started with, else `run.agent`.
fn agent_name(told: Option<String>, recorded: Option<String>, configured: &str) -> String {
    told.or(recorded).unwrap_or_else(|| configured.to_string())
}

/// The champion a new run starts from: its base commit.
fn first_champion(base: String, unit: &str) -> ChampionRecord {
    ChampionRecord {
        commit: base,
        attempt: 0,
        hypothesis: "the run's starting point".into(),
        cost_per_connection: None,
        unit: unit.into(),
        cumulative_ratio: 1.0,
        vs_control: None,
        kept_ids: vec![],
        kept_ideas: vec![],
        lineage: vec![],
    }
}

/// The run's agent, by its name ([`agent_name`]) and the run's
/// configuration, with the knowledge base where the repository keeps it.
pub(super) fn choose_agent(
    session: &Session,
    results: &Path,
    options: &RunOptions,
) -> Result<(String, Box<dyn Agent>)> {
    let cfg = session.config();
    // A resumed run keeps the agent it was started with, unless told otherwise.
    let recorded = match &options.resume {
        Some(id) => Some(Journal::open(results, id)?.1.agent),
        None => None,
    };
    let name = agent_name(options.agent.clone(), recorded, &cfg.run.agent);
    let mut playbook = cfg.playbook_settings();
    playbook.dir = session.workspace.root.join(&playbook.dir);
    let agent = make_agent(&name, &cfg.agents, &playbook)?;
    Ok((name, agent))
}

/// A recorded run, resumed: measured in the same meter, its git state put
/// back in line with its journal, its lessons in the knowledge base.
pub(super) fn resume(
    session: &Session,
    results: &Path,
    id: &str,
    kb: &KnowledgeBase,
    bar: &ProgressBar,
) -> Result<Opened> {
    let (journal, run) = Journal::open(results, id)?;
    same_meter(&run.fingerprint, session.plan.event, session.plan.source)
        .with_context(|| format!("resuming run {id}"))?;
    let git = RunRepo::open(&session.workspace.root, id, &run.worktree)?;
    let attempts = journal.attempts()?;
    let mut champion = journal.champion()?.context("champion.json is missing")?;
    recover::reconcile(&git, &journal, &attempts, &mut champion)?;
    kb.sync(
        id,
        attempts.iter().filter_map(|a| summary::lesson_of(id, a)),
    )?;
    say(
        bar,
        format!(
            "resuming run {id} after {} recorded attempts",
            attempts.len()
        ),
    );
    Ok(Opened {
        journal,
        run,
        git,
        champion,
        attempts,
        fresh: false,
    })
}

/// A new run: its id, its branch and worktree, its journal and its first
/// champion, the base commit.
pub(super) fn create(
    session: &Session,
    results: &Path,
    agent: &str,
    bar: &ProgressBar,
) -> Result<Opened> {
    let root = &session.workspace.root;
    let cfg = session.config();
    let run_id = crate::clock::stamp();
    let worktree = root.join(".ratchet").join("worktrees").join(&run_id);
    let git = RunRepo::create(root, &run_id, &worktree)?;
    let base = git.head()?.to_string();
    let treatment_hash = crate::bench::servers::build::hash_sources(
        &git.path.join(&cfg.paths.treatment),
        &cfg.target.globs(),
    )
    .ok();
    let control_hash = crate::bench::servers::build::hash_sources(
        &root.join(&cfg.paths.control),
        &crate::bench::servers::build::control_sources(),
    )
    .ok();
    let run = RunRecord {
        run_id: run_id.clone(),
        started_at: now_utc(),
        config: recorded_config(cfg),
        fingerprint: environment::fingerprint(&session.plan, control_hash, treatment_hash),
        base_commit: base.clone(),
        branch: git.branch.clone(),
        worktree,
        agent: agent.to_string(),
        status: RunStatus::Running,
        stop_reason: None,
        aa: None,
        sample_count: cfg.compare.samples,
        baseline_cost: None,
        control_start_cost: None,
        standing: None,
    };
    let journal = Journal::create(results, &run)?;
    let champion = first_champion(base, session.plan.event.unit());
    journal.write_champion(&champion)?;
    say(
        bar,
        format!(
            "run {run_id}: branch {}, results in {}",
            git.branch,
            journal.dir.display()
        ),
    );
    Ok(Opened {
        journal,
        run,
        git,
        champion,
        attempts: Vec::new(),
        fresh: true,
    })
}

/// What a run without a control gives up, said when it starts.
pub(super) const NO_CONTROL: &str =
    "run.control = \"none\": no frozen reference is measured beside \
     the attempts, so the machine's drift is not checked against one and no ratio to a reference \
     is recorded; the keep rule (candidate against champion, side by side) is unchanged";

impl<'a> Loop<'a> {
    /// The loop over an opened run, with the control built from the run's
    /// base commit and the champion from the worktree.
    pub(super) fn open(
        session: &'a Session,
        opened: Opened,
        kb: KnowledgeBase,
        agent: Box<dyn Agent>,
        bar: ProgressBar,
    ) -> Result<Self> {
        bar.set_message("building the control and the champion");
        // Beside the run's worktree, not in /tmp: a killed run leaves nothing
        // there, and a resume exports it afresh to the same place.
        let root = &session.workspace.root;
        let control_src = root
            .join(".ratchet")
            .join("control")
            .join(&opened.run.run_id);
        let control = session
            .workspace
            .run_control(&opened.run.base_commit, &control_src)
            .context("building the run's control (run.control)")?;
        if control.is_none() {
            say(&bar, NO_CONTROL);
        }
        let champion_src = opened.git.path.join(&session.config().paths.treatment);
        let champion_arm = session.workspace.treatment_arm(
            "champion",
            session
                .workspace
                .build_treatment_at(&champion_src)
                .context("building the champion")?,
        );
        Ok(Loop {
            session,
            journal: opened.journal,
            run: opened.run,
            git: opened.git,
            kb,
            agent,
            control,
            control_src,
            champion_arm,
            champion: opened.champion,
            attempts: opened.attempts,
            gathering: None,
            profile_text: None,
            bar,
        })
    }
}

/// A run is judged in one meter from start to end: a count of emulated
/// instructions and one of task-clock (or of the PMU) are never mixed in
/// one lineage.
fn same_meter(
    recorded: &environment::Fingerprint,
    event: MeterEvent,
    source: MeterSource,
) -> Result<()> {
    let source = source.name();
    let recorded_source = match recorded.meter_source.as_str() {
        // Records from before the emulated meter: the event says which.
        "" if recorded.meter_event == "instructions" => "pmu",
        "" => "os",
        s => s,
    };
    if recorded.meter_event != event.name() || recorded_source != source {
        anyhow::bail!(
            "it was measured in {} ({}), and this command measures in {} ({}): results from two meters are never mixed; \
             pass --meter {} to measure as it did",
            recorded.meter_event,
            recorded_source,
            event.name(),
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

/// The configuration a run records: `auto` resolved to what it measured
/// in, so that a replay measures in the same regime even after `auto`
/// has come to mean another.
fn recorded_config(cfg: &crate::config::Config) -> crate::config::Config {
    let mut c = cfg.clone();
    c.emulator.regime = c.emulator.workload();
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_records_the_regime_auto_resolved_to() {
        let cfg = crate::config::Config::default();
        assert_eq!(
            cfg.emulator.regime,
            crate::bench::meters::emulator::WorkloadRegime::Auto
        );
        assert_eq!(
            recorded_config(&cfg).emulator.regime,
            crate::bench::meters::emulator::WorkloadRegime::Backlog
        );
    }

    #[test]
    fn the_agent_named_on_the_command_line_wins_then_the_resumed_runs() {
        let some = |s: &str| Some(s.to_string());
        assert_eq!(
            agent_name(some("claude"), some("offline"), "openai"),
            "claude"
        );
        assert_eq!(agent_name(None, some("offline"), "openai"), "offline");
        assert_eq!(agent_name(None, None, "openai"), "openai");
    }

    #[test]
    fn a_new_run_starts_from_its_base_commit_as_champion() {
        let c = first_champion("abc".into(), "ns");
        assert_eq!(
            (c.commit.as_str(), c.attempt, c.unit.as_str()),
            ("abc", 0, "ns")
        );
        assert_eq!(c.cumulative_ratio, 1.0);
        assert!(c.lineage.is_empty() && c.kept_ideas.is_empty() && c.kept_ids.is_empty());
        assert_eq!(c.cost_per_connection, None);
        assert_eq!(c.vs_control, None);
    }

    fn recorded(event: &str, source: &str) -> environment::Fingerprint {
        environment::Fingerprint {
            meter_event: event.into(),
            meter_source: source.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_run_resumes_only_in_the_meter_it_was_measured_in() {
        use MeterEvent::*;
        use MeterSource::*;
        assert!(same_meter(&recorded("task-clock", "os"), TaskClock, Os).is_ok());
        assert!(same_meter(
            &recorded("instructions", "emulated"),
            Instructions,
            Emulated
        )
        .is_ok());
        let e = same_meter(&recorded("instructions", "emulated"), Instructions, Pmu).unwrap_err();
        assert!(e.to_string().contains("pass --meter emulated"), "{e}");
        let e = same_meter(&recorded("instructions", "pmu"), TaskClock, Os).unwrap_err();
        assert!(e.to_string().contains("pass --meter instructions"), "{e}");
        // Records from before the emulated meter name no source.
        assert!(same_meter(&recorded("instructions", ""), Instructions, Pmu).is_ok());
        assert!(same_meter(&recorded("task-clock", ""), TaskClock, Os).is_ok());
        assert!(same_meter(&recorded("instructions", ""), Instructions, Emulated).is_err());
    }
}
