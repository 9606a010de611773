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

/// The cgroup hierarchies ratchet can use on this host, decided once.
#[derive(Clone, Debug, Default)]
pub struct Containment {
    /// `ratchet/` in the cgroup2 hierarchy.
    v2: Option<PathBuf>,
    /// Whether the cgroup2 `ratchet/` delegates the cpuset controller.
    v2_cpuset: bool,
    /// `ratchet/` in the v1 cpuset hierarchy.
    cpuset_v1: Option<PathBuf>,
    /// `ratchet/` in the v1 cpuacct hierarchy.
    cpuacct_v1: Option<PathBuf>,
    /// What was found, for `doctor` and every result.
    pub description: String,
}

/// The mount points of cgroup2 and of the v1 hierarchies, from `/proc/mounts`.
fn mounts() -> (Option<PathBuf>, Vec<(PathBuf, String)>) {
    let text = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut v2 = None;
    let mut v1 = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        match f[2] {
            "cgroup2" => v2 = v2.or(Some(PathBuf::from(f[1]))),
            "cgroup" => v1.push((PathBuf::from(f[1]), f[3].to_string())),
            _ => {}
        }
    }
    (v2, v1)
}

fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).with_context(|| format!("writing {value:?} to {}", path.display()))
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// Creates `<mount>/ratchet`, or says why not.
fn parent_in(mount: &Path) -> Result<PathBuf> {
    let dir = mount.join("ratchet");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    if !dir.join("cgroup.procs").exists() {
        bail!("{} is not a cgroup", dir.display());
    }
    Ok(dir)
}

/// A v1 cpuset cgroup accepts tasks only once its cpus and mems are set.
fn inherit_cpuset(dir: &Path, from: &Path) -> Result<()> {
    for file in ["cpuset.cpus", "cpuset.mems"] {
        if read(&dir.join(file))?.trim().is_empty() {
            write(&dir.join(file), read(&from.join(file))?.trim())?;
        }
    }
    Ok(())
}

/// This host's containment, detected on first use.
pub fn containment() -> &'static Containment {
    static C: std::sync::OnceLock<Containment> = std::sync::OnceLock::new();
    C.get_or_init(Containment::detect)
}

impl Containment {
    fn detect() -> Self {
        let mut c = Containment::default();
        if std::env::var("RATCHET_CGROUPS").is_ok_and(|v| v == "off") {
            c.description = "no usable cgroup hierarchy (disabled by RATCHET_CGROUPS=off)".into();
            return c;
        }
        let (v2_mount, v1) = mounts();
        let mut found = Vec::new();
        let mut missing = Vec::new();
        if let Some(m) = &v2_mount {
            match parent_in(m) {
                Ok(dir) => {
                    // The cpuset controller is usable only when every level
                    // above delegates it; on a hybrid host there is none.
                    let delegated = read(&m.join("cgroup.controllers"))
                        .map(|s| s.split_whitespace().any(|c| c == "cpuset"))
                        .unwrap_or(false)
                        && write(&m.join("cgroup.subtree_control"), "+cpuset").is_ok()
                        && write(&dir.join("cgroup.subtree_control"), "+cpuset").is_ok();
                    c.v2_cpuset = delegated;
                    found.push(format!(
                        "cgroup2 at {}{}",
                        m.display(),
                        if delegated { " with cpuset" } else { "" }
                    ));
                    c.v2 = Some(dir);
                }
                Err(e) => missing.push(format!("cgroup2 at {}: {e:#}", m.display())),
            }
        }
        for (mount, options) in &v1 {
            let has = |name: &str| options.split(',').any(|o| o == name);
            if has("cpuset") && !c.v2_cpuset && c.cpuset_v1.is_none() {
                match parent_in(mount).and_then(|d| inherit_cpuset(&d, mount).map(|_| d)) {
                    Ok(d) => {
                        found.push(format!("cpuset v1 at {}", mount.display()));
                        c.cpuset_v1 = Some(d);
                    }
                    Err(e) => missing.push(format!("cpuset v1: {e:#}")),
                }
            }
            if has("cpuacct") && c.cpuacct_v1.is_none() {
                match parent_in(mount) {
                    Ok(d) => {
                        found.push(format!("cpuacct v1 at {}", mount.display()));
                        c.cpuacct_v1 = Some(d);
                    }
                    Err(e) => missing.push(format!("cpuacct v1: {e:#}")),
                }
            }
        }
        c.description = if found.is_empty() {
            format!(
                "no usable cgroup hierarchy ({}): only the process group contains a server",
                if missing.is_empty() {
                    "none mounted".to_string()
                } else {
                    missing.join("; ")
                }
            )
        } else {
            found.join(", ")
        };
        c
    }

    /// The warning every result carries when something cannot be contained:
    /// a server could leave a process behind, or move off its core.
    pub fn warning(&self) -> Option<String> {
        if self.v2.is_none() && self.cpuset_v1.is_none() && self.cpuacct_v1.is_none() {
            Some(format!(
                "{}; a process that leaves its process group escapes the trial",
                self.description
            ))
        } else if !self.v2_cpuset && self.cpuset_v1.is_none() {
            Some(format!(
                "{}; no cpuset confines servers to the SUT core (only affinity and the off-core check do)",
                self.description
            ))
        } else {
            None
        }
    }

    /// True where a cpuset will confine a server to its core.
    pub fn confines_cpu(&self) -> bool {
        self.v2_cpuset || self.cpuset_v1.is_some()
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
}

#[derive(Debug)]
enum Usage {
    CpuacctNs(PathBuf),
    CpuStatUs(PathBuf),
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

impl Cgroup {
    /// A fresh cgroup named after `label`; with `cpu`, a cpuset confines it
    /// to that CPU where the host allows.
    pub fn create(label: &str, cpu: Option<usize>) -> Result<Self> {
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
        if let Some(p) = &c.v2 {
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
        let mut g = Cgroup::create("test", None).unwrap();
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
