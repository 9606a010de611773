//! Containment: every server, build and command agent runs in a cgroup of its
//! own, so whatever it forks (a daemon that calls `setsid`, a grandchild that
//! reparents to init) is still in it, and the trial or build ends by killing
//! the whole cgroup and checking that it is empty. A process group or a
//! parent-death signal reaches neither.
//!
//! Hosts differ. A pure cgroup2 host (most current distributions) gives one
//! hierarchy with `cgroup.kill`, `cpu.stat` and, when the root delegates it,
//! the `cpuset` controller. A hybrid host mounts cgroup2 at
//! `/sys/fs/cgroup/unified` without controllers (its `cgroup.procs` and
//! `cgroup.kill` still contain processes) and `cpuset`/`cpuacct` as v1. Both
//! are detected at run time from `/proc/mounts`; where neither works, the
//! [`Containment`] says so and every result carries the warning.

use anyhow::{bail, Context, Result};
use std::ffi::CString;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::bench::meters::meter::Throttling;

mod host;
mod ration_group;
pub use host::{containment, Containment};
pub use ration_group::{Allotment, RationGroup};

fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).with_context(|| format!("writing {value:?} to {}", path.display()))
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// Kills what is in `dir` and in every cgroup below it, and removes them,
/// the deepest first (a cgroup with children cannot be removed).
fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    for line in read(&dir.join("cgroup.procs")).unwrap_or_default().lines() {
        if let Ok(p) = line.trim().parse::<i32>() {
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    while std::fs::remove_dir(dir).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One process tree's cgroup (one per hierarchy in use). Dropping it kills
/// what is left in it and removes it.
#[derive(Debug)]
pub struct Cgroup {
    /// Leaf directories, the one to kill and list first.
    dirs: Vec<PathBuf>,
    /// The `cgroup.procs` files a child joins before it execs.
    procs: Vec<CString>,
    /// Where CPU use is read: v1 cpuacct (ns) or cgroup2 `cpu.stat` (µs).
    usage: Option<Usage>,
    kill_file: Option<PathBuf>,
    /// The `cpu.stat` that counts bandwidth periods, where rationed.
    throttle_stat: Option<PathBuf>,
}

#[derive(Debug)]
enum Usage {
    CpuacctNs(PathBuf),
    CpuStatUs(PathBuf),
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

impl Cgroup {
    /// A fresh cgroup named after `label`; with `cpu`, a cpuset confines it
    /// to that CPU where the host allows; with `ration`, it is a member of
    /// that group and shares its CPU allotment.
    pub fn create(label: &str, cpu: Option<usize>, ration: Option<&RationGroup>) -> Result<Self> {
        let c = containment();
        let name = format!(
            "{}-{}-{}",
            std::process::id(),
            SEQUENCE.fetch_add(1, Ordering::Relaxed),
            label
                .chars()
                .map(|ch| if ch.is_ascii_alphanumeric() { ch } else { '_' })
                .take(24)
                .collect::<String>()
        );
        let mut g = Cgroup {
            dirs: Vec::new(),
            procs: Vec::new(),
            usage: None,
            kill_file: None,
            throttle_stat: None,
        };

        let mut make = |parent: &Path| -> Result<PathBuf> {
            let dir = parent.join(&name);
            std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
            g.dirs.push(dir.clone());
            g.procs.push(CString::new(
                dir.join("cgroup.procs").as_os_str().as_encoded_bytes(),
            )?);
            Ok(dir)
        };
        if let Some(p) = ration.and_then(|r| r.v2.as_ref()).or(c.v2.as_ref()) {
            let dir = make(p)?;
            if let (true, Some(cpu)) = (c.v2_cpuset, cpu) {
                write(&dir.join("cpuset.cpus"), &cpu.to_string())?;
            }
            if dir.join("cgroup.kill").exists() {
                g.kill_file = Some(dir.join("cgroup.kill"));
            }
            g.usage = Some(Usage::CpuStatUs(dir.join("cpu.stat")));
        }
        if let (Some(p), Some(cpu)) = (&c.cpuset_v1, cpu) {
            let dir = make(p)?;
            write(
                &dir.join("cpuset.mems"),
                read(&p.join("cpuset.mems"))?.trim(),
            )?;
            write(&dir.join("cpuset.cpus"), &cpu.to_string())?;
        }
        if let Some(p) = &c.cpuacct_v1 {
            let dir = make(p)?;
            g.usage = Some(Usage::CpuacctNs(dir.join("cpuacct.usage")));
        }
        // In v1 every member joins the group itself: its tasks then compete
        // as tasks, at the slice they ask for, not as group entities.
        if let Some(p) = ration.and_then(|r| r.cpu_v1.as_ref()) {
            g.procs.push(CString::new(
                p.join("cgroup.procs").as_os_str().as_encoded_bytes(),
            )?);
        }
        g.throttle_stat = ration.map(RationGroup::stat);
        Ok(g)
    }

    /// The `cgroup.procs` paths a child writes "0" to (itself) between fork
    /// and exec, so it is contained before it can fork.
    pub fn join_paths(&self) -> Vec<CString> {
        self.procs.clone()
    }

    /// CPU time used by everything that ever ran in the cgroup, in ns (read
    /// at µs resolution on cgroup2), or None where no hierarchy accounts it.
    pub fn usage_ns(&self) -> Option<u64> {
        match self.usage.as_ref()? {
            Usage::CpuacctNs(p) => read(p).ok()?.trim().parse().ok(),
            Usage::CpuStatUs(p) => read(p)
                .ok()?
                .lines()
                .find_map(|l| l.strip_prefix("usage_usec "))?
                .trim()
                .parse::<u64>()
                .ok()
                .map(|us| us * 1000),
        }
    }

    /// The bandwidth periods so far, where the cgroup is rationed.
    pub fn throttling(&self) -> Option<Throttling> {
        let text = read(self.throttle_stat.as_ref()?).ok()?;
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
        };
        Some(Throttling {
            periods: field("nr_periods ")?,
            throttled: field("nr_throttled ")?,
        })
    }

    /// Every process now in the cgroup.
    pub fn pids(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .dirs
            .iter()
            .flat_map(|d| {
                read(&d.join("cgroup.procs"))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Sends `signal` to every process in the cgroup.
    pub fn signal(&self, signal: i32) {
        for pid in self.pids() {
            unsafe { libc::kill(pid, signal) };
        }
    }

    /// Kills everything in the cgroup and waits until it is empty. An error
    /// names what is still there: something escaped containment.
    pub fn kill(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            if let Some(k) = &self.kill_file {
                let _ = std::fs::write(k, "1");
            }
            // Without cgroup.kill (v1 only, or an old kernel), a loop of
            // SIGKILLs catches what forks while it runs.
            self.signal(libc::SIGKILL);
            let left = self.pids();
            if left.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "processes {left:?} are still in cgroup {} after SIGKILL",
                    self.dirs[0].display()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills what is left and removes the cgroup's directories.
    pub fn remove(&mut self) -> Result<()> {
        if self.dirs.is_empty() {
            return Ok(());
        }
        self.kill()?;
        for dir in self.dirs.drain(..) {
            // A killed task leaves its cgroup a moment after it is reaped.
            let deadline = Instant::now() + Duration::from_secs(2);
            while std::fs::remove_dir(&dir).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(())
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            tracing::warn!("{e:#}");
        }
    }
}

/// Joins every cgroup of `paths` from between fork and exec: only open,
/// write and close, which are async-signal-safe.
///
/// # Safety
/// Call only in a `pre_exec` closure.
pub unsafe fn join_from_child(paths: &[CString]) -> std::io::Result<()> {
    for p in paths {
        let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let ok = libc::write(fd, b"0".as_ptr() as *const libc::c_void, 1) == 1;
        libc::close(fd);
        if !ok {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    /// A daemon that leaves its process group and session is still killed
    /// with its cgroup.
    #[test]
    fn a_setsid_grandchild_dies_with_its_cgroup() {
        let c = containment();
        if c.warning().is_some_and(|w| w.contains("no usable cgroup")) {
            eprintln!("skipped: {}", c.description);
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let pidfile = d.path().join("pid");
        let mut g = Cgroup::create("test", None, None).unwrap();
        let paths = g.join_paths();
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!(
            "setsid sh -c 'echo $$ > {}; exec sleep 30' & exit 0",
            pidfile.display()
        ));
        unsafe { cmd.pre_exec(move || join_from_child(&paths)) };
        assert!(cmd.status().unwrap().success());
        let start = Instant::now();
        while !pidfile.exists() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(Path::new(&format!("/proc/{pid}")).exists());
        assert_eq!(g.pids(), vec![pid]);
        g.remove().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            state.is_empty() || state.contains(") Z"),
            "the grandchild survived: {state}"
        );
    }
}
