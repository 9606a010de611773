//! A warm start: the guest kernel boots once per machine, and every guest
//! after that is restored from a snapshot of it, waiting for its files.
//!
//! A boot costs 1.7 G emulated instructions, and far more host time than
//! its count suggests: the kernel calibrates its APIC timer and checks its
//! timers by spinning on the TSC with `pause`, and under icount each
//! `pause` leaves the translated code (the boot's profile by guest
//! function, in benchmarks/runs/warm-start-20261207T202500Z). A boot took
//! 16-25 s of a small measurement's 27-31 s; a restore takes under a second.
//!
//! The snapshot is keyed by everything it was made of: QEMU's version, the
//! kernel, the base image (busybox, its init, this ratchet) and the
//! machine's arguments. A restored guest is then seeded apart by QEMU's
//! seed and by reseeding its kernel's generator from the plan's seed.

use anyhow::{bail, Context, Result};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::clock::GuestClock;
use super::measure::base_image;
use super::qmp::Qmp;
use super::vm::{self, Killed, QMP, WINDOW};
use super::window;
use crate::bench::meters::emulator::{cache_dir, Emulator};
use crate::interrupt;

/// A booted guest, saved.
pub struct Warm {
    /// QEMU's saved state.
    pub state: PathBuf,
    /// The base image it booted from: a restore names the same.
    pub initrd: PathBuf,
    /// The state file's inode: which snapshot this was, should it need to
    /// be discarded while another guest makes a new one.
    ino: u64,
}

/// Snapshots kept: one per build of ratchet and machine; the oldest go.
const KEPT: usize = 6;

/// The snapshot of `e`'s machine, booted and saved the first time it is
/// asked for. Guests that ask at once wait for the first.
pub fn warm(e: &Emulator) -> Result<Warm> {
    let root = cache_dir().join("guest-snapshots");
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let staging = tempfile::tempdir_in(&root)?;
    let (key, initrd) = machine_image(e, staging.path())?;
    let dir = root.join(&key);
    let lock = std::fs::File::create(root.join(format!("{key}.lock")))?;
    lock.lock()
        .with_context(|| format!("locking the snapshot {}", dir.display()))?;
    let (state, initrd_path) = (dir.join("state"), dir.join("initrd.cpio"));
    if let Ok(m) = std::fs::metadata(&state) {
        let now = std::fs::FileTimes::new().set_modified(std::time::SystemTime::now());
        let _ = std::fs::File::open(&dir).and_then(|d| d.set_times(now));
        return Ok(Warm {
            state,
            initrd: initrd_path,
            ino: m.ino(),
        });
    }
    let fresh = staging.path().join("snapshot");
    std::fs::create_dir_all(&fresh)?;
    std::fs::write(fresh.join("initrd.cpio"), initrd.as_slice())?;
    tracing::info!("booting the guest kernel once, for {}", dir.display());
    boot_and_save(e, &fresh)?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&fresh, &dir)
        .with_context(|| format!("moving the snapshot to {}", dir.display()))?;
    prune(&root);
    Ok(Warm {
        ino: std::fs::metadata(&state)?.ino(),
        state,
        initrd: initrd_path,
    })
}

/// Removes `warm`, which did not load, unless another guest has already
/// replaced it.
pub fn discard(warm: &Warm) -> Result<()> {
    let dir = warm.state.parent().context("a snapshot's directory")?;
    let lock = std::fs::File::create(dir.with_extension("lock"))?;
    lock.lock()?;
    if std::fs::metadata(&warm.state).is_ok_and(|m| m.ino() == warm.ino) {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(())
}

/// A machine's QEMU arguments, its key and its base image.
type Made = (Vec<OsString>, String, Arc<Vec<u8>>);

/// The machine's key and base image, made once per process and machine:
/// stripping ratchet and hashing the kernel and the image read 120 MB,
/// and every guest of every measurement asks.
fn machine_image(e: &Emulator, scratch: &Path) -> Result<(String, Arc<Vec<u8>>)> {
    static MADE: Mutex<Vec<Made>> = Mutex::new(Vec::new());
    let machine = vm::machine(e, Path::new("/guest"), Path::new("/initrd"));
    let mut made = MADE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, key, initrd)) = made.iter().find(|(m, _, _)| *m == machine) {
        return Ok((key.clone(), initrd.clone()));
    }
    let mut initrd = Vec::new();
    base_image(e, scratch)?.write_to(&mut initrd)?;
    let key = key(e, &initrd)?;
    let initrd = Arc::new(initrd);
    made.push((machine, key.clone(), initrd.clone()));
    Ok((key, initrd))
}

/// What the snapshot depends on, hashed.
fn key(e: &Emulator, initrd: &[u8]) -> Result<String> {
    let mut h = Sha256::new();
    h.update(e.qemu_version.as_bytes());
    h.update(
        std::fs::read(&e.kernel)
            .with_context(|| format!("reading emulator.kernel {}", e.kernel.display()))?,
    );
    h.update(initrd);
    for a in vm::machine(e, Path::new("/guest"), Path::new("/initrd")) {
        h.update(a.as_encoded_bytes());
        h.update([0]);
    }
    Ok(format!("{:x}", h.finalize())[..16].to_string())
}

/// Boots the base image in `dir` until ratchet in it stops the machine,
/// and saves it to `dir/state`.
fn boot_and_save(e: &Emulator, dir: &Path) -> Result<()> {
    window::create(&dir.join(WINDOW))?;
    let stderr = dir.join("qemu.stderr");
    let mut c = vm::command(e, dir, &dir.join("initrd.cpio"), 0, None);
    c.stderr(std::fs::File::create(&stderr)?)
        .stdout(Stdio::null());
    let mut child = Killed(
        c.spawn()
            .with_context(|| format!("starting {}", e.qemu.display()))?,
    );
    let clock = GuestClock::start(child.0.id() as i32);
    let boot = Duration::from_secs(e.config.boot_timeout_s);
    let mut q = Qmp::connect(&dir.join(QMP), Duration::from_secs(30))?;
    loop {
        if let Some(status) = child.0.try_wait()? {
            bail!(
                "the guest for the snapshot ended as it booted ({status}): console {}, {}",
                dir.join("console.log").display(),
                std::fs::read_to_string(&stderr).unwrap_or_default().trim()
            );
        }
        // Ratchet in the guest stopped it (`window::receive`).
        if q.execute("query-status", json!({}))?["status"] == "guest-panicked" {
            break;
        }
        if clock.elapsed() > boot {
            bail!(
                "the guest did not boot within {} s (emulator.boot_timeout_s) of the time the host let it run (console {})",
                e.config.boot_timeout_s,
                dir.join("console.log").display()
            );
        }
        interrupt::check()?;
        std::thread::sleep(Duration::from_millis(50));
    }
    let state = dir.join("state");
    q.execute(
        "migrate",
        json!({ "uri": format!("file:{}", state.display()) }),
    )?;
    let done = q.until("query-migrate", |v| {
        matches!(
            v["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        )
    })?;
    if done["status"] != "completed" {
        bail!(
            "saving the booted guest to {}: {}",
            state.display(),
            done["error-desc"].as_str().unwrap_or("failed")
        );
    }
    let _ = q.execute("quit", json!({}));
    let _ = child.0.wait();
    let _ = std::fs::remove_file(dir.join(WINDOW));
    let _ = std::fs::remove_file(dir.join(QMP));
    Ok(())
}

/// Removes all but the [`KEPT`] most recently used snapshots.
fn prune(root: &Path) {
    let mut dirs: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|d| d.path().join("state").is_file())
        .filter_map(|d| Some((d.metadata().ok()?.modified().ok()?, d.path())))
        .collect();
    dirs.sort();
    let extra = dirs.len().saturating_sub(KEPT);
    for (_, d) in dirs.into_iter().take(extra) {
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::remove_file(d.with_extension("lock"));
    }
}
