//! The load generator: a closed loop holding a fixed number of short-lived
//! connections in flight, on every core but the SUT core. Every connection is
//! judged in full against the contract (each response of a keep-alive
//! connection as it arrives, then its close); its outcome lands in counters that the
//! trial snapshots at the same instants as the CPU counters, so cost per
//! connection divides two numbers taken over the same window.
//!
//! It can hold several targets (the arms of a duet): every new connection
//! goes to the target that is active when it starts, and its outcome is
//! counted for that target, so the load can be moved between live servers in
//! short slices while each server's connections stay its own.

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

use crate::bench::load::contract::{Closer, Contract, Failure, FailureCounts};

#[derive(Clone, Debug)]
pub struct LoadSpec {
    /// One server per arm; new connections go to the active one.
    pub targets: Vec<SocketAddr>,
    /// Clients in all, each holding one connection at a time.
    pub connections: usize,
    pub timeout: Duration,
    pub cores: Vec<usize>,
    pub contract: Arc<Contract>,
}

impl LoadSpec {
    /// The spec with clients for `live` of its targets only: the clients of
    /// a server that is not there would crowd the others'.
    pub fn for_live(mut self, live: usize) -> Self {
        let per_target = self.connections / self.targets.len().max(1);
        self.connections = per_target * live.max(1);
        self
    }
}

/// The generator's counters at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadSnapshot {
    pub attempts: u64,
    pub completed: u64,
    pub failures: FailureCounts,
}

impl LoadSnapshot {
    pub fn delta(&self, earlier: &LoadSnapshot) -> LoadSnapshot {
        let mut failures: FailureCounts = [0; Failure::COUNT];
        for (i, f) in failures.iter_mut().enumerate() {
            *f = self.failures[i] - earlier.failures[i];
        }
        LoadSnapshot {
            attempts: self.attempts - earlier.attempts,
            completed: self.completed - earlier.completed,
            failures,
        }
    }
}

#[derive(Default)]
struct Counters {
    attempts: AtomicU64,
    completed: AtomicU64,
    failures: [AtomicU64; Failure::COUNT],
}

struct Shared {
    spec: LoadSpec,
    /// Per target.
    counters: Vec<Counters>,
    /// Connections under way, per target: those still open at the drain
    /// deadline are that target's timeouts.
    in_flight: Vec<AtomicU64>,
    active: AtomicUsize,
    /// Targets that may take load (a server that failed to start is not).
    live: Vec<AtomicBool>,
    /// Set while a window boundary is read: no client starts a connection.
    paused: AtomicBool,
    /// Clients past the pause check: counted before the check, so a pause
    /// never misses a connection about to start.
    open: AtomicU64,
    resumed: tokio::sync::Notify,
    stop: AtomicBool,
    measuring: AtomicBool,
    next_source: AtomicU32,
}

/// Client source addresses rotate over 127.1.0.1 - 127.1.255.254: with the
/// server closing first, TIME_WAIT lands on the server, and spreading the
/// 4-tuples keeps new connections from colliding with old ones.
const SOURCE_ADDRESSES: u32 = 65_534;

impl Shared {
    /// `active`, unless it already holds its share of the clients (the
    /// connections in flight over the live targets): then the live target
    /// holding the fewest. A server that never answers thereby holds at most
    /// its share of the clients, and cannot starve the arms that share its
    /// windows; healthy arms, whose connections spread over many slices,
    /// stay under their share.
    fn with_room(&self, active: usize) -> usize {
        let active = active % self.counters.len();
        let live = self
            .live
            .iter()
            .filter(|l| l.load(Ordering::Acquire))
            .count();
        let share = self.spec.connections.div_ceil(live.max(1)) as u64;
        if self.live[active].load(Ordering::Acquire)
            && self.in_flight[active].load(Ordering::Acquire) < share
        {
            return active;
        }
        (0..self.counters.len())
            .filter(|&t| self.live[t].load(Ordering::Acquire))
            .min_by_key(|&t| self.in_flight[t].load(Ordering::Acquire))
            .unwrap_or(active)
    }

    /// Client `id`'s own target when every target is loaded at once: the
    /// live targets dealt round the clients, so none spins on a server
    /// that is gone.
    fn own_target(&self, id: usize) -> usize {
        dealt(&self.live, id)
    }

    fn source(&self) -> IpAddr {
        let n = self.next_source.fetch_add(1, Ordering::Relaxed) % SOURCE_ADDRESSES + 1;
        IpAddr::V4(Ipv4Addr::new(127, 1, (n >> 8) as u8, (n & 0xff) as u8))
    }
}

/// Client `id`'s target among the `live` ones, dealt round: client i to
/// live target i mod n (any target when none is live).
fn dealt(live: &[AtomicBool], id: usize) -> usize {
    let is_live = |t: &usize| live[*t].load(Ordering::Acquire);
    let n = (0..live.len()).filter(is_live).count();
    if n == 0 {
        return id % live.len().max(1);
    }
    (0..live.len())
        .filter(is_live)
        .nth(id % n)
        .unwrap_or(id % live.len())
}

pub struct LoadGen {
    runtime: tokio::runtime::Runtime,
    shared: Arc<Shared>,
    clients: Vec<tokio::task::JoinHandle<Vec<Histogram<u64>>>>,
}

/// See [`LoadGen::set_active`].
pub const EVERY_TARGET: usize = usize::MAX;

/// The finished run of a generator.
pub struct LoadTotals {
    pub snapshot: LoadSnapshot,
    /// Latency of connections that completed while measuring, in microseconds.
    pub latency_us: Histogram<u64>,
    /// Clients that did not finish within the drain deadline.
    pub stuck_clients: usize,
}

impl LoadGen {
    pub fn start(spec: LoadSpec) -> Result<Self> {
        let cores = spec.cores.clone();
        let next_core = Arc::new(AtomicUsize::new(0));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cores.len().max(1))
            .enable_all()
            .on_thread_start(move || {
                if !cores.is_empty() {
                    let i = next_core.fetch_add(1, Ordering::Relaxed) % cores.len();
                    core_affinity::set_for_current(core_affinity::CoreId { id: cores[i] });
                }
            })
            .build()
            .context("starting the load generator's runtime")?;
        let targets = spec.targets.len().max(1);
        let shared = Arc::new(Shared {
            spec,
            counters: (0..targets).map(|_| Counters::default()).collect(),
            in_flight: (0..targets).map(|_| AtomicU64::new(0)).collect(),
            active: AtomicUsize::new(0),
            live: (0..targets).map(|_| AtomicBool::new(true)).collect(),
            paused: AtomicBool::new(false),
            open: AtomicU64::new(0),
            resumed: tokio::sync::Notify::new(),
            stop: AtomicBool::new(false),
            measuring: AtomicBool::new(false),
            next_source: AtomicU32::new(0),
        });
        let clients = (0..shared.spec.connections)
            .map(|id| runtime.spawn(client(shared.clone(), id)))
            .collect();
        Ok(Self {
            runtime,
            shared,
            clients,
        })
    }

    /// The counters of target `target` now.
    pub fn snapshot(&self, target: usize) -> LoadSnapshot {
        LoadGen::snapshot_of(&self.shared, target)
    }

    /// Lets every connection under way finish and starts no new one, so that
    /// counters read now split the work exactly: nothing straddles the
    /// boundary. Returns how long the drain took (the servers' idle time),
    /// or None if a connection was still open after `limit`.
    pub fn quiesce(&self, limit: Duration) -> Option<Duration> {
        self.shared.paused.store(true, Ordering::Release);
        let t0 = Instant::now();
        loop {
            if self.shared.open.load(Ordering::Acquire) == 0 {
                return Some(t0.elapsed());
            }
            if t0.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Lets clients start connections again after [`Self::quiesce`].
    pub fn resume(&self) {
        self.shared.paused.store(false, Ordering::Release);
        self.shared.resumed.notify_waiters();
    }

    /// Sends every connection started from now on to target `target`, or
    /// with [`EVERY_TARGET`], each client to its own target (client i to
    /// live target i mod n): every live target loaded at once.
    pub fn set_active(&self, target: usize) {
        self.shared.active.store(target, Ordering::Release);
    }

    /// Which targets may take load.
    pub fn set_live(&self, live: &[bool]) {
        for (l, &on) in self.shared.live.iter().zip(live) {
            l.store(on, Ordering::Release);
        }
    }

    /// Latencies are recorded only for connections completing while this is set.
    pub fn set_measuring(&self, on: bool) {
        self.shared.measuring.store(on, Ordering::Release);
    }

    /// Stops opening connections and waits for those in flight, so that every
    /// connection the trial started is judged. One total per target.
    pub fn finish(self) -> Vec<LoadTotals> {
        self.shared.stop.store(true, Ordering::Release);
        self.resume();
        let drain = self.shared.spec.timeout + Duration::from_secs(2);
        let shared = self.shared.clone();
        let targets = shared.counters.len();
        let clients = self.clients;
        let latencies = self.runtime.block_on(async move {
            let mut merged: Vec<Histogram<u64>> = (0..targets).map(|_| new_histogram()).collect();
            let deadline = tokio::time::Instant::now() + drain;
            for handle in clients {
                if let Ok(Ok(hs)) = tokio::time::timeout_at(deadline, handle).await {
                    for (m, h) in merged.iter_mut().zip(hs) {
                        m.add(h).expect("histograms share bounds");
                    }
                }
            }
            merged
        });
        self.runtime.shutdown_background();
        latencies
            .into_iter()
            .enumerate()
            .map(|(t, latency_us)| LoadTotals {
                snapshot: LoadGen::snapshot_of(&shared, t),
                latency_us,
                stuck_clients: shared.in_flight[t].load(Ordering::Acquire) as usize,
            })
            .collect()
    }

    fn snapshot_of(shared: &Shared, target: usize) -> LoadSnapshot {
        let c = &shared.counters[target];
        let mut failures: FailureCounts = [0; Failure::COUNT];
        for (i, f) in failures.iter_mut().enumerate() {
            *f = c.failures[i].load(Ordering::Acquire);
        }
        LoadSnapshot {
            attempts: c.attempts.load(Ordering::Acquire),
            completed: c.completed.load(Ordering::Acquire),
            failures,
        }
    }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

async fn client(shared: Arc<Shared>, id: usize) -> Vec<Histogram<u64>> {
    let mut latency: Vec<Histogram<u64>> =
        shared.counters.iter().map(|_| new_histogram()).collect();
    let mut buf = Vec::with_capacity(shared.spec.contract.response.max_len() + 1);
    while !shared.stop.load(Ordering::Acquire) {
        loop {
            shared.open.fetch_add(1, Ordering::AcqRel);
            if !shared.paused.load(Ordering::Acquire) {
                break;
            }
            shared.open.fetch_sub(1, Ordering::AcqRel);
            let resumed = shared.resumed.notified();
            if shared.paused.load(Ordering::Acquire) {
                resumed.await;
            }
        }
        if shared.stop.load(Ordering::Acquire) {
            shared.open.fetch_sub(1, Ordering::AcqRel);
            break;
        }
        let target = match shared.active.load(Ordering::Acquire) {
            EVERY_TARGET => shared.own_target(id),
            t => shared.with_room(t),
        };
        let counters = &shared.counters[target];
        let source = shared.source();
        let started = Instant::now();
        shared.in_flight[target].fetch_add(1, Ordering::AcqRel);
        counters.attempts.fetch_add(1, Ordering::AcqRel);
        let outcome = tokio::time::timeout(
            shared.spec.timeout,
            connection(&shared.spec, target, source, &mut buf),
        )
        .await
        .unwrap_or(Err(Failure::Timeout));
        let failed = outcome.is_err();
        match outcome {
            Ok(()) => {
                if shared.measuring.load(Ordering::Acquire) {
                    latency[target].saturating_record(started.elapsed().as_micros() as u64);
                }
                counters.completed.fetch_add(1, Ordering::AcqRel);
            }
            Err(f) => {
                counters.failures[f.index()].fetch_add(1, Ordering::AcqRel);
            }
        }
        shared.in_flight[target].fetch_sub(1, Ordering::AcqRel);
        shared.open.fetch_sub(1, Ordering::AcqRel);
        if failed {
            // A refused connect fails without ever waiting: a client of a
            // dead server would loop without yielding and starve every
            // other client on its worker (beside one, the probe read a
            // generator capacity of 12-27 conn/s).
            tokio::task::yield_now().await;
        }
    }
    latency
}

async fn connection(
    spec: &LoadSpec,
    target: usize,
    source: IpAddr,
    buf: &mut Vec<u8>,
) -> Result<(), Failure> {
    let to = spec.targets[target];
    let socket = if to.is_ipv4() {
        let s = TcpSocket::new_v4().map_err(|_| Failure::Connect)?;
        bind_address_no_port(&s);
        s.bind(SocketAddr::new(source, 0))
            .map_err(|_| Failure::Connect)?;
        s
    } else {
        TcpSocket::new_v6().map_err(|_| Failure::Connect)?
    };
    let mut stream = socket.connect(to).await.map_err(|_| Failure::Connect)?;
    let contract = &spec.contract;
    for _ in 0..contract.requests {
        stream
            .write_all(&contract.request)
            .await
            .map_err(|_| Failure::Reset)?;
        read_response(&mut stream, contract, buf).await?;
    }
    if contract.closer == Closer::Client {
        stream.shutdown().await.map_err(|_| Failure::Reset)?;
    }
    let mut rest = [0u8; 64];
    match stream.read(&mut rest).await {
        Ok(0) => Ok(()),
        Ok(_) => Err(Failure::ExtraBytes),
        Err(_) => Err(Failure::Reset),
    }
}

/// Reads one whole response into `buf` and judges it as its bytes arrive.
/// A byte beyond it, before the next request was sent, is extra: a server
/// answers each request once.
async fn read_response(
    stream: &mut tokio::net::TcpStream,
    contract: &Contract,
    buf: &mut Vec<u8>,
) -> Result<(), Failure> {
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(0) => return Err(Failure::Truncated),
            Ok(n) => n,
            Err(_) => return Err(Failure::Reset),
        };
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = contract.response_end(buf)? {
            return if buf.len() > end {
                Err(Failure::ExtraBytes)
            } else {
                Ok(())
            };
        }
    }
}

/// Lets the kernel pick the source port at connect time, knowing the whole
/// 4-tuple, instead of reserving one per source address at bind time.
fn bind_address_no_port(socket: &TcpSocket) {
    let one: libc::c_int = 1;
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(targets: usize, connections: usize) -> LoadSpec {
        LoadSpec {
            targets: vec![SocketAddr::from(([127, 0, 0, 1], 1)); targets],
            connections,
            timeout: Duration::from_secs(1),
            cores: vec![],
            contract: Arc::new(crate::bench::load::contract::ContractConfig::default().contract()),
        }
    }

    #[test]
    fn clients_are_sized_for_the_live_targets_only() {
        assert_eq!(spec(9, 9 * 256).for_live(1).connections, 256);
        assert_eq!(spec(3, 3 * 256).for_live(3).connections, 3 * 256);
        // No live target still leaves one target's clients to judge.
        assert_eq!(spec(2, 512).for_live(0).connections, 256);
    }

    #[test]
    fn clients_of_every_target_at_once_are_dealt_to_the_live_ones() {
        let live = |l: &[bool]| l.iter().map(|&b| AtomicBool::new(b)).collect::<Vec<_>>();
        let all = live(&[true, true, true]);
        assert_eq!(
            (0..6).map(|i| dealt(&all, i)).collect::<Vec<_>>(),
            [0, 1, 2, 0, 1, 2]
        );
        // Target 1's server died: its clients serve 0 and 2, none spins on it.
        let two = live(&[true, false, true]);
        assert_eq!(
            (0..4).map(|i| dealt(&two, i)).collect::<Vec<_>>(),
            [0, 2, 0, 2]
        );
        assert_eq!(dealt(&live(&[false, false]), 3), 1);
    }
}
