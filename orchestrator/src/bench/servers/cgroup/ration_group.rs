//! The ration group: one CPU quota that every arm of a measurement shares,
//! under cgroup2 `cpu.max` or v1 `cpu.cfs_quota_us`.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use super::{containment, remove_tree, write, SEQUENCE};

/// CPU bandwidth for one cgroup: at most `quota_us` of CPU time in every
/// `period_us` ([`crate::bench::host::ration`] sizes it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allotment {
    pub quota_us: u64,
    pub period_us: u64,
}

impl Allotment {
    /// The share of one CPU it allows.
    pub fn share(&self) -> f64 {
        self.quota_us as f64 / self.period_us.max(1) as f64
    }
}

/// A cgroup under bandwidth control whose member servers share one quota:
/// every arm of a measurement in it at once. The scheduler then shares the
/// quota between them by equal weight, interleaving them symmetrically; a
/// quota of each arm's own would give each a period timer of its own, and
/// the arm whose timer fires first in each period would always run first
/// (seen as a 1-2% bias in A/A comparisons).
#[derive(Debug)]
pub struct RationGroup {
    /// Its cgroup2 directory (where cgroup2 rations) and its v1 cpu one.
    pub(super) v2: Option<PathBuf>,
    pub(super) cpu_v1: Option<PathBuf>,
}

impl RationGroup {
    /// A group for `members` servers of `allotment` each; an error where
    /// the host has no cpu controller.
    pub fn create(allotment: Allotment, members: usize) -> Result<Self> {
        let c = containment();
        if let Some(why) = c.cannot_ration() {
            bail!("cannot ration the servers' CPU: {why}");
        }
        let name = format!(
            "{}-{}-ration",
            std::process::id(),
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        );
        let quota = allotment.quota_us * members.max(1) as u64;
        let period = allotment.period_us;
        let mut g = RationGroup {
            v2: None,
            cpu_v1: None,
        };
        if let (Some(p), true) = (&c.v2, c.v2_cpu) {
            let dir = p.join(&name);
            std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
            g.v2 = Some(dir.clone());
            if c.v2_cpuset {
                write(&dir.join("cgroup.subtree_control"), "+cpuset")?;
            }
            write(&dir.join("cpu.max"), &format!("{quota} {period}"))?;
        } else if let Some(p) = &c.cpu_v1 {
            let dir = p.join(&name);
            std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
            g.cpu_v1 = Some(dir.clone());
            // The period first: a quota above the old period is refused.
            write(&dir.join("cpu.cfs_period_us"), &period.to_string())?;
            write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
        }
        Ok(g)
    }

    pub(super) fn stat(&self) -> PathBuf {
        self.v2
            .as_ref()
            .or(self.cpu_v1.as_ref())
            .expect("a ration group has a directory")
            .join("cpu.stat")
    }
}

impl Drop for RationGroup {
    fn drop(&mut self) {
        for dir in self.v2.iter().chain(&self.cpu_v1) {
            remove_tree(dir);
        }
    }
}
