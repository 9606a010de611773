//! One measuring process per SUT core. The lock is an flock(2) on a file named
//! after the core, so the kernel releases it when its holder dies, however it
//! dies: a stale lock from a killed run is taken over without any clean-up.

use anyhow::{bail, Context, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub struct CoreLock {
    _file: File,
}

/// A fixed place, not `$TMPDIR`: two ratchets started with different
/// temporary directories must still find each other's lock.
fn lock_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("RATCHET_LOCK_DIR") {
        return dir.into();
    }
    let run_lock = Path::new("/run/lock");
    if run_lock.is_dir() {
        run_lock.join("ratchet")
    } else {
        PathBuf::from("/tmp/ratchet-locks")
    }
}

/// Creates the lock directory open to every user (sticky, like /tmp), so
/// one user's run does not lock the others out of the check itself.
fn create_lock_dir(dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777)).ok();
    }
    Ok(())
}

impl CoreLock {
    pub fn acquire(core: usize, holder: &str) -> Result<Self> {
        let dir = lock_dir();
        create_lock_dir(&dir)?;
        let path = dir.join(format!("sut-core-{core}.lock"));
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let mut other = String::new();
            file.read_to_string(&mut other).ok();
            bail!(
                "SUT core {core} is in use by another ratchet ({}); lock file {}. \
                 Wait for it, or choose another core with machine.sut_core",
                other.trim(),
                path.display()
            );
        }
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        writeln!(file, "pid {} {holder}", std::process::id())?;
        Ok(Self { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_is_refused_and_release_frees_it() {
        let dir = tempfile::tempdir().unwrap();
        std::env::set_var("RATCHET_LOCK_DIR", dir.path());
        let first = CoreLock::acquire(7, "test one").unwrap();
        let err = CoreLock::acquire(7, "test two").err().unwrap().to_string();
        assert!(err.contains("in use") && err.contains("test one"), "{err}");
        assert!(CoreLock::acquire(6, "other core").is_ok());
        drop(first);
        assert!(CoreLock::acquire(7, "test three").is_ok());
    }
}
