//! The run journal in `results/<run-id>/`: `run.json` (configuration,
//! fingerprint, state), `attempts.jsonl` (append-only, one line per attempt)
//! and `champion.json`. Whole files are replaced atomically (write, fsync,
//! rename); attempt lines are appended with one write and an fsync. A crash
//! at any instant leaves every file valid: at worst a torn last line, which
//! opening the journal cuts off.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::agent::{Origin, Round, Usage};
use crate::bench::environment::Fingerprint;
use crate::bench::host::endurance::Endurance;
use crate::bench::meters::meter::MeterEvent;
use crate::bench::samples::Samples;
use crate::config::Config;
use crate::files::{read_json, write_atomic};
use crate::record::stack_ablation::StackAblation;
use crate::referee::compare::Comparison;
use crate::referee::figures::{fmt_ci, fmt_ratio};
use crate::referee::verdict::AttemptVerdict;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AaCheck {
    pub block_ratios: Vec<f64>,
    pub cv: f64,
    #[serde(alias = "ci95")]
    pub interval: [f64; 2],
    #[serde(alias = "blocks_needed")]
    pub samples_needed: usize,
    /// The upper confidence bound on the spread that sized the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread_upper_bound: Option<f64>,
    /// A first A/A that would have refused, re-measured once before the
    /// run decided (see `run/aa.rs`): its ratios, spread and sample count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remeasured: Option<Box<AaCheck>>,
}

/// Settings renamed since records were first written: (section, old, new).
const RENAMED: [(&str, &str, &str); 2] = [
    ("compare", "blocks", "samples"),
    ("run", "max_blocks", "max_samples"),
];

/// A configuration as the ratchet that made a record wrote it. Settings
/// this ratchet no longer has are dropped: a record is read back, never run
/// from, and a strict reading refused every run made before a setting was
/// removed (the emulated meter's `connections` and `quota_us`, say).
fn recorded_config<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Config, D::Error> {
    use serde::de::Error;
    fn prune(v: &mut serde_json::Value, shape: &serde_json::Value) {
        if let (serde_json::Value::Object(fields), serde_json::Value::Object(known)) = (v, shape) {
            fields.retain(|k, _| known.contains_key(k));
            for (k, f) in fields.iter_mut() {
                prune(f, &known[k]);
            }
        }
    }
    let mut v = serde_json::Value::deserialize(d)?;
    for (section, old, new) in RENAMED {
        if let Some(fields) = v.get_mut(section).and_then(|s| s.as_object_mut()) {
            if let Some(value) = fields.remove(old) {
                fields.entry(new).or_insert(value);
            }
        }
    }
    prune(
        &mut v,
        &serde_json::to_value(Config::default()).map_err(D::Error::custom)?,
    );
    serde_json::from_value(v).map_err(D::Error::custom)
}

/// Where a run stands. `interrupted` and `failed` runs can be resumed.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    /// Ctrl-C or SIGTERM.
    Interrupted,
    /// A budget ran out (iterations, wall time, failures, cost).
    Stopped,
    /// The agent had nothing left to propose.
    Converged,
    Failed,
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RunStatus::Running => "running",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Stopped => "stopped",
            RunStatus::Converged => "converged",
            RunStatus::Failed => "failed",
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub started_at: String,
    #[serde(deserialize_with = "recorded_config")]
    pub config: Config,
    pub fingerprint: Fingerprint,
    pub base_commit: String,
    pub branch: String,
    pub worktree: PathBuf,
    pub agent: String,
    pub status: RunStatus,
    pub stop_reason: Option<String>,
    pub aa: Option<AaCheck>,
    /// Samples per measurement after the A/A check.
    #[serde(alias = "blocks")]
    pub sample_count: usize,
    pub baseline_cost: Option<f64>,
    pub control_start_cost: Option<f64>,
    /// The final champion measured again, side by side with the run's start
    /// and the control, when the run kept anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standing: Option<Standing>,
}

/// Where the final champion stands, re-measured at the end of a run: the
/// cumulative gain as one side-by-side measurement, not a product of the
/// kept medians (each of which was selected for being low).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Standing {
    pub champion: String,
    pub vs_start: Comparison,
    /// None in a run without a control (`run.control = "none"`).
    pub vs_control: Option<Comparison>,
    pub start_vs_control: Option<Comparison>,
    /// Arms in order: start, champion, control.
    pub samples: Samples,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Durations {
    pub propose_s: f64,
    pub build_s: f64,
    pub measure_s: f64,
    pub total_s: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub number: usize,
    pub agent: String,
    pub hypothesis: String,
    pub category: String,
    pub playbook_id: Option<String>,
    /// What the search counts as one idea: the playbook id (with a
    /// parameter's value), `#n` for an agent's own edit first tried as
    /// attempt n, the retried attempt's idea for a retry, and
    /// `stack:<idea>+<idea>...` for a stack. Absent from older journals.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub idea: String,
    #[serde(default)]
    pub origin: Origin,
    /// A stack's parts, as attempt numbers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stack_of: Vec<usize>,
    /// The earlier attempt a retry measures again on a newer champion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<usize>,
    /// The champion commit the attempt was made against.
    pub champion: String,
    /// `refs/ratchet/<run>/attempts/<n>`: the attempt's tree, whatever its verdict.
    pub attempt_ref: Option<String>,
    /// The commit on the run branch, for a keep.
    pub commit: Option<String>,
    pub diff: String,
    pub build_ok: Option<bool>,
    pub build_log_tail: Option<String>,
    pub binary_sha256: Option<String>,
    pub verdict: AttemptVerdict,
    pub detail: Option<String>,
    pub meter: Option<MeterEvent>,
    /// Arms in order: champion, candidate, control.
    pub samples: Option<Samples>,
    pub vs_champion: Option<Comparison>,
    pub vs_control: Option<Comparison>,
    pub champion_vs_control: Option<Comparison>,
    /// A duet keep measured again with each server alone on the core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<Comparison>,
    pub extended: bool,
    /// The endurance run of a candidate about to be kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endurance: Option<Endurance>,
    /// Its generation's screen, when it was gathered into one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen: Option<Screen>,
    /// A stack the keep rule passed, each part left out in turn and
    /// measured beside it before the keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ablation: Option<StackAblation>,
    pub control_drift: Option<f64>,
    pub durations: Durations,
    pub usage: Option<Usage>,
    /// What the model answered, round by round, for API agents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replies: Vec<Round>,
    pub started_at: String,
    pub finished_at: String,
}

/// An attempt's place in its generation's screen: one measurement of the
/// champion, every candidate that built and ran, and the control.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Screen {
    /// The generation's attempts, in order: it is named by the first.
    pub generation: Vec<usize>,
    /// Its place among the candidates the screen could rank, cheapest
    /// first; none when it failed a gate there, or never reached it.
    pub rank: Option<usize>,
    /// cost(candidate) / cost(champion) in the screen, at 95%.
    pub vs_champion: Option<Comparison>,
}

impl Screen {
    /// Where the attempt ranked, as `ranked 1 of 3 in the screen of #4, #5,
    /// #6 (0.912 [0.905, 0.918])`: what the log and the report say of a
    /// generation's attempt that the keep rule judged.
    pub fn describe(&self) -> String {
        let of: Vec<String> = self.generation.iter().map(|n| format!("#{n}")).collect();
        let place = match self.rank {
            Some(r) => format!("ranked {r} of {}", self.generation.len()),
            None => "not ranked".into(),
        };
        let c = self.vs_champion.as_ref();
        format!(
            "{place} in the screen of {} ({} {})",
            of.join(", "),
            fmt_ratio(c.and_then(|c| c.ratio_median)),
            fmt_ci(c.and_then(|c| c.ratio_interval))
        )
    }
}

impl AttemptRecord {
    /// What a reviewer reads first about the attempt: its detail, else the
    /// tail of its build log.
    pub fn evidence(&self) -> Option<&str> {
        self.detail.as_deref().or(self.build_log_tail.as_deref())
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChampionRecord {
    pub commit: String,
    /// 0 for the run's starting point.
    pub attempt: usize,
    pub hypothesis: String,
    pub cost_per_connection: Option<f64>,
    pub unit: String,
    /// Product of the kept ratios since the start of the run.
    pub cumulative_ratio: f64,
    pub vs_control: Option<f64>,
    pub kept_ids: Vec<String>,
    /// The ideas the champion contains (see [`AttemptRecord::idea`]); a
    /// kept stack contributes its parts'.
    #[serde(default)]
    pub kept_ideas: Vec<String>,
    /// The champions before this one, the run's start first.
    #[serde(default)]
    pub lineage: Vec<String>,
}

impl ChampionRecord {
    /// The champion that attempt `a`, kept as `commit`, makes of this one;
    /// `parts` are the attempts a stack merged (empty otherwise).
    pub fn succeeded_by(
        &self,
        a: &AttemptRecord,
        parts: &[&AttemptRecord],
        commit: String,
        cost: Option<f64>,
    ) -> Self {
        let ratio = a
            .vs_champion
            .as_ref()
            .and_then(|c| c.ratio_median)
            .unwrap_or(1.0);
        let mut kept_ids = self.kept_ids.clone();
        let mut kept_ideas = self.kept_ideas.clone();
        let mut lineage = self.lineage.clone();
        lineage.push(self.commit.clone());
        if parts.is_empty() {
            kept_ids.extend(a.playbook_id.clone());
            kept_ideas.push(a.idea.clone());
        }
        for p in parts {
            kept_ids.extend(p.playbook_id.clone());
            kept_ideas.push(p.idea.clone());
        }
        Self {
            commit,
            attempt: a.number,
            hypothesis: a.hypothesis.clone(),
            cost_per_connection: cost,
            unit: self.unit.clone(),
            cumulative_ratio: self.cumulative_ratio * ratio,
            vs_control: a.vs_control.as_ref().and_then(|c| c.ratio_median),
            kept_ids,
            kept_ideas,
            lineage,
        }
    }
}

pub struct Journal {
    pub dir: PathBuf,
}

impl Journal {
    pub fn create(results: &Path, run: &RunRecord) -> Result<Self> {
        let dir = results.join(&run.run_id);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let j = Self { dir };
        j.write_run(run)?;
        File::create(j.dir.join("attempts.jsonl"))?;
        Ok(j)
    }

    /// Opens an existing journal, cutting off a torn last attempt line.
    pub fn open(results: &Path, run_id: &str) -> Result<(Self, RunRecord)> {
        let dir = results.join(run_id);
        if !dir.join("run.json").exists() {
            anyhow::bail!("no run {run_id} in {}", results.display());
        }
        let j = Self { dir };
        let path = j.attempts_path();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let keep = whole_lines(&text);
        if keep < text.len() {
            tracing::warn!(
                "{}: cutting off a torn last line ({} bytes)",
                path.display(),
                text.len() - keep
            );
            OpenOptions::new()
                .write(true)
                .open(&path)?
                .set_len(keep as u64)?;
        }
        let run = read_json(&j.dir.join("run.json"))?;
        Ok((j, run))
    }

    fn attempts_path(&self) -> PathBuf {
        self.dir.join("attempts.jsonl")
    }

    pub fn write_run(&self, run: &RunRecord) -> Result<()> {
        write_atomic(&self.dir.join("run.json"), &serde_json::to_vec_pretty(run)?)
    }

    pub fn write_champion(&self, c: &ChampionRecord) -> Result<()> {
        write_atomic(
            &self.dir.join("champion.json"),
            &serde_json::to_vec_pretty(c)?,
        )
    }

    pub fn champion(&self) -> Result<Option<ChampionRecord>> {
        let p = self.dir.join("champion.json");
        if p.exists() {
            read_json(&p).map(Some)
        } else {
            Ok(None)
        }
    }

    pub fn append_attempt(&self, a: &AttemptRecord) -> Result<()> {
        let mut line = serde_json::to_vec(a)?;
        line.push(b'\n');
        let mut f = OpenOptions::new()
            .append(true)
            .open(self.attempts_path())
            .with_context(|| format!("opening {}", self.attempts_path().display()))?;
        let len = f.metadata()?.len();
        if let Err(e) = f.write_all(&line).and_then(|_| f.sync_data()) {
            // Leave no torn line behind (a full disk, say): cut back to before it.
            f.set_len(len).ok();
            return Err(e)
                .with_context(|| format!("appending to {}", self.attempts_path().display()));
        }
        Ok(())
    }

    pub fn attempts(&self) -> Result<Vec<AttemptRecord>> {
        read_attempts(&self.attempts_path())
    }
}

/// The length of `text` up to the end of its last complete line.
fn whole_lines(text: &str) -> usize {
    text.rfind('\n').map_or(0, |i| i + 1)
}

/// The journaled attempts. Read only: a torn last line (a run killed
/// mid-append) is skipped here; [`Journal::open`] is what cuts it off.
pub fn read_attempts(path: &Path) -> Result<Vec<AttemptRecord>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let keep = whole_lines(&text);
    if keep < text.len() {
        tracing::warn!("{}: ignoring a torn last line", path.display());
    }
    text[..keep]
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| format!("{} line {}", path.display(), i + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_configuration_is_read_under_todays_names() {
        #[derive(Deserialize)]
        struct Recorded {
            #[serde(deserialize_with = "recorded_config")]
            config: Config,
        }
        let old = serde_json::json!({"config": {
            "compare": {"blocks": 18},
            "run": {"max_blocks": 40},
            "paths": {"lessons": "lessons.md"},
        }});
        let r: Recorded = serde_json::from_value(old).unwrap();
        assert_eq!(r.config.compare.samples, 18);
        assert_eq!(r.config.run.max_samples, 40);
    }

    #[test]
    fn torn_last_line_is_cut_off_on_open() {
        let d = tempfile::tempdir().unwrap();
        let run_dir = d.path().join("r1");
        std::fs::create_dir_all(&run_dir).unwrap();
        std::fs::write(run_dir.join("run.json"), "{}").unwrap();
        std::fs::write(run_dir.join("attempts.jsonl"), "{\"a\":1}\n{\"trunc").unwrap();
        let j = Journal {
            dir: run_dir.clone(),
        };
        let _ = Journal::open(d.path(), "r1"); // run.json is not a RunRecord; the cut still happens first
        let text = std::fs::read_to_string(j.attempts_path()).unwrap();
        assert_eq!(text, "{\"a\":1}\n");
    }

    #[test]
    fn atomic_write_replaces_whole_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert!(!p.with_extension("tmp").exists());
    }
}
