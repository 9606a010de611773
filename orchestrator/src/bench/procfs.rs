//! What /proc says about the server under test: which process owns a
//! listening socket, and which processes belong to its process group.

use std::collections::HashSet;
use std::fs;

/// Inodes of IPv4 sockets listening on 127.0.0.1:`port` (or 0.0.0.0:`port`).
pub fn listening_inodes(port: u16) -> HashSet<u64> {
    let Ok(table) = fs::read_to_string("/proc/net/tcp") else {
        return HashSet::new();
    };
    parse_listening(&table, port)
}

fn parse_listening(table: &str, port: u16) -> HashSet<u64> {
    let wanted = [
        format!("0100007F:{port:04X}"),
        format!("00000000:{port:04X}"),
    ];
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let listening = f.get(3) == Some(&"0A");
            let ours = f.get(1).is_some_and(|a| wanted.iter().any(|w| w == a));
            (listening && ours)
                .then(|| f.get(9)?.parse().ok())
                .flatten()
        })
        .collect()
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

/// True when a process of group `pgid` holds a socket listening on `port`:
/// the arm's own server, never a stale process that happens to hold the port.
pub fn group_listens_on(pgid: i32, port: u16) -> bool {
    let listening = listening_inodes(port);
    !listening.is_empty()
        && group_members(pgid)
            .into_iter()
            .any(|pid| !socket_inodes(pid).is_disjoint(&listening))
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
    fn finds_only_the_listening_socket_on_the_port() {
        let found = parse_listening(TABLE, 0x1F90);
        assert_eq!(found, HashSet::from([4242]));
    }

    #[test]
    fn own_process_group_is_found() {
        let me = std::process::id() as i32;
        let pgid = unsafe { libc::getpgid(0) };
        assert!(group_members(pgid).contains(&me));
    }

    #[test]
    fn own_listener_is_recognised() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let pgid = unsafe { libc::getpgid(0) };
        assert!(group_listens_on(pgid, port));
        drop(l);
        assert!(!group_listens_on(pgid, port));
    }
}
