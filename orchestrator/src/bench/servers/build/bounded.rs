//! A build, or a command agent, run to an end: unprivileged, in a cgroup
//! and process group of its own, under a timeout, with nothing it started
//! left behind and its output kept with secrets redacted.

use anyhow::{Context, Result};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::view::BuildView;
use crate::bench::servers::cgroup::{self, Cgroup};
use crate::bench::servers::privilege;
use crate::bench::servers::secrets;

/// Runs `cmd` unprivileged ([`privilege`]), in a cgroup and process group
/// of its own; kills the cgroup
/// at `timeout`, and in any case when it ends, so nothing it started (a
/// backgrounded compiler, a daemon an agent left) outlives it. Returns the
/// exit status (None on timeout) and the combined output, secrets redacted.
pub fn run_bounded(
    cmd: Command,
    timeout: Duration,
) -> Result<(Option<std::process::ExitStatus>, String)> {
    run_bounded_in(cmd, timeout, None)
}

/// [`run_bounded`] in `view` of the filesystem, where there is one.
pub(super) fn run_bounded_in(
    mut cmd: Command,
    timeout: Duration,
    view: Option<Arc<BuildView>>,
) -> Result<(Option<std::process::ExitStatus>, String)> {
    let label = cmd.get_program().to_string_lossy().to_string();
    let mut cgroup = Cgroup::create(&label, None, None)?;
    let join = cgroup.join_paths();
    let mut log = tempfile::tempfile()?;
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log.try_clone()?)
        .process_group(0);
    // SAFETY: open, write, close and prctl are async-signal-safe. The child
    // dies with ratchet, so a SIGKILLed run leaves no agent editing its
    // worktree or build running.
    let privilege = privilege::privilege().clone();
    unsafe {
        cmd.pre_exec(move || {
            cgroup::join_from_child(&join)?;
            if let Some(view) = &view {
                view.enter()?;
            }
            privilege::drop_in_child(&privilege)?;
            // After the drop, which clears it (see bench/servers/launch.rs).
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd.spawn().with_context(|| format!("running {cmd:?}"))?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() > deadline {
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // Anything left (a backgrounded compiler, a daemon) goes too.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    cgroup
        .remove()
        .with_context(|| format!("{label} left processes behind"))?;
    let mut out = String::new();
    log.seek(SeekFrom::Start(0))?;
    log.read_to_string(&mut out).ok();
    Ok((status, secrets::redact(&out)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A build or agent that leaves a daemon in a session of its own (out
    /// of its process group) does not outlive its run: its cgroup goes.
    #[test]
    fn a_daemon_left_by_a_bounded_run_is_killed() {
        if cgroup::containment()
            .warning()
            .is_some_and(|w| w.contains("no usable cgroup"))
        {
            eprintln!("skipped: no cgroups on this host");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        if let Some(id) = privilege::privilege().identity() {
            privilege::give(d.path(), id).unwrap(); // the run writes its pid there
        }
        let pidfile = d.path().join("pid");
        let mut c = Command::new("sh");
        c.arg("-c").arg(format!(
            "setsid sh -c 'echo $$ > {}; exec sleep 30' & sleep 0.2; exit 0",
            pidfile.display()
        ));
        let (status, _) = run_bounded(c, Duration::from_secs(10)).unwrap();
        assert!(status.unwrap().success());
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
        assert!(
            stat.is_empty() || stat.contains(") Z"),
            "the daemon survived: {stat}"
        );
    }

    #[test]
    fn bounded_run_kills_the_whole_group_on_timeout() {
        let d = tempfile::tempdir().unwrap();
        let marker = d.path().join("survived");
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(format!("(sleep 1; touch {}) & sleep 30", marker.display()));
        let started = Instant::now();
        let (status, _) = run_bounded(c, Duration::from_millis(200)).unwrap();
        assert!(status.is_none());
        assert!(started.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(1300));
        assert!(!marker.exists(), "a child of the timed-out build survived");
    }
}
