//! The emulated meter's trial: the server serves backlogs.
//!
//! A server that sleeps and wakes between arrivals measures the schedule,
//! not its code, and a rationed one (stopped and started by the CPU
//! controller while the generator ran beside it) did its work in a
//! different order in every trial: the same binary's trials spread 4% in
//! one guest. So each batch here is one backlog, served alone:
//!
//! 1. the server is stopped (SIGSTOP), and `backlog` clients connect and
//!    send their requests (a keep-alive contract's all at once, pipelined,
//!    then the client's shutdown when the client closes): the kernel completes the handshakes and queues
//!    the requests, so the server has work waiting for every connection;
//! 2. a window opens (a marker), the server is resumed, and ratchet only
//!    reads the server's CPU time, once a millisecond, until it stands
//!    still: the server is done, back in its wait; the window closes;
//! 3. every response is read and judged against the contract. A server
//!    that went still before it answered every client (one that naps) gets
//!    another window.
//!
//! The window's cost is the whole guest's instructions: the server's work
//! on its backlog, its kernel work and the clients' kernel work it caused
//! included, plus ratchet's reads (about 0.8% of the server's guest time,
//! so the same share of every arm). Not the server's vCPU alone: the
//! plugin was seen to count code both vCPUs run (the kernel's TCP paths,
//! the vDSO) on the vCPU that did not run it (docs/emulated-meter.md).

use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::bench::emulated::start::listening;
use crate::bench::host::trial::{BatchEvidence, Measurement, OutsideWindows, TrialSettings};
use crate::bench::load::contract::{Closer, Contract, Failure, FailureCounts};
use crate::bench::load::gate::{self, GateEvidence};
use crate::bench::meters::marker::{self, Mark};
use crate::bench::meters::meter::{MeterPlan, MeterReading};
use crate::bench::servers::launch::{RunningServer, ServerCommand, CLOSE_WAIT};

/// How a trial's batches are made (guest time throughout).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BatchSettings {
    /// Connections queued for the server before each batch.
    pub backlog: usize,
    /// Scored batches per trial.
    pub batches: usize,
    /// Unscored batches first: the server's own caches and pools fill.
    pub warmup_batches: usize,
    /// A batch not served by then is over; what is unanswered timed out.
    pub timeout: Duration,
}

/// The most CPU time a server may spend between its windows, as a share of
/// what it spent in them: taking its stop and continue signals costs an
/// honest server a little (0.07-0.08% measured for the treatment, 0.2-0.3%
/// for the Go control); work it defers until the window has closed (a
/// teardown, a busy loop, a timer that never lets it go still) would not be
/// counted, so past this the trial fails its gate as `deferred_work`.
const MAX_DEFERRED: f64 = 0.02;

/// How often the server's CPU time is read while it works.
const LOOK_EVERY: Duration = Duration::from_millis(1);
/// A window ends when the server's CPU time has stood still this long...
const SETTLED: Duration = Duration::from_millis(2);
/// ...or, looked at this often, once every client has been answered: a
/// look costs about 1% of a batch of the vanilla treatment, so an honest
/// server that goes still first never pays it.
const CLIENTS_EVERY: Duration = Duration::from_millis(10);

/// One batch's outcome.
#[derive(Default)]
struct Batch {
    attempts: u64,
    completed: u64,
    failures: FailureCounts,
    /// The markers around its windows, when scored.
    windows: Vec<[u64; 2]>,
    /// Every client connected (and so was queued) before the server ran.
    full_backlog: bool,
    /// Looks at which the server's CPU time stood still while it was
    /// runnable: preempted, so its window went on.
    preempted: u64,
    /// Its windows' guest time up to the server's going still...
    span: Duration,
    /// ...and the server's CPU time in them...
    busy: Duration,
    /// ...and in the whole windows (its going still included).
    in_windows: Duration,
    guest_time: Duration,
    /// Windows it took.
    opened: u64,
    /// The server's CPU time (ns) outside its windows, by where.
    outside: OutsideWindows,
}

/// The least share of a window (up to the server's going still) an honest
/// server spends on the CPU: 0.92-0.96 measured for the treatment, the
/// rest ratchet's reads. A server that naps while its backlog waits falls
/// far below it (0.14 for one that sleeps 5 ms every five connections).
const MIN_BUSY: f64 = 0.3;

/// Runs `server` for `b.warmup_batches + b.batches` batches and judges
/// every connection; the scored batches' markers are the trial's windows.
pub fn run_trial(
    server: &ServerCommand,
    plan: &MeterPlan,
    s: &TrialSettings,
    b: &BatchSettings,
) -> Result<Measurement> {
    let mut running = match listening(server, plan, s)? {
        Ok(r) => r,
        Err(failed) => return Ok(failed),
    };
    let mut batches = Vec::new();
    let mut m0 = None;
    let mut m1 = running.read()?;
    for i in 0..b.warmup_batches + b.batches {
        let scored = i >= b.warmup_batches;
        if scored && m0.is_none() {
            m0 = Some(m1);
        }
        let batch = serve(&mut running, &s.contract, b, scored)?;
        m1 = running.read()?;
        let failed = batch.completed < batch.attempts;
        batches.push((scored, batch));
        if failed || !running.alive() {
            break;
        }
    }
    let alive = running.alive();
    let held_connections = running.held_connections(CLOSE_WAIT);
    running.stop(s.stop_grace)?;
    Ok(measurement(
        &batches,
        m1.delta(&m0.unwrap_or(m1)),
        alive,
        held_connections,
        s,
        b.backlog,
    ))
}

fn measurement(
    batches: &[(bool, Batch)],
    meter: MeterReading,
    alive: bool,
    held_connections: u64,
    s: &TrialSettings,
    backlog: usize,
) -> Measurement {
    let mut evidence = GateEvidence {
        alive,
        off_core_ns: meter.off_core_ns,
        held_connections,
        ..Default::default()
    };
    let mut window_s = 0.0;
    let mut preempted = 0;
    let (mut span, mut busy, mut in_windows) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for (scored, b) in batches {
        evidence.attempts += b.attempts;
        evidence.completed += b.completed;
        for (sum, n) in evidence.failures.iter_mut().zip(b.failures) {
            *sum += n;
        }
        preempted += b.preempted;
        if *scored {
            evidence.window_completed += b.completed;
            window_s += b.guest_time.as_secs_f64();
            span += b.span;
            busy += b.busy;
            in_windows += b.in_windows;
        }
    }
    // The scored batches run back to back, so `meter` spans them all.
    let outside = Duration::from_nanos(meter.task_clock_ns).saturating_sub(in_windows);
    let batches_seen = batches
        .iter()
        .map(|(scored, b)| BatchEvidence {
            scored: *scored,
            attempts: b.attempts,
            completed: b.completed,
            windows: b.opened,
            busy_ns: b.busy.as_nanos() as u64,
            span_ns: b.span.as_nanos() as u64,
            preempted: b.preempted,
            outside: b.outside,
        })
        .collect();
    if outside.as_secs_f64() > MAX_DEFERRED * in_windows.as_secs_f64() {
        evidence.deferred_work_ns = outside.as_nanos() as u64;
    }
    let scored: Vec<&Batch> = batches.iter().filter(|(s, _)| *s).map(|(_, b)| b).collect();
    let completed = evidence.window_completed;
    let sut_busy = if span.is_zero() {
        0.0
    } else {
        busy.as_secs_f64() / span.as_secs_f64()
    };
    let per_conn = |x: u64| (completed > 0).then(|| x as f64 / completed as f64);
    let mut gate = gate::check(&evidence, &s.gate);
    gate.detail.extend(refused(&evidence, backlog));
    Measurement {
        gate,
        window_completed: completed,
        window_s,
        throughput_cps: if window_s > 0.0 {
            completed as f64 / window_s
        } else {
            0.0
        },
        context_switches_per_connection: per_conn(meter.context_switches),
        sut_busy,
        meter_delta: meter,
        saturated: Some(
            !scored.is_empty() && scored.iter().all(|b| b.full_backlog) && sut_busy >= MIN_BUSY,
        ),
        windows: scored
            .iter()
            .flat_map(|b| b.windows.iter().copied())
            .collect(),
        preempted_when_still: preempted,
        batches: batches_seen,
        between_windows_ns: Some(outside.as_nanos() as u64),
        ..Default::default()
    }
}

/// One batch: queue the backlog while the server is stopped, let it serve,
/// judge what it answered.
fn serve(
    running: &mut RunningServer,
    contract: &Contract,
    b: &BatchSettings,
    scored: bool,
) -> Result<Batch> {
    let mut batch = Batch::default();
    let entered = running.cpu_ns()?;
    running.pause(b.timeout)?;
    let stopped_at = running.cpu_ns()?;
    batch.outside.stopping = stopped_at.saturating_sub(entered);
    let addr = running.address();
    let requests = contract.pipelined();
    let mut clients = Vec::with_capacity(b.backlog);
    for _ in 0..b.backlog {
        batch.attempts += 1;
        match queue(&addr, &requests, contract.closer, b.timeout) {
            Ok(c) => clients.push(c),
            Err(f) => batch.failures[f.index()] += 1,
        }
    }
    batch.full_backlog = clients.len() == b.backlog;
    batch.outside.queueing = running.cpu_ns()?.saturating_sub(stopped_at);
    let deadline = Instant::now() + b.timeout;
    let mut stopped = true;
    let mut ended_at = None;
    // Windows until every client has seen its end: a server that goes
    // still before it has answered all (one that naps) gets another.
    loop {
        let begin = if scored {
            marker::mark(Mark::WindowBegin)
        } else {
            None
        };
        let t0 = Instant::now();
        let cpu0 = running.cpu_ns()?;
        if let Some(end) = ended_at {
            batch.outside.between += cpu0.saturating_sub(end);
        }
        if std::mem::take(&mut stopped) {
            running.resume();
        }
        let still = until_still(running, &clients, deadline, &mut batch.preempted)?;
        let cpu1 = running.cpu_ns()?;
        ended_at = Some(cpu1);
        let busy = cpu1.saturating_sub(cpu0);
        batch.in_windows += Duration::from_nanos(busy);
        let end = if scored {
            marker::mark(Mark::WindowEnd)
        } else {
            None
        };
        batch.guest_time += t0.elapsed();
        batch.span += t0.elapsed().saturating_sub(still);
        batch.busy += Duration::from_nanos(busy);
        batch.windows.extend(begin.zip(end).map(|(a, e)| [a, e]));
        batch.opened += 1;
        if all_ended(&clients) || Instant::now() >= deadline {
            break;
        }
    }
    for mut c in clients {
        match read_and_check(&mut c, contract) {
            Ok(()) => batch.completed += 1,
            Err(f) => batch.failures[f.index()] += 1,
        }
    }
    if let Some(end) = ended_at {
        batch.outside.judging = running.cpu_ns()?.saturating_sub(end);
    }
    Ok(batch)
}

/// Waits until the server's CPU time has stood still for [`SETTLED`] (it
/// is done with what it has, back in its wait), every client has seen its
/// end (a server that never stands still: one that polls on a timer), or
/// `deadline` passes, and returns how long it stood still. The server's
/// task clock is read once per [`LOOK_EVERY`], the clients' sockets only
/// once per [`CLIENTS_EVERY`]: every instruction ratchet executes here is in
/// the window's count.
fn until_still(
    running: &mut RunningServer,
    clients: &[TcpStream],
    deadline: Instant,
    preempted: &mut u64,
) -> Result<Duration> {
    let mut last = running.cpu_ns()?;
    let mut since = Instant::now();
    let mut clients_seen = Instant::now();
    loop {
        std::thread::sleep(LOOK_EVERY);
        let now = running.cpu_ns()?;
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= SETTLED {
            // Still, but runnable: preempted on its own vCPU (ksoftirqd
            // draining the receive work its answers queued there), not
            // done. Closing the window then left the rest of its batch
            // to run after it, an honest server's deferred_work.
            if !running.runnable() {
                return Ok(since.elapsed());
            }
            *preempted += 1;
            since = Instant::now();
        }
        if Instant::now() >= deadline {
            return Ok(since.elapsed());
        }
        if clients_seen.elapsed() >= CLIENTS_EVERY {
            if all_ended(clients) && !running.runnable() {
                return Ok(Duration::ZERO);
            }
            clients_seen = Instant::now();
        }
    }
}

/// Why connections were refused, where the batch itself is the likely
/// cause: the backlog is queued while the server is stopped, so a server
/// whose listen backlog is shorter refuses the rest, which no live client
/// would see. std's `TcpListener`, for one, listens with 128.
fn refused(evidence: &GateEvidence, backlog: usize) -> Option<String> {
    let refused = evidence.failures[Failure::Connect.index()];
    (refused > 0).then(|| {
        format!(
            "{refused} connections were refused while the server was stopped with {backlog} queued: \
             its listen backlog is likely shorter (std's TcpListener listens with 128); listen with a \
             longer one, or set emulator.backlog to at most its length"
        )
    })
}

/// A client that connected and sent its requests, all at once (and, when
/// the client closes, shut its side down after them); the server,
/// stopped, has seen none of it.
fn queue(
    addr: &SocketAddr,
    requests: &[u8],
    closer: Closer,
    timeout: Duration,
) -> Result<TcpStream, Failure> {
    let mut c = TcpStream::connect_timeout(addr, timeout).map_err(|_| Failure::Connect)?;
    c.write_all(requests).map_err(|_| Failure::Reset)?;
    if closer == Closer::Client {
        c.shutdown(std::net::Shutdown::Write)
            .map_err(|_| Failure::Reset)?;
    }
    c.set_nonblocking(true).map_err(|_| Failure::Connect)?;
    Ok(c)
}

/// Whether every client has seen its connection end (the server's FIN, a
/// reset or an error). A poll with no timeout registers no waiter, so the
/// server's vCPU wakes nobody when it answers.
fn all_ended(clients: &[TcpStream]) -> bool {
    let mut fds: Vec<libc::pollfd> = clients
        .iter()
        .map(|c| libc::pollfd {
            fd: c.as_raw_fd(),
            events: libc::POLLIN | libc::POLLRDHUP,
            revents: 0,
        })
        .collect();
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
    fds.iter()
        .all(|p| p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0)
}

/// Reads what the server sent (all of it has arrived: the connection
/// ended) and judges it.
fn read_and_check(c: &mut TcpStream, contract: &Contract) -> Result<(), Failure> {
    let mut head = Vec::with_capacity(contract.head_len());
    let mut total = 0;
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) => return contract.check(&head, total),
            Ok(n) => {
                let keep = n.min(contract.head_len().saturating_sub(head.len()));
                head.extend_from_slice(&buf[..keep]);
                total += n;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Err(Failure::Timeout),
            Err(_) => return Err(Failure::Reset),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_connections_point_at_the_listen_backlog() {
        let mut e = GateEvidence::default();
        assert_eq!(refused(&e, 256), None);
        e.failures[Failure::Connect.index()] = 254;
        let why = refused(&e, 256).unwrap();
        assert!(why.starts_with("254 connections were refused"), "{why}");
        assert!(why.contains("emulator.backlog"), "{why}");
    }
}
