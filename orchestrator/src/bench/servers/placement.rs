//! Where and how a server's process is scheduled, set in the child between
//! fork and exec (so only system calls): its core, and the slice it gets
//! when it shares a rationed group.

/// Pins the calling process to `core`. Only a system call: safe between
/// fork and exec.
pub fn pin_to(core: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The scheduler slice of a server that shares a rationed group: with the
/// default (a few ms), whichever arm the scheduler picks first after each
/// throttle runs a whole slice and the other the rest of the quota, so the
/// first-started arm took 1.2-1.4 times its share (measured); short slices
/// interleave the arms finely, so they share the quota alike.
pub const SHARED_SLICE_NS: u64 = 100_000;

/// Asks for a custom fair-class slice (Linux 6.12 and later; older kernels
/// refuse it and keep the default, which only costs fairness). Only a
/// system call: safe between fork and exec.
pub fn set_slice(ns: u64) {
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        policy: u32,
        flags: u64,
        nice: i32,
        priority: u32,
        runtime: u64,
        deadline: u64,
        period: u64,
    }
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice: 0,
        priority: 0,
        runtime: ns,
        deadline: 0,
        period: 0,
    };
    unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
}
