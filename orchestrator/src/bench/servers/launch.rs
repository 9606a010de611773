//! Starting and stopping one server under test.
//!
//! The child is forked, put in its own process group, pinned to the SUT core,
//! and then waits on a pipe until the parent has opened the meter's counters
//! on it; only then does it exec. That way the counters (with `inherit`) cover
//! every thread and process the server will ever have, including the threads
//! a Go runtime starts before `main`.
//!
//! The child joins a cgroup of its own before anything else (see
//! [`crate::bench::servers::cgroup`]), so a grandchild that leaves the process group
//! still dies with the trial; it starts from a minimal environment in `/`,
//! so it sees no key and no path to the repository from its own state.

use anyhow::{bail, Context, Result};
use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::bench::meters::meter::{MeterPlan, MeterReading, ServerCounters};
use crate::bench::servers::cgroup::{self, Cgroup, RationGroup};
use crate::bench::servers::mappings;
use crate::bench::servers::placement;
use crate::bench::servers::privilege;
use crate::bench::servers::procfs::{self, Serves};
use crate::bench::servers::secrets;
use crate::bench::servers::target::{port_args, Family, TargetConfig};
use crate::bench::servers::uring;

/// How long a server may take to close what it still holds once every
/// client is done (a close under way); longer is deferred teardown.
pub const CLOSE_WAIT: Duration = Duration::from_millis(50);

/// A runnable server: ratchet appends its port arguments.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ServerCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// How it is told its port (`{port}` replaced), after `args`.
    #[serde(default = "default_port_args")]
    pub port_args: Vec<String>,
    /// The family its clients connect over.
    #[serde(default)]
    pub family: Family,
}

fn default_port_args() -> Vec<String> {
    TargetConfig::default().port_args
}

impl ServerCommand {
    /// `program` with `args`, told its port as `target` says and reached
    /// over its family.
    pub fn new(program: PathBuf, args: Vec<String>, target: &TargetConfig) -> Self {
        Self {
            program,
            args,
            env: vec![],
            port_args: target.port_args.clone(),
            family: target.family,
        }
    }

    /// Where its clients connect when it listens on `port`.
    pub fn address(&self, port: u16) -> SocketAddr {
        self.family.address(port)
    }
}

pub struct RunningServer {
    child: Child,
    pub pid: i32,
    pub port: u16,
    family: Family,
    counters: ServerCounters,
    cgroup: Cgroup,
    stderr: File,
    exited: bool,
    /// Sockets the server held once it listened, before any load: its
    /// listeners. Any other socket it holds is a connection.
    listeners: HashSet<u64>,
}

fn pipe() -> Result<(i32, i32)> {
    let mut fds = [0; 2];
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe2");
    }
    Ok((fds[0], fds[1]))
}

fn close(fd: i32) {
    unsafe { libc::close(fd) };
}

/// Waits up to `timeout` for `fd` to become readable.
fn wait_readable(fd: i32, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) == 1 }
}

/// The server's command: its arguments and port, its own environment over
/// a minimal one, its stderr kept.
fn command(server: &ServerCommand, port: u16, stderr: &std::fs::File) -> Result<Command> {
    let mut command = Command::new(&server.program);
    secrets::minimal_env(&mut command);
    command
        .current_dir("/")
        .args(&server.args)
        .args(port_args(&server.port_args, port))
        .envs(server.env.iter().cloned())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr.try_clone()?);
    Ok(command)
}

/// A helper thread that reads the child's pid from `pid_r`, opens its
/// counters, and only then lets it exec (a byte on `go_w`): the counters
/// see the server from its first instruction.
fn arm_counters(
    pid_r: i32,
    go_w: i32,
    plan: MeterPlan,
) -> std::thread::JoinHandle<Result<(i32, ServerCounters)>> {
    std::thread::spawn(move || {
        let armed = (|| -> Result<(i32, ServerCounters)> {
            if !wait_readable(pid_r, Duration::from_secs(10)) {
                bail!("the server process did not report its pid");
            }
            let mut buf = [0u8; 4];
            if unsafe { libc::read(pid_r, buf.as_mut_ptr() as *mut libc::c_void, 4) } != 4 {
                bail!("the server process exited before exec");
            }
            let pid = i32::from_ne_bytes(buf);
            Ok((pid, ServerCounters::open(&plan, pid)?))
        })();
        if armed.is_ok() {
            unsafe { libc::write(go_w, b"g".as_ptr() as *const libc::c_void, 1) };
        }
        close(go_w);
        armed
    })
}

/// Why a server did not start, saying as whom where permission was denied.
fn not_started(server: &ServerCommand, e: std::io::Error) -> anyhow::Error {
    let who = match privilege::privilege().identity() {
        Some(id) if e.kind() == std::io::ErrorKind::PermissionDenied => format!(
            " as {} (uid {}): the program and every directory above it must be readable and searchable by that user",
            id.name, id.uid
        ),
        _ => String::new(),
    };
    anyhow::Error::new(e).context(format!("starting {}{who}", server.program.display()))
}

impl RunningServer {
    /// Starts `server` on `port`, metered by `plan`; with `ration`, it
    /// shares that group's CPU allotment (the saturated regime).
    pub fn start(
        server: &ServerCommand,
        port: u16,
        plan: &MeterPlan,
        ration: Option<&RationGroup>,
    ) -> Result<Self> {
        if !server.program.is_file() {
            bail!("server program {} does not exist", server.program.display());
        }
        let stderr = tempfile::tempfile().context("creating the server's stderr file")?;
        let (pid_r, pid_w) = pipe()?;
        let (go_r, go_w) = pipe()?;
        let core = plan.sut_core;
        let label = server
            .program
            .file_name()
            .map_or("server".into(), |n| n.to_string_lossy().to_string());
        let cgroup = Cgroup::create(&label, Some(core), ration)?;
        let join = cgroup.join_paths();
        let slice_ns = ration.map(|_| placement::SHARED_SLICE_NS);
        let privilege = privilege::privilege().clone();
        let mut command = command(server, port, &stderr)?;
        // SAFETY: only async-signal-safe system calls run between fork and exec.
        unsafe {
            command.pre_exec(move || {
                cgroup::join_from_child(&join)?;
                libc::close(pid_r);
                libc::close(go_w);
                if libc::setpgid(0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                placement::pin_to(core)?;
                if let Some(ns) = slice_ns {
                    placement::set_slice(ns);
                }
                // Last: joining the cgroup and the pinning need root.
                privilege::drop_in_child(&privilege)?;
                // After the drop, which clears it (a change of effective
                // uid does): set before, a SIGKILLed ratchet left its
                // servers running.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                let pid = libc::getpid();
                libc::write(pid_w, &pid as *const i32 as *const libc::c_void, 4);
                let mut go = 0u8;
                if libc::read(go_r, &mut go as *mut u8 as *mut libc::c_void, 1) != 1 {
                    return Err(std::io::Error::from_raw_os_error(libc::ECANCELED));
                }
                Ok(())
            });
        }
        // The calling thread forks (so PR_SET_PDEATHSIG ties the server's life
        // to it); a helper thread arms the counters while the child waits.
        let helper = arm_counters(pid_r, go_w, plan.clone());
        let spawned = command.spawn();
        if spawned.is_err() {
            // The child never ran: wake the helper up so it can give up.
            close(pid_w);
        }
        let armed = helper.join().expect("counter helper thread panicked");
        close(pid_r);
        if spawned.is_ok() {
            close(pid_w);
        }
        close(go_r);
        match (armed, spawned) {
            (Ok((pid, counters)), Ok(child)) => Ok(Self {
                child,
                pid,
                port,
                family: server.family,
                counters,
                cgroup,
                stderr,
                exited: false,
                listeners: HashSet::new(),
            }),
            (Err(e), Ok(mut child)) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
            (_, Err(e)) => Err(not_started(server, e)),
        }
    }

    /// Waits until a process of the server's own group listens on its port.
    /// A server that exits, or never listens, is an error carrying its stderr.
    pub fn wait_listening(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let port = self.port;
        loop {
            if !self.alive() {
                bail!(
                    "server exited before listening on port {}; its stderr:\n{}",
                    port,
                    self.stderr_tail()
                );
            }
            if let Some(serves) = procfs::group_listens_on(self.pid, self.port, self.family) {
                // Its sockets once it listens and before any client: its listeners.
                let held = self.sockets();
                if serves == Serves::Directly || self.takes_ipv4() {
                    self.listeners = held;
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "server did not listen on {} within {} ms (a listener of another family, or \
                     on another address, does not count); its stderr:\n{}",
                    procfs::expected_listeners(self.family, port),
                    timeout.as_millis(),
                    self.stderr_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether an IPv4 client gets through to a server listening on IPv6's
    /// wildcard: only without `IPV6_V6ONLY`, which /proc does not show. The
    /// one connection is closed at once, before any measurement.
    fn takes_ipv4(&self) -> bool {
        std::net::TcpStream::connect_timeout(&self.address(), Duration::from_millis(200)).is_ok()
    }

    /// Where its clients connect.
    pub fn address(&self) -> SocketAddr {
        self.family.address(self.port)
    }

    /// False once the server's main process has exited.
    pub fn alive(&mut self) -> bool {
        if !self.exited {
            self.exited = !matches!(self.child.try_wait(), Ok(None));
        }
        !self.exited
    }

    /// Stops every process of the server (SIGSTOP) and waits up to `timeout`
    /// until each thread has stopped: the kernel still completes handshakes
    /// and queues requests for it, so it finds them waiting when resumed.
    pub fn pause(&self, timeout: Duration) -> Result<()> {
        let pids = self.pids();
        for &pid in &pids {
            unsafe { libc::kill(pid, libc::SIGSTOP) };
        }
        let deadline = Instant::now() + timeout;
        while !pids.iter().all(|&p| procfs::all_threads_stopped(p)) {
            if Instant::now() > deadline {
                bail!("the server did not stop within {timeout:?} of SIGSTOP");
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&self) {
        for pid in self.pids() {
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    }

    /// Whether some thread of the server is runnable (state `R` in
    /// `/proc`): running, or ready to run while something else holds its
    /// CPU. A server whose CPU time stands still while it is runnable has
    /// not finished; it has been preempted (by ksoftirqd on its own CPU,
    /// say).
    pub fn runnable(&self) -> bool {
        self.pids().into_iter().any(procfs::any_thread_runnable)
    }

    /// The completions its io_uring instances have posted (None: it holds
    /// none).
    pub fn uring_completions(&self) -> Option<u64> {
        uring::completions(&self.pids())
    }

    /// The executable file mappings of every process of the server.
    pub fn executable_mappings(&self) -> Vec<mappings::Mapping> {
        let mut maps: Vec<mappings::Mapping> = self
            .pids()
            .into_iter()
            .flat_map(mappings::executable_mappings)
            .collect();
        maps.sort_by_key(|m| (m.start, m.end));
        maps.dedup();
        maps
    }

    /// Every process of the server: its cgroup's, or where there is no
    /// cgroup, its process group's.
    fn pids(&self) -> Vec<i32> {
        let pids = self.cgroup.pids();
        if pids.is_empty() {
            procfs::group_members(self.pid)
        } else {
            pids
        }
    }

    /// Every process of the server, for what /proc says of each.
    pub fn processes(&self) -> Vec<i32> {
        self.pids()
    }

    /// The sockets it holds now, its listeners apart.
    pub fn connection_sockets(&self) -> u64 {
        self.sockets().difference(&self.listeners).count() as u64
    }

    fn sockets(&self) -> HashSet<u64> {
        self.pids()
            .into_iter()
            .flat_map(procfs::held_sockets)
            .collect()
    }

    /// Connections the server still holds open, waiting up to `timeout` for
    /// them to close. Called when every client is done: an honest server
    /// has closed all of them (a close in flight lands within the wait), so
    /// what is left is teardown deferred past the window's end.
    pub fn held_connections(&self, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        loop {
            let held = self.connection_sockets();
            if held == 0 || Instant::now() >= deadline {
                return held;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The server's CPU time (task-clock, ns) alone: one read, for a
    /// caller that looks often.
    pub fn cpu_ns(&mut self) -> Result<u64> {
        self.counters.task_clock_ns()
    }

    /// Every counter, and the cgroup's CPU time, read back to back.
    pub fn read(&mut self) -> Result<MeterReading> {
        let mut r = self.counters.read()?;
        r.cgroup_ns = self.cgroup.usage_ns();
        r.throttling = self.cgroup.throttling();
        Ok(r)
    }

    /// The last 2 KiB of what the server wrote to stderr, every secret's
    /// value redacted (it flows into gate details, the journal and prompts).
    pub fn stderr_tail(&mut self) -> String {
        let mut text = String::new();
        let len = self.stderr.seek(SeekFrom::End(0)).unwrap_or(0);
        let _ = self.stderr.seek(SeekFrom::Start(len.saturating_sub(2048)));
        let _ = self.stderr.read_to_string(&mut text);
        if text.trim().is_empty() {
            "(empty)".into()
        } else {
            secrets::redact(&text)
        }
    }

    /// SIGTERM to everything in the server's cgroup, SIGKILL after `grace`,
    /// then the whole cgroup is killed and must be empty: nothing it forked
    /// outlives the trial. An error names what escaped.
    pub fn stop(&mut self, grace: Duration) -> Result<()> {
        let pgid = self.pid;
        unsafe { libc::kill(-pgid, libc::SIGTERM) };
        self.cgroup.signal(libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while self.alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.child.wait();
        self.exited = true;
        self.cgroup
            .remove()
            .context("the server left processes behind that survive SIGKILL")
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        unsafe { libc::kill(-self.pid, libc::SIGKILL) };
        let _ = self.child.wait();
        if let Err(e) = self.cgroup.remove() {
            tracing::warn!("{e:#}");
        }
    }
}
