//! One measuring process per SUT core. The lock is an flock(2) on a file named
//! after the core, so the kernel releases it when its holder dies, however it
//! dies: a stale lock from a killed run is taken over without any clean-up.

use anyhow::{bail, Context, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

pub struct CoreLock {
    _file: File,
}

fn lock_dir() -> PathBuf {
    std::env::var_os("RATCHET_LOCK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("ratchet-locks"))
}

impl CoreLock {
    pub fn acquire(core: usize, holder: &str) -> Result<Self> {
        let dir = lock_dir();
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
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
