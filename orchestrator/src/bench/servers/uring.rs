//! Completions an io_uring server posted, read from outside it: each
//! ring's `CqTail` in `/proc/<pid>/fdinfo`, the count of completion
//! entries the kernel has written to it. The study reasoned with
//! completions per connection (CQE_SKIP_SUCCESS left "about two per
//! connection instead of four"); read from another CPU, this adds nothing
//! to what the server's CPU executes.

use std::fs;

/// The sum of the completion-queue tails of every io_uring instance the
/// processes `pids` hold, or None if they hold none.
pub fn completions(pids: &[i32]) -> Option<u64> {
    let tails: Vec<u32> = pids.iter().flat_map(|&pid| ring_tails(pid)).collect();
    (!tails.is_empty()).then(|| tails.iter().map(|&t| u64::from(t)).sum())
}

/// Completions posted between two readings of [`completions`]; each tail
/// is a 32-bit counter, so the sum is taken modulo 2^32 per ring.
pub fn posted(before: u64, after: u64) -> u64 {
    after.wrapping_sub(before) & u64::from(u32::MAX)
}

fn ring_tails(pid: i32) -> Vec<u32> {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .filter(|fd| {
            fs::read_link(fd.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:[io_uring]")
        })
        .filter_map(|fd| {
            let info = fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                fd.file_name().to_string_lossy()
            ))
            .ok()?;
            cq_tail(&info)
        })
        .collect()
}

fn cq_tail(fdinfo: &str) -> Option<u32> {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("CqTail:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_is_read_from_a_rings_fdinfo() {
        let info = "pos:\t0\nflags:\t02000002\nSqMask:\t0x7f\nSqHead:\t10\nSqTail:\t10\nCqMask:\t0xff\nCqHead:\t7\nCqTail:\t9\nCachedCqTail:\t9\n";
        assert_eq!(cq_tail(info), Some(9));
        assert_eq!(cq_tail("pos:\t0\n"), None);
        assert_eq!(posted(u64::from(u32::MAX) - 1, 3), 5);
        assert_eq!(posted(10, 30), 20);
        assert_eq!(completions(&[std::process::id() as i32]), None);
    }
}
