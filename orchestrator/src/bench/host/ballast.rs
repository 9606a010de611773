//! The ballast: a spin loop at `SCHED_IDLE` on the SUT core while rationed
//! servers are measured, so the core never halts between their quotas.
//!
//! A busy server's core never idles. Rationed here, the arms together use
//! about a third of the SUT core and it halts in between; a vCPU that halts
//! pays on every wake-up, and that cost landed in the servers' counters:
//! with the ballast, one duet measured vanilla at 16.7 us per connection
//! against 21.9 us without it (docs/referee.md, "The saturated regime"). `SCHED_IDLE` runs only when
//! nothing else on the core can, so it takes no time a server wants; it
//! touches no memory, so it leaves the caches as it found them. It runs in
//! a cgroup of its own (killed with it) and its CPU time is read apart, so
//! the SUT core's unaccounted share still means what it says.

use anyhow::{Context, Result};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use crate::bench::servers::cgroup::{self, Cgroup};
use crate::bench::servers::placement;

pub struct Ballast {
    child: Child,
    cgroup: Cgroup,
}

/// CPU time of `ballast` so far in ns, 0 where there is none.
pub fn used_ns(ballast: &Option<Ballast>) -> u64 {
    ballast.as_ref().and_then(Ballast::usage_ns).unwrap_or(0)
}

impl Ballast {
    /// A ballast on `core` when `on`.
    pub fn start_if(on: bool, core: usize) -> Result<Option<Self>> {
        on.then(|| Self::start(core)).transpose()
    }

    fn start(core: usize) -> Result<Self> {
        let cgroup = Cgroup::create("ballast", Some(core), None)?;
        let join = cgroup.join_paths();
        let mut command = Command::new("/bin/sh");
        command
            .args(["-c", "while :; do :; done"])
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only async-signal-safe system calls between fork and exec.
        unsafe {
            command.pre_exec(move || {
                cgroup::join_from_child(&join)?;
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                placement::pin_to(core)?;
                let param = libc::sched_param { sched_priority: 0 };
                if libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .context("starting the ballast on the SUT core")?;
        Ok(Self { child, cgroup })
    }

    /// Its CPU time so far, in ns, where its cgroup accounts it.
    pub fn usage_ns(&self) -> Option<u64> {
        self.cgroup.usage_ns()
    }
}

impl Drop for Ballast {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Err(e) = self.cgroup.remove() {
            tracing::warn!("{e:#}");
        }
    }
}
