//! Window markers for the emulated meter: a 7-byte NOP
//! (`nopl 0x4d54XXXX(%rax)`) that the meter plugin (see
//! [`crate::bench::emulated`]) turns into a snapshot of every vCPU's
//! instruction count, and that real hardware executes as a NOP. The plugin
//! numbers snapshots in the order they were taken; this module counts the
//! markers it executes the same way, so a window names its two snapshots
//! without the marker carrying a run-time value.
//!
//! Only `ratchet guest` enables markers: on the host a window carries none.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(false);
static EXECUTED: AtomicU64 = AtomicU64::new(0);

/// What a snapshot marks: the plugin records the id, and the host checks
/// that windows alternate begin and end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    WindowBegin = 1,
    WindowEnd = 2,
    /// Around an unscored window the plugin profiles by code address.
    ProfileBegin = 3,
    ProfileEnd = 4,
}

/// Turns markers on for this process: inside the emulated guest.
pub fn enable() {
    ENABLED.store(true, Ordering::SeqCst);
}

/// Executes the marker `mark` and returns its sequence number (1 for the
/// first marker this process executed), or None when markers are off.
/// Callers execute markers from one thread at a time, so the sequence is
/// the plugin's.
pub fn mark(mark: Mark) -> Option<u64> {
    if !ENABLED.load(Ordering::SeqCst) {
        return None;
    }
    execute(mark);
    Some(EXECUTED.fetch_add(1, Ordering::SeqCst) + 1)
}

#[cfg(target_arch = "x86_64")]
fn execute(mark: Mark) {
    // SAFETY: a NOP with a memory operand that is never accessed.
    unsafe {
        match mark {
            Mark::WindowBegin => {
                std::arch::asm!(
                    ".byte 0x0f, 0x1f, 0x80, 0x01, 0x00, 0x54, 0x4d",
                    options(nostack)
                )
            }
            Mark::WindowEnd => {
                std::arch::asm!(
                    ".byte 0x0f, 0x1f, 0x80, 0x02, 0x00, 0x54, 0x4d",
                    options(nostack)
                )
            }
            Mark::ProfileBegin => {
                std::arch::asm!(
                    ".byte 0x0f, 0x1f, 0x80, 0x03, 0x00, 0x54, 0x4d",
                    options(nostack)
                )
            }
            Mark::ProfileEnd => {
                std::arch::asm!(
                    ".byte 0x0f, 0x1f, 0x80, 0x04, 0x00, 0x54, 0x4d",
                    options(nostack)
                )
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn execute(_: Mark) {}

/// A window of exactly `2 * n + 1` instructions: a begin marker, `n`
/// turns of `dec; jnz`, and the end marker (counted, as every marker is).
/// The meter's calibration: what it counts here it must count exactly.
/// Returns the two markers' sequence numbers, or None when markers are off.
#[cfg(target_arch = "x86_64")]
pub fn counted_loop(n: u64) -> Option<[u64; 2]> {
    if !ENABLED.load(Ordering::SeqCst) || n == 0 {
        return None;
    }
    // SAFETY: two NOPs and a register-only loop.
    unsafe {
        std::arch::asm!(
            ".byte 0x0f, 0x1f, 0x80, 0x01, 0x00, 0x54, 0x4d",
            "2:",
            "dec {n}",
            "jnz 2b",
            ".byte 0x0f, 0x1f, 0x80, 0x02, 0x00, 0x54, 0x4d",
            n = inout(reg) n => _,
            options(nostack),
        );
    }
    let first = EXECUTED.fetch_add(2, Ordering::SeqCst) + 1;
    Some([first, first + 1])
}

/// What a known load does between its two markers (the attribution
/// experiment, `bench/emulated/attribution.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Load {
    /// [`counted_loop`]: exactly `2n + 1` user instructions.
    Loop,
    /// `n` system calls (`getppid`): kernel code every CPU runs.
    Syscalls,
    /// `n` calls of `clock_gettime` through the vDSO: user code the kernel
    /// maps into every process.
    Vdso,
}

/// Runs `load` of `n` turns between a begin and an end marker on this
/// thread's CPU; returns the markers' sequence numbers, or None when
/// markers are off.
pub fn known_load(load: Load, n: u64) -> Option<[u64; 2]> {
    match load {
        Load::Loop => counted_loop(n),
        Load::Syscalls => around(|| {
            for _ in 0..n {
                unsafe { libc::syscall(libc::SYS_getppid) };
            }
        }),
        Load::Vdso => around(|| {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            for _ in 0..n {
                unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
            }
        }),
    }
}

fn around(f: impl FnOnce()) -> Option<[u64; 2]> {
    let b = mark(Mark::WindowBegin)?;
    f();
    let e = mark(Mark::WindowEnd)?;
    Some([b, e])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_harmless_nops_numbered_in_order_once_enabled() {
        assert_eq!(mark(Mark::WindowBegin), None);
        enable();
        let a = mark(Mark::WindowBegin).unwrap();
        let b = mark(Mark::WindowEnd).unwrap();
        assert_eq!(b, a + 1);
    }
}
