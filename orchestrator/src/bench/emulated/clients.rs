//! The live regime's clients: one thread per client vCPU, each an epoll
//! loop holding its share of the connections in flight, each connection
//! judged in full against the contract as the host's generator judges it.
//!
//! Why not the host's generator: in the guest every client instruction
//! takes emulated time from the server's, and the server must be the
//! bottleneck. With the host's async generator a 2-vCPU guest spent about
//! 155k instructions a connection, server and clients together, and its
//! server was busy 38% of its windows. This loop makes the few system
//! calls a connection needs (socket, connect, write, read, close) and
//! nothing else.

use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bench::load::contract::{Closer, Contract, Failure};
use crate::bench::load::loadgen::{LoadSnapshot, LoadTotals};

#[derive(Default)]
struct Counters {
    attempts: AtomicU64,
    completed: AtomicU64,
    failures: [AtomicU64; Failure::COUNT],
    /// Connections open when the threads stopped.
    stuck: AtomicU64,
}

/// Closed-loop clients of one server.
pub struct Clients {
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// What every client thread shares.
struct Spec {
    to: SocketAddr,
    contract: Arc<Contract>,
    timeout: Duration,
}

impl Clients {
    /// `connections` clients, dealt over one thread per core of `cores`.
    pub fn start(
        to: SocketAddr,
        connections: usize,
        cores: &[usize],
        contract: Arc<Contract>,
        timeout: Duration,
    ) -> Result<Self> {
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let spec = Arc::new(Spec {
            to,
            contract,
            timeout,
        });
        let n = cores.len().max(1);
        let threads = (0..n)
            .map(|i| {
                let share = connections / n + usize::from(i < connections % n);
                let core = cores.get(i).copied();
                let (c, s, spec) = (counters.clone(), stop.clone(), spec.clone());
                std::thread::Builder::new()
                    .name(format!("client-{i}"))
                    .spawn(move || {
                        if let Some(core) = core {
                            core_affinity::set_for_current(core_affinity::CoreId { id: core });
                        }
                        Loop::new(share, &spec, &c).run(&s);
                    })
                    .context("starting a client thread")
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            counters,
            stop,
            threads,
        })
    }

    pub fn snapshot(&self) -> LoadSnapshot {
        let c = &self.counters;
        let mut failures = [0; Failure::COUNT];
        for (f, a) in failures.iter_mut().zip(&c.failures) {
            *f = a.load(Ordering::Acquire);
        }
        LoadSnapshot {
            attempts: c.attempts.load(Ordering::Acquire),
            completed: c.completed.load(Ordering::Acquire),
            failures,
        }
    }

    /// Starts no new connection, lets those under way finish (each within
    /// its timeout), and returns the totals.
    pub fn finish(mut self) -> LoadTotals {
        self.stop.store(true, Ordering::Release);
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
        LoadTotals {
            snapshot: self.snapshot(),
            latency_us: hdrhistogram::Histogram::new(3).expect("valid histogram"),
            stuck_clients: self.counters.stuck.load(Ordering::Acquire) as usize,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Connecting, the request not yet written.
    Connecting,
    /// The current request written; reading its response.
    Reading,
    /// Every response in; waiting for the server's close.
    Closing,
}

struct Conn {
    fd: RawFd,
    phase: Phase,
    /// Requests answered so far.
    answered: u32,
    buf: Vec<u8>,
    started: Instant,
}

/// One thread's connections and its epoll instance.
struct Loop<'a> {
    epoll: RawFd,
    conns: Vec<Option<Conn>>,
    spec: &'a Spec,
    counters: &'a Counters,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

impl<'a> Loop<'a> {
    fn new(share: usize, spec: &'a Spec, counters: &'a Counters) -> Self {
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        Self {
            epoll,
            conns: (0..share).map(|_| None).collect(),
            spec,
            counters,
        }
    }

    fn run(mut self, stop: &AtomicBool) {
        for slot in 0..self.conns.len() {
            self.open(slot);
        }
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
        let mut swept = Instant::now();
        loop {
            let stopping = stop.load(Ordering::Acquire);
            if stopping && self.conns.iter().all(Option::is_none) {
                break;
            }
            let n = unsafe { libc::epoll_wait(self.epoll, events.as_mut_ptr(), 256, 10) };
            for e in events.iter().take(n.max(0) as usize) {
                let slot = e.u64 as usize;
                if let Some(outcome) = self.advance(slot) {
                    self.end(slot, outcome);
                    if !stop.load(Ordering::Acquire) {
                        self.open(slot);
                    }
                }
            }
            if swept.elapsed() >= self.spec.timeout / 4 {
                swept = Instant::now();
                self.sweep(stopping);
            }
        }
        unsafe { libc::close(self.epoll) };
    }

    /// Ends connections past their timeout.
    fn sweep(&mut self, stopping: bool) {
        for slot in 0..self.conns.len() {
            let late = self.conns[slot]
                .as_ref()
                .is_some_and(|c| c.started.elapsed() >= self.spec.timeout);
            if late {
                if stopping {
                    self.counters.stuck.fetch_add(1, Ordering::AcqRel);
                    self.close(slot);
                } else {
                    self.end(slot, Err(Failure::Timeout));
                    self.open(slot);
                }
            }
        }
    }

    fn open(&mut self, slot: usize) {
        self.counters.attempts.fetch_add(1, Ordering::AcqRel);
        let family = if self.spec.to.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        let fd = unsafe {
            libc::socket(
                family,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            self.counters.failures[Failure::Connect.index()].fetch_add(1, Ordering::AcqRel);
            return;
        }
        let (addr, len) = sockaddr(&self.spec.to);
        let r = unsafe { libc::connect(fd, &addr as *const _ as *const libc::sockaddr, len) };
        if r != 0 && errno() != libc::EINPROGRESS {
            unsafe { libc::close(fd) };
            self.counters.failures[Failure::Connect.index()].fetch_add(1, Ordering::AcqRel);
            return;
        }
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP) as u32,
            u64: slot as u64,
        };
        unsafe { libc::epoll_ctl(self.epoll, libc::EPOLL_CTL_ADD, fd, &mut ev) };
        self.conns[slot] = Some(Conn {
            fd,
            phase: Phase::Connecting,
            answered: 0,
            buf: Vec::with_capacity(self.spec.contract.response.max_len() + 1),
            started: Instant::now(),
        });
    }

    /// Moves connection `slot` on after an event; its outcome once it ended.
    fn advance(&mut self, slot: usize) -> Option<Result<(), Failure>> {
        let contract = &self.spec.contract;
        let conn = self.conns[slot].as_mut()?;
        if conn.phase == Phase::Connecting {
            let mut err: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            unsafe {
                libc::getsockopt(
                    conn.fd,
                    libc::SOL_SOCKET,
                    libc::SO_ERROR,
                    &mut err as *mut _ as *mut libc::c_void,
                    &mut len,
                )
            };
            if err != 0 {
                return Some(Err(Failure::Connect));
            }
            if let Err(f) = send(conn.fd, &contract.request) {
                return Some(Err(f));
            }
            conn.phase = Phase::Reading;
            // Only reads matter from now on.
            let mut ev = libc::epoll_event {
                events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
                u64: slot as u64,
            };
            unsafe { libc::epoll_ctl(self.epoll, libc::EPOLL_CTL_MOD, conn.fd, &mut ev) };
        }
        let mut chunk = [0u8; 4096];
        loop {
            let n = unsafe { libc::read(conn.fd, chunk.as_mut_ptr() as *mut libc::c_void, 4096) };
            if n < 0 {
                return match errno() {
                    libc::EAGAIN => None,
                    libc::EINTR => continue,
                    _ => Some(Err(Failure::Reset)),
                };
            }
            if n == 0 {
                return Some(match conn.phase {
                    Phase::Closing => Ok(()),
                    _ => Err(Failure::Truncated),
                });
            }
            if conn.phase == Phase::Closing {
                return Some(Err(Failure::ExtraBytes));
            }
            conn.buf.extend_from_slice(&chunk[..n as usize]);
            let end = match contract.response_end(&conn.buf) {
                Ok(Some(end)) => end,
                Ok(None) => continue,
                Err(f) => return Some(Err(f)),
            };
            if conn.buf.len() > end {
                return Some(Err(Failure::ExtraBytes));
            }
            conn.buf.clear();
            conn.answered += 1;
            if conn.answered < contract.requests {
                if let Err(f) = send(conn.fd, &contract.request) {
                    return Some(Err(f));
                }
                continue;
            }
            conn.phase = Phase::Closing;
            if contract.closer == Closer::Client {
                unsafe { libc::shutdown(conn.fd, libc::SHUT_WR) };
            }
        }
    }

    fn end(&mut self, slot: usize, outcome: Result<(), Failure>) {
        match outcome {
            Ok(()) => self.counters.completed.fetch_add(1, Ordering::AcqRel),
            Err(f) => self.counters.failures[f.index()].fetch_add(1, Ordering::AcqRel),
        };
        self.close(slot);
    }

    fn close(&mut self, slot: usize) {
        if let Some(c) = self.conns[slot].take() {
            unsafe { libc::close(c.fd) };
        }
    }
}

/// Writes a whole request; a request is small, so a short write is a
/// failure of the connection, not something to wait for.
fn send(fd: RawFd, bytes: &[u8]) -> Result<(), Failure> {
    let n = unsafe {
        libc::send(
            fd,
            bytes.as_ptr() as *const libc::c_void,
            bytes.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    if n == bytes.len() as isize {
        Ok(())
    } else {
        Err(Failure::Reset)
    }
}

fn sockaddr(to: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match to {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            unsafe { std::ptr::write(&mut s as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: 0,
            };
            unsafe { std::ptr::write(&mut s as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (s, len as libc::socklen_t)
}
