//! What a server process holds that a leak would grow, from /proc: its
//! anonymous memory and its descriptors, with its limit on them (see
//! `bench/host/endurance.rs`).

use serde::{Deserialize, Serialize};
use std::fs;

/// What a process holds that a leak would grow: its anonymous memory (the
/// heap and stacks; file pages are shared and come back) and its
/// descriptors other than sockets, with its limit on descriptors.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Holdings {
    pub anon_kib: u64,
    pub descriptors: u64,
    pub descriptor_limit: Option<u64>,
}

/// [`Holdings`] of `pid`, or None once it is gone.
pub fn holdings(pid: i32) -> Option<Holdings> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let limits = fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
    let descriptors = fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .filter(|e| {
            !fs::read_link(e.path())
                .is_ok_and(|l| l.to_str().is_some_and(|s| s.starts_with("socket:")))
        })
        .count() as u64;
    Some(Holdings {
        anon_kib: status_kib(&status, "RssAnon:")?,
        descriptors,
        descriptor_limit: open_files_limit(&limits),
    })
}

/// A `kB` field of `/proc/<pid>/status`.
fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The soft limit on open files in `/proc/<pid>/limits`.
fn open_files_limit(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_holdings_are_read_from_proc() {
        let me = holdings(std::process::id() as i32).unwrap();
        assert!(me.anon_kib > 0 && me.descriptors >= 3, "{me:?}");
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";
        assert_eq!(open_files_limit(limits), Some(1024));
        assert_eq!(
            status_kib("VmRSS:\t  10 kB\nRssAnon:\t    2048 kB\n", "RssAnon:"),
            Some(2048)
        );
    }
}
