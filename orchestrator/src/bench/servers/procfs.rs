//! What /proc says about the server under test: which process owns a
//! listening socket, and which processes belong to its process group.

use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fs;
use std::net::{IpAddr, Ipv6Addr};

use crate::bench::servers::target::Family;

/// A listening TCP socket, from `/proc/net/tcp` or `/proc/net/tcp6`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Listener {
    addr: IpAddr,
    port: u16,
    inode: u64,
}

/// Every listening TCP socket of this network namespace, both families.
fn listeners() -> Vec<Listener> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|t| fs::read_to_string(t).ok())
        .flat_map(|t| parse_listening(&t))
        .collect()
}

/// The listening rows of a table. The kernel prints an address as the
/// in-memory words of its network-order bytes, each as a host-order hex
/// number: 8 digits for IPv4, 4 words of 8 for IPv6.
fn parse_listening(table: &str) -> Vec<Listener> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.get(3) != Some(&"0A") {
                return None;
            }
            let (addr, port) = f.get(1)?.split_once(':')?;
            Some(Listener {
                addr: parse_addr(addr)?,
                port: u16::from_str_radix(port, 16).ok()?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

fn parse_addr(hex: &str) -> Option<IpAddr> {
    let words: Option<Vec<[u8; 4]>> = (0..hex.len() / 8)
        .map(|i| {
            Some(
                u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16)
                    .ok()?
                    .to_ne_bytes(),
            )
        })
        .collect();
    let bytes: Vec<u8> = words?.concat();
    match bytes.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => None,
    }
}

/// How a listener serves the load's family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serves {
    /// Bound to the family's loopback or wildcard address.
    Directly,
    /// IPv6's wildcard, for IPv4 clients: it takes them only without
    /// `IPV6_V6ONLY` (dual stack), which /proc does not show.
    IfDualStack,
}

fn serves(family: Family, addr: IpAddr) -> Option<Serves> {
    let v4_mapped = |a: Ipv6Addr| {
        a.to_ipv4_mapped()
            .is_some_and(|v4| v4.is_loopback() || v4.is_unspecified())
    };
    match (family, addr) {
        (Family::Ipv4, IpAddr::V4(a)) if a.is_loopback() || a.is_unspecified() => {
            Some(Serves::Directly)
        }
        (Family::Ipv4, IpAddr::V6(a)) if v4_mapped(a) => Some(Serves::Directly),
        (Family::Ipv4, IpAddr::V6(a)) if a.is_unspecified() => Some(Serves::IfDualStack),
        (Family::Ipv6, IpAddr::V6(a)) if a.is_loopback() || a.is_unspecified() => {
            Some(Serves::Directly)
        }
        _ => None,
    }
}

/// Inodes of sockets listening on `port` on any address, either family.
pub fn listening_on_port(port: u16) -> HashSet<u64> {
    listeners()
        .into_iter()
        .filter(|l| l.port == port)
        .map(|l| l.inode)
        .collect()
}

/// The addresses a server must listen on to take the load, in words.
pub fn expected_listeners(family: Family, port: u16) -> String {
    match family {
        Family::Ipv4 => {
            format!("127.0.0.1:{port} (or 0.0.0.0:{port}, or a dual-stack [::]:{port})")
        }
        Family::Ipv6 => format!("[::1]:{port} (or [::]:{port})"),
    }
}

/// Every pid whose process group is `pgid`: the server and anything it forked.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| process_group(*pid) == Some(pgid))
        .collect()
}

fn process_group(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// Socket inodes held open by `pid`.
pub fn socket_inodes(pid: i32) -> HashSet<u64> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    dir.filter_map(|e| {
        let link = fs::read_link(e.ok()?.path()).ok()?;
        let s = link.to_str()?;
        s.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
    })
    .collect()
}

/// Socket inodes `pid` holds: open descriptors, and files registered with
/// any io_uring it has (direct descriptors appear in no fd table, only in
/// the ring's fdinfo as `<slot>: socket:[<inode>]`).
pub fn held_sockets(pid: i32) -> HashSet<u64> {
    let mut held = socket_inodes(pid);
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return held;
    };
    for e in dir.flatten() {
        let is_ring = fs::read_link(e.path())
            .is_ok_and(|l| l.to_str().is_some_and(|s| s.contains("io_uring")));
        if !is_ring {
            continue;
        }
        let info = format!("/proc/{pid}/fdinfo/{}", e.file_name().to_string_lossy());
        if let Ok(text) = fs::read_to_string(info) {
            held.extend(registered_sockets(&text));
        }
    }
    held
}

/// The socket inodes in an io_uring fdinfo's registered-file table.
fn registered_sockets(fdinfo: &str) -> Vec<u64> {
    fdinfo
        .lines()
        .filter_map(|l| {
            let (slot, path) = l.trim_start().split_once(": ")?;
            slot.parse::<u32>().ok()?;
            path.trim()
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// Time `cpu` has spent idle, in µs: the sum over its cpuidle states (µs
/// resolution), or where the kernel has no cpuidle, `/proc/stat`'s idle and
/// iowait (clock-tick resolution, 10 ms at the usual 100 Hz).
/// The kernel's counts of events on one CPU: interrupts by kind and
/// softirqs. Per connection they say why a server costs what it does
/// (cross-CPU wake-ups, task work sent by IPI, interrupts), and reading
/// them from another CPU adds nothing to what that CPU executes.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CoreEvents {
    /// Rescheduling IPIs: another CPU woke a task here.
    pub reschedule_ipis: f64,
    /// Function-call IPIs (remote wake-ups and work queued by another CPU)
    /// and TLB shootdowns.
    pub call_ipis: f64,
    /// Local timer interrupts.
    pub timer_interrupts: f64,
    /// Softirqs run here, of every kind...
    pub softirqs: f64,
    /// ...and network receive among them.
    pub net_rx_softirqs: f64,
}

impl CoreEvents {
    pub fn minus(&self, earlier: &Self) -> Self {
        Self {
            reschedule_ipis: self.reschedule_ipis - earlier.reschedule_ipis,
            call_ipis: self.call_ipis - earlier.call_ipis,
            timer_interrupts: self.timer_interrupts - earlier.timer_interrupts,
            softirqs: self.softirqs - earlier.softirqs,
            net_rx_softirqs: self.net_rx_softirqs - earlier.net_rx_softirqs,
        }
    }

    pub fn per(&self, connections: u64) -> Self {
        let n = connections.max(1) as f64;
        Self {
            reschedule_ipis: self.reschedule_ipis / n,
            call_ipis: self.call_ipis / n,
            timer_interrupts: self.timer_interrupts / n,
            softirqs: self.softirqs / n,
            net_rx_softirqs: self.net_rx_softirqs / n,
        }
    }
}

/// The column of `cpu` in a per-CPU table such as `/proc/interrupts` or
/// `/proc/softirqs`, for the row named `name` (`RES:`, `NET_RX:`).
fn per_cpu_column(table: &str, name: &str, cpu: usize) -> Option<f64> {
    let cpus = table.lines().next()?.split_whitespace().count();
    let row = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))?;
    let v: Vec<&str> = row.split_whitespace().skip(1).take(cpus).collect();
    v.get(cpu)?.parse().ok()
}

/// Whether any thread of process `pid` is in state `R` (running or
/// runnable), from `/proc/<pid>/task/*/stat`.
pub fn any_thread_runnable(pid: i32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|s| stat_state(&s))
            == Some('R')
    })
}

/// The state letter of a `/proc/.../stat` line: the first field after the
/// command's closing parenthesis (a command may itself hold one).
fn stat_state(stat: &str) -> Option<char> {
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// The counts of [`CoreEvents`] on `cpu` since boot.
pub fn core_events(cpu: usize) -> Option<CoreEvents> {
    let irqs = fs::read_to_string("/proc/interrupts").ok()?;
    let soft = fs::read_to_string("/proc/softirqs").ok()?;
    Some(events_from(&irqs, &soft, cpu))
}

fn events_from(irqs: &str, soft: &str, cpu: usize) -> CoreEvents {
    let irq = |n: &str| per_cpu_column(irqs, n, cpu).unwrap_or(0.0);
    let sum: f64 = soft
        .lines()
        .skip(1)
        .filter_map(|l| per_cpu_column(soft, l.split_whitespace().next()?, cpu))
        .sum();
    CoreEvents {
        reschedule_ipis: irq("RES:"),
        call_ipis: irq("CAL:") + irq("TLB:"),
        timer_interrupts: irq("LOC:"),
        softirqs: sum,
        net_rx_softirqs: per_cpu_column(soft, "NET_RX:", cpu).unwrap_or(0.0),
    }
}

pub fn cpu_idle_us(cpu: usize) -> Option<u64> {
    let states = format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle");
    if let Ok(dir) = fs::read_dir(&states) {
        let mut total = 0u64;
        let mut any = false;
        for e in dir.flatten() {
            if let Ok(t) = fs::read_to_string(e.path().join("time")) {
                total += t.trim().parse::<u64>().ok()?;
                any = true;
            }
        }
        if any {
            return Some(total);
        }
    }
    let stat = fs::read_to_string("/proc/stat").ok()?;
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&format!("cpu{cpu}")))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let ticks = f.get(3)? + f.get(4).copied().unwrap_or(0);
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(ticks * 1_000_000 / hz)
}

/// Whether every thread of `pid` is stopped by a signal (state `T`), or
/// the process is gone. io_uring's own threads (`iou-*`) take the stop at
/// their next look at signals and hold no user work meanwhile, so they do
/// not count.
pub fn all_threads_stopped(pid: i32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|t| {
        let stat = fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // "tid (comm) S ...": the comm may hold spaces and parentheses.
        let Some((head, rest)) = stat.rsplit_once(')') else {
            return true;
        };
        let comm = head.split_once('(').map_or("", |(_, c)| c);
        comm.starts_with("iou-")
            || matches!(rest.trim_start().chars().next(), Some('T' | 't') | None)
    })
}

/// How a process of group `pgid` listens on `port` for `family`'s clients:
/// the arm's own server, never a stale process that happens to hold the
/// port. The best of its listeners, or None.
pub fn group_listens_on(pgid: i32, port: u16, family: Family) -> Option<Serves> {
    let wanted: Vec<(u64, Serves)> = listeners()
        .into_iter()
        .filter(|l| l.port == port)
        .filter_map(|l| Some((l.inode, serves(family, l.addr)?)))
        .collect();
    if wanted.is_empty() {
        return None;
    }
    let held: HashSet<u64> = group_members(pgid)
        .into_iter()
        .flat_map(socket_inodes)
        .collect();
    let mine = wanted.iter().filter(|(inode, _)| held.contains(inode));
    mine.map(|&(_, s)| s)
        .min_by_key(|s| matches!(s, Serves::IfDualStack))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:A000 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0000000000000000 100 0 0 10 0
";

    #[test]
    fn registered_sockets_are_read_from_a_rings_fdinfo() {
        let info = "pos:\t0\nflags:\t02000002\nSqMask:\t0x7f\nUserFiles:\t3\n    0: socket:[777]\n    2: socket:[778]\n    5: /tmp/x\nUserBufs:\t0\n";
        assert_eq!(registered_sockets(info), vec![777, 778]);
    }

    #[test]
    fn an_idle_cpu_accumulates_idle_time() {
        let a = cpu_idle_us(0).expect("cpu0 idle time");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let b = cpu_idle_us(0).unwrap();
        assert!(b >= a);
    }

    #[test]
    fn a_stat_lines_state_follows_the_last_parenthesis() {
        assert_eq!(stat_state("42 (server) R 1 42 42 0"), Some('R'));
        assert_eq!(stat_state("42 (odd) name) S 1 42"), Some('S'));
        assert_eq!(stat_state("garbage"), None);
        assert!(!any_thread_runnable(-1));
        // This test's own thread is running as it reads.
        assert!(any_thread_runnable(std::process::id() as i32));
    }

    #[test]
    fn core_events_read_one_cpus_column() {
        let irqs = "           CPU0       CPU1\n  0:         40          0   IO-APIC   2-edge      timer\n\
                    LOC:       1000       2000   Local timer interrupts\n\
                    RES:         10         20   Rescheduling interrupts\n\
                    CAL:          3          4   Function call interrupts\n\
                    TLB:          1          2   TLB shootdowns\n";
        let soft = "                    CPU0       CPU1\n          HI:          0          1\n\
                    NET_RX:          5          7\n         RCU:        100        200\n";
        let e = events_from(irqs, soft, 1);
        assert_eq!(e.reschedule_ipis, 20.0);
        assert_eq!(e.call_ipis, 6.0);
        assert_eq!(e.timer_interrupts, 2000.0);
        assert_eq!(e.net_rx_softirqs, 7.0);
        assert_eq!(e.softirqs, 208.0);
        let per = e.minus(&events_from(irqs, soft, 0)).per(2);
        assert_eq!(per.reschedule_ipis, 5.0);
    }

    #[test]
    fn finds_only_the_listening_sockets() {
        let found = parse_listening(TABLE);
        let ours: Vec<u64> = found
            .iter()
            .filter(|l| l.port == 0x1F90)
            .map(|l| l.inode)
            .collect();
        assert_eq!(ours, [4242]);
        assert_eq!(found[0].addr, IpAddr::from([127, 0, 0, 1]));
    }

    /// `::1`, `::` and `::ffff:127.0.0.1`, as a little-endian kernel prints them.
    const TABLE6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5151 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000000000000:1F91 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5252 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:1F92 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5353 1 0000000000000000 100 0 0 10 0
";

    #[test]
    fn ipv6_listeners_are_read_in_the_kernels_word_order() {
        if cfg!(target_endian = "big") {
            return;
        }
        let found = parse_listening(TABLE6);
        let addrs: Vec<String> = found.iter().map(|l| l.addr.to_string()).collect();
        assert_eq!(addrs, ["::1", "::", "::ffff:127.0.0.1"]);
        assert_eq!(found[1].inode, 5252);
    }

    #[test]
    fn each_family_is_served_by_its_own_listeners_and_the_dual_stack_one() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let v4 = |a| serves(Family::Ipv4, ip(a));
        let v6 = |a| serves(Family::Ipv6, ip(a));
        assert_eq!(v4("127.0.0.1"), Some(Serves::Directly));
        assert_eq!(v4("0.0.0.0"), Some(Serves::Directly));
        assert_eq!(v4("::ffff:127.0.0.1"), Some(Serves::Directly));
        assert_eq!(v4("::"), Some(Serves::IfDualStack));
        assert_eq!(v4("::1"), None);
        assert_eq!(v4("10.0.0.1"), None);
        assert_eq!(v6("::1"), Some(Serves::Directly));
        assert_eq!(v6("::"), Some(Serves::Directly));
        assert_eq!(v6("127.0.0.1"), None);
        assert_eq!(v6("0.0.0.0"), None);
    }

    #[test]
    fn own_process_group_is_found() {
        let me = std::process::id() as i32;
        let pgid = unsafe { libc::getpgid(0) };
        assert!(group_members(pgid).contains(&me));
    }

    #[test]
    fn own_listener_is_recognised_in_its_family_only() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let pgid = unsafe { libc::getpgid(0) };
        assert_eq!(
            group_listens_on(pgid, port, Family::Ipv4),
            Some(Serves::Directly)
        );
        assert_eq!(group_listens_on(pgid, port, Family::Ipv6), None);
        drop(l);
        // Another test thread of this process may bind the freed port at
        // once (it happened in a suite): a listener seen then must be one
        // that is really there, never the closed one.
        let after = group_listens_on(pgid, port, Family::Ipv4);
        assert!(
            after.is_none() || !listening_on_port(port).is_empty(),
            "the closed listener on {port} is still recognised: {after:?}"
        );
        let l6 = std::net::TcpListener::bind("[::1]:0").unwrap();
        let port = l6.local_addr().unwrap().port();
        assert_eq!(
            group_listens_on(pgid, port, Family::Ipv6),
            Some(Serves::Directly)
        );
        assert_eq!(group_listens_on(pgid, port, Family::Ipv4), None);
        assert!(listening_on_port(port).len() == 1);
    }
}
