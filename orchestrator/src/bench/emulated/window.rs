//! How a restored guest gets its files: a shared-memory PCI device
//! (QEMU's `ivshmem-plain`) whose memory is a file on the host. The host
//! writes the arms' programs and the plan there, as a cpio archive, while
//! the restored guest is still paused; ratchet in the guest, which was
//! waiting in the snapshot, maps the device's memory, unpacks the archive
//! and goes on. The guest reads memory that is already there when it
//! resumes, so what it does next depends on nothing the host's timing
//! decides.
//!
//! Layout: a ready word at 0 (written last), the archive's length at 8,
//! the archive from [`DATA`].

use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The device's memory: a power of two, as ivshmem requires, and larger
/// than any arm's files (the Go control and its libraries are 3 MB).
pub const WINDOW_BYTES: u64 = 128 << 20;
const READY: u32 = 0x5243_4854;
const DATA: usize = 4096;
const VENDOR: &str = "0x1af4";
const DEVICE: &str = "0x1110";

/// QEMU's arguments for the device, its memory in `file`.
pub fn qemu_args(file: &Path) -> Vec<String> {
    vec![
        "-object".into(),
        format!(
            "memory-backend-file,id=window,mem-path={},size={WINDOW_BYTES},share=on",
            file.display()
        ),
        "-device".into(),
        // master=on: the device's memory is saved with the guest.
        "ivshmem-plain,memdev=window,master=on".into(),
    ]
}

/// An empty window for a guest about to start.
pub fn create(file: &Path) -> Result<()> {
    let f = std::fs::File::create(file).with_context(|| format!("creating {}", file.display()))?;
    f.set_len(WINDOW_BYTES)?;
    Ok(())
}

/// Puts `archive` in the window, the ready word last, for a guest that is
/// paused and reads it when it resumes.
pub fn deliver(file: &Path, archive: &[u8]) -> Result<()> {
    if (DATA + archive.len()) as u64 > WINDOW_BYTES {
        bail!(
            "the guest's files are {} MiB, more than its {} MiB window holds",
            archive.len() >> 20,
            WINDOW_BYTES >> 20
        );
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .with_context(|| format!("opening {}", file.display()))?;
    use std::io::{Seek, SeekFrom};
    f.seek(SeekFrom::Start(DATA as u64))?;
    f.write_all(archive)?;
    f.seek(SeekFrom::Start(8))?;
    f.write_all(&(archive.len() as u64).to_le_bytes())?;
    f.seek(SeekFrom::Start(0))?;
    f.write_all(&READY.to_le_bytes())?;
    Ok(())
}

/// In the guest: the device's memory, as sysfs exposes its BAR.
fn device() -> Result<PathBuf> {
    for d in std::fs::read_dir("/sys/bus/pci/devices").context("listing PCI devices")? {
        let d = d?.path();
        let read = |f: &str| std::fs::read_to_string(d.join(f)).unwrap_or_default();
        if read("vendor").trim() == VENDOR && read("device").trim() == DEVICE {
            return Ok(d.join("resource2"));
        }
    }
    bail!("the guest has no shared-memory device ({VENDOR}:{DEVICE})")
}

/// The pvpanic device's port: a write stops the machine where it is.
const PVPANIC_PORT: u16 = 0x505;

/// In the guest: stops the machine for its snapshot, at the same
/// instruction in every boot. A write to the pvpanic device pauses QEMU
/// (`-action panic=pause`) in the vCPU that wrote it, before the next
/// instruction; the host saves the machine there (`snapshot.rs`). A
/// snapshot stopped by the host instead would hold however many idle
/// wake-ups it had lived through, and two such snapshots of one boot gave
/// medians 0.4% apart.
fn stop_for_snapshot() -> Result<()> {
    // SAFETY: access to one I/O port, which QEMU handles.
    if unsafe { libc::ioperm(PVPANIC_PORT as libc::c_ulong, 1, 1) } != 0 {
        bail!(
            "ioperm for the pvpanic port: {}",
            std::io::Error::last_os_error()
        );
    }
    unsafe {
        std::arch::asm!("out dx, al", in("dx") PVPANIC_PORT, in("al") 1u8, options(nostack));
    }
    Ok(())
}

/// In the guest: stops for the snapshot, then, restored, unpacks the
/// host's archive under `/`.
pub fn receive() -> Result<()> {
    let path = device()?;
    stop_for_snapshot()?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let len = WINDOW_BYTES as usize;
    // SAFETY: a shared mapping of the device's memory, read only through
    // volatile loads while the host may write it.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        bail!(
            "mapping {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
    let base = base as *const u8;
    while unsafe { std::ptr::read_volatile(base as *const u32) } != READY {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let n = unsafe { std::ptr::read_volatile(base.add(8) as *const u64) } as usize;
    if DATA + n > len {
        bail!("the host's archive claims {n} bytes, more than the window");
    }
    let archive = unsafe { std::slice::from_raw_parts(base.add(DATA), n) }.to_vec();
    unpack(&archive, Path::new("/"))
}

/// Unpacks a newc archive of directories and regular files under `root`.
fn unpack(mut archive: &[u8], root: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    loop {
        let mut entry = cpio::newc::Reader::new(archive).context("reading the guest's archive")?;
        if entry.entry().is_trailer() {
            return Ok(());
        }
        let name = entry.entry().name().trim_start_matches('/').to_string();
        let mode = entry.entry().mode();
        let to = root.join(&name);
        if mode & 0o170000 == 0o040000 {
            std::fs::create_dir_all(&to)?;
        } else {
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let mut data = Vec::new();
            entry.read_to_end(&mut data)?;
            let _ = std::fs::remove_file(&to);
            std::fs::write(&to, &data).with_context(|| format!("writing {}", to.display()))?;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode & 0o7777))?;
        }
        archive = entry.finish()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::emulated::image::Image;

    #[test]
    fn an_archive_unpacks_to_the_files_it_was_made_of() {
        let dir = tempfile::tempdir().unwrap();
        let mut img = Image::default();
        img.bytes(Path::new("/a/b/plan.json"), b"{}".to_vec(), 0o644);
        img.bytes(Path::new("/run.sh"), b"#!/bin/sh\n".to_vec(), 0o755);
        let mut bytes = Vec::new();
        img.write_to(&mut bytes).unwrap();
        unpack(&bytes, dir.path()).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("a/b/plan.json")).unwrap(),
            b"{}"
        );
        let mode = std::fs::metadata(dir.path().join("run.sh"))
            .unwrap()
            .permissions()
            .mode();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode & 0o777, 0o755);
    }

    #[test]
    fn an_archive_larger_than_the_window_is_refused_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("w");
        create(&f).unwrap();
        let e = deliver(&f, &vec![0; WINDOW_BYTES as usize]).unwrap_err();
        assert!(e.to_string().contains("MiB window"), "{e}");
    }
}
