//! Who untrusted code runs as. Candidate servers, their builds and command
//! agents are written under pressure to score well; as root, one could read
//! ratchet's memory, signal it, load a kernel module or rewrite what is
//! measured and committed, and a cgroup contains a root process without
//! confining it. ratchet keeps root for what needs it (cgroups, perf, the
//! ration) and runs them as an unprivileged user: `ratchet-sut` where
//! `scripts/setup.sh` created it, else `nobody` (uid 65534, which exists
//! even where no passwd file names it, as in the emulated guest), with no
//! capabilities, not even in the bounding set, and `no_new_privs`, so no
//! setuid binary gives any back.

use std::ffi::CString;
use std::sync::OnceLock;

/// The user that setup creates for untrusted code.
pub const USER: &str = "ratchet-sut";
/// `nobody`, where no [`USER`] exists.
const NOBODY: u32 = 65_534;

/// An unprivileged identity to run untrusted code as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// The highest capability the kernel knows, read before any fork: the
    /// child drops 0..=cap_last from its bounding set.
    cap_last: u32,
}

/// How untrusted code runs on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Privilege {
    /// ratchet is root; untrusted code runs as this identity.
    Dropped(Identity),
    /// ratchet itself is not root: untrusted code runs as ratchet's own
    /// user, which has no privilege to drop (nor cgroups to ration with).
    AlreadyUnprivileged { uid: u32 },
}

impl Privilege {
    /// The identity to switch to in a child, if any.
    pub fn identity(&self) -> Option<&Identity> {
        match self {
            Privilege::Dropped(id) => Some(id),
            Privilege::AlreadyUnprivileged { .. } => None,
        }
    }

    /// One line for `doctor` and the environment record.
    pub fn describe(&self) -> String {
        match self {
            Privilege::Dropped(id) => format!(
                "servers, builds and command agents run as {} (uid {}), with no capabilities and no_new_privs",
                id.name, id.uid
            ),
            Privilege::AlreadyUnprivileged { uid } => format!(
                "ratchet runs as uid {uid}, not root: servers, builds and command agents run as that same user, \
                 which can read ratchet's memory and signal it"
            ),
        }
    }
}

/// This host's [`Privilege`], looked up once.
pub fn privilege() -> &'static Privilege {
    static P: OnceLock<Privilege> = OnceLock::new();
    P.get_or_init(|| {
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            return Privilege::AlreadyUnprivileged { uid: euid };
        }
        let cap_last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(63);
        let (name, uid, gid) = lookup(USER).unwrap_or(("nobody".into(), NOBODY, NOBODY));
        Privilege::Dropped(Identity {
            name,
            uid,
            gid,
            cap_last,
        })
    })
}

fn lookup(user: &str) -> Option<(String, u32, u32)> {
    let c = CString::new(user).ok()?;
    // SAFETY: getpwnam's result is read before any other passwd call.
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return None;
    }
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    Some((user.to_string(), uid, gid))
}

/// In a forked child before exec: becomes `id` for good. Only
/// async-signal-safe system calls. The change of uid clears the parent-death
/// signal: set it after this.
pub fn drop_to(id: &Identity) -> std::io::Result<()> {
    let check = |rc: libc::c_int| {
        if rc != 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    unsafe {
        for cap in 0..=id.cap_last {
            // A capability this kernel lacks is EINVAL; nothing to drop.
            libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
        }
        check(libc::setgroups(0, std::ptr::null()))?;
        check(libc::setresgid(id.gid, id.gid, id.gid))?;
        // From root to a non-zero uid in all three: the permitted,
        // effective and ambient capabilities are cleared with it.
        check(libc::setresuid(id.uid, id.uid, id.uid))?;
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
    }
    Ok(())
}

/// Hands `path` (and, for a directory, everything under it) to `id`, so
/// untrusted code can write there and nowhere else of ratchet's.
pub fn give(path: &std::path::Path, id: &Identity) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(id.uid), Some(id.gid))?;
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path)? {
            give(&entry?.path(), id)?;
        }
    }
    Ok(())
}

/// In a forked child: drops to this host's identity, if ratchet has one to
/// drop to.
pub fn drop_in_child(p: &Privilege) -> std::io::Result<()> {
    match p.identity() {
        Some(id) => drop_to(id),
        None => unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    /// A child dropped to the identity has no capability in any set,
    /// no_new_privs, and none of root's groups.
    #[test]
    fn a_dropped_child_has_no_capabilities_and_no_new_privs() {
        let p = privilege().clone();
        let Some(id) = p.identity().cloned() else {
            eprintln!("not root: nothing to drop");
            return;
        };
        let mut c = Command::new("cat");
        c.arg("/proc/self/status");
        unsafe {
            c.pre_exec(move || drop_to(&id));
        }
        let out = String::from_utf8(c.output().unwrap().stdout).unwrap();
        let field = |name: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_default()
        };
        for caps in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
            assert_eq!(field(caps), "0000000000000000", "{caps} in {out}");
        }
        assert_eq!(field("NoNewPrivs:"), "1");
        let uid = p.identity().unwrap().uid.to_string();
        assert!(field("Uid:").split(' ').all(|u| u == uid), "{out}");
        assert_eq!(field("Groups:"), "");
    }
}
