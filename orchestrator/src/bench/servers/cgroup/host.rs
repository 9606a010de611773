//! Which cgroup hierarchies this host offers ratchet, found once from
//! `/proc/mounts`: cgroup2 with or without delegated controllers, the v1
//! hierarchies of a hybrid host, or none, said plainly.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

use super::{read, remove_tree, write};

/// The cgroup hierarchies ratchet can use on this host, decided once.
#[derive(Clone, Debug, Default)]
pub struct Containment {
    /// `ratchet/` in the cgroup2 hierarchy.
    pub(super) v2: Option<PathBuf>,
    /// Whether the cgroup2 `ratchet/` delegates the cpuset controller.
    pub(super) v2_cpuset: bool,
    /// `ratchet/` in the v1 cpuset hierarchy.
    pub(super) cpuset_v1: Option<PathBuf>,
    /// `ratchet/` in the v1 cpuacct hierarchy.
    pub(super) cpuacct_v1: Option<PathBuf>,
    /// Whether the cgroup2 `ratchet/` delegates the cpu controller
    /// (`cpu.max`, bandwidth control).
    pub(super) v2_cpu: bool,
    /// `ratchet/` in the v1 cpu hierarchy (`cpu.cfs_quota_us`).
    pub(super) cpu_v1: Option<PathBuf>,
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

/// Creates `<mount>/ratchet`, or says why not.
fn parent_in(mount: &Path) -> Result<PathBuf> {
    let dir = mount.join("ratchet");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    if !dir.join("cgroup.procs").exists() {
        bail!("{} is not a cgroup", dir.display());
    }
    Ok(dir)
}

/// Whether cgroup2 controller `name` is usable under `dir`: only when every
/// level above delegates it (on a hybrid host there is none).
fn delegate(mount: &Path, dir: &Path, name: &str) -> bool {
    read(&mount.join("cgroup.controllers"))
        .map(|s| s.split_whitespace().any(|c| c == name))
        .unwrap_or(false)
        && write(&mount.join("cgroup.subtree_control"), &format!("+{name}")).is_ok()
        && write(&dir.join("cgroup.subtree_control"), &format!("+{name}")).is_ok()
}

/// Removes the cgroups a ratchet that died (SIGKILL: no destructor ran) left
/// under `parent`: their names start with its pid. Whatever is still in one
/// is killed first; a live ratchet's cgroups are left alone.
fn sweep_dead(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) = name.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if pid == std::process::id() as i32 || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        remove_tree(&e.path());
    }
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
                    sweep_dead(&dir);
                    c.v2_cpuset = delegate(m, &dir, "cpuset");
                    c.v2_cpu = delegate(m, &dir, "cpu");
                    let with: Vec<&str> = [(c.v2_cpuset, "cpuset"), (c.v2_cpu, "cpu")]
                        .iter()
                        .filter_map(|&(on, n)| on.then_some(n))
                        .collect();
                    found.push(format!(
                        "cgroup2 at {}{}",
                        m.display(),
                        if with.is_empty() {
                            String::new()
                        } else {
                            format!(" with {}", with.join(" and "))
                        }
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
                        sweep_dead(&d);
                        found.push(format!("cpuset v1 at {}", mount.display()));
                        c.cpuset_v1 = Some(d);
                    }
                    Err(e) => missing.push(format!("cpuset v1: {e:#}")),
                }
            }
            if has("cpu") && !c.v2_cpu && c.cpu_v1.is_none() {
                match parent_in(mount) {
                    Ok(d) => {
                        sweep_dead(&d);
                        found.push(format!("cpu v1 at {}", mount.display()));
                        c.cpu_v1 = Some(d);
                    }
                    Err(e) => missing.push(format!("cpu v1: {e:#}")),
                }
            }
            if has("cpuacct") && c.cpuacct_v1.is_none() {
                match parent_in(mount) {
                    Ok(d) => {
                        sweep_dead(&d);
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

    /// Why a server's CPU cannot be rationed here (no cpu controller in
    /// either hierarchy), or None where it can.
    pub fn cannot_ration(&self) -> Option<String> {
        if self.v2_cpu || self.cpu_v1.is_some() {
            None
        } else {
            Some(format!(
                "no cpu controller (neither cgroup2 cpu.max nor v1 cpu.cfs_quota_us) under {}",
                self.description
            ))
        }
    }
}
