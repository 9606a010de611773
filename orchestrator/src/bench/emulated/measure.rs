//! The host's side of an emulated measurement: the samples are shared out
//! over guests that run at once, each guest measures every arm in blocks
//! (a fresh server per trial, a fresh random order per block), and the
//! whole guest's instructions in each window, read from the meter plugin,
//! become that trial's cost per connection.
//!
//! Each guest's share is a [`job::Job`]: a server that crashes the guest
//! kernel is invalid, not a crash of ratchet.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::count;
use super::functions;
use super::guest::{self, GuestSettings};
use super::image::{self, Image};
use super::job;
use super::marks::Marks;
use super::symbols::KernelSymbols;
use super::vm;
use crate::bench::config::Schedule;
use crate::bench::emulated::batch::BatchSettings;
use crate::bench::emulated::live::LiveSettings;
use crate::bench::host::trial::TrialSettings;
use crate::bench::load::gate::GateConfig;
use crate::bench::measuring::MeasuringHost;
use crate::bench::meters::emulator::{Emulator, WorkloadRegime};
use crate::bench::regime::{LiveLoad, Regime, RegimeRecord};
use crate::bench::samples::{verify, Samples, Step};
use crate::bench::servers::arm::Arm;

/// How many guests share `samples`: one per host core unless configured
/// (one at a time live: a live guest's vCPUs run on every host core at
/// once, and guests beside it would take their time), and never more than
/// there are samples.
fn guests(e: &Emulator, samples: usize) -> usize {
    let g = match (e.config.guests, e.config.workload()) {
        (0, WorkloadRegime::Live) => 1,
        (0, _) => vm::host_cores(),
        (n, _) => n,
    };
    g.clamp(1, samples.max(1))
}

/// `n` samples shared out over `guests` as evenly as can be.
pub fn shares(n: usize, guests: usize) -> Vec<usize> {
    (0..guests)
        .map(|g| n / guests + usize::from(g < n % guests))
        .filter(|&k| k > 0)
        .collect()
}

/// Measurements this process has made: a second look at the same arms
/// with the same seed (the A/A check's) would otherwise boot identical
/// guests and count the same instructions again.
static MEASUREMENTS: AtomicU64 = AtomicU64::new(0);

/// A guest's seed: QEMU's (the guest kernel's randomness: address-space
/// layout, TCP sequence numbers, hash seeds) and its block orders. Every
/// guest of every measurement differs, so samples are perturbed, never
/// identical repeats; a command's measurements are the same for a seed.
fn guest_seed(seed: u64, measurement: u64, first_sample: usize, guest: usize) -> u64 {
    let mut h = seed ^ 0x9e37_79b9_7f4a_7c15;
    for x in [measurement, first_sample as u64, guest as u64] {
        h = (h ^ x).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= h >> 31;
    }
    h & 0x7fff_ffff
}

/// The trial settings in guest time.
pub fn guest_settings(e: &Emulator, s: &TrialSettings) -> GuestSettings {
    let c = &e.config;
    let live = c.workload() == WorkloadRegime::Live;
    GuestSettings {
        vcpus: c.guest_vcpus(),
        regime: c.workload(),
        ready_timeout_ms: s.ready_timeout.as_millis() as u64,
        stop_grace_ms: s.stop_grace.as_millis() as u64,
        batch: BatchSettings {
            backlog: c.backlog,
            batches: c.batches,
            warmup_batches: c.warmup_batches,
            timeout: Duration::from_millis(c.batch_timeout_ms),
        },
        live: LiveSettings {
            warmup_connections: c.warmup_connections,
            window_connections: c.window_connections,
            stall: s.connection_timeout,
            profile_connections: c.profile_connections,
        },
        connections: s.connections,
        connection_timeout_ms: s.connection_timeout.as_millis() as u64,
        gate: GateConfig {
            // Every scored connection is counted exactly: a trial needs
            // its whole window served, not a timed window's worth (the
            // live window's length is jittered down by up to a quarter).
            min_completed: if live {
                c.window_connections - c.window_connections / 4
            } else {
                (c.backlog * c.batches) as u64
            },
            ..s.gate.clone()
        },
        contract: (*s.contract).clone(),
        open_files: open_files(),
    }
}

/// The regime of an emulated measurement. Backlogs: every server serves
/// backlogs queued while it was stopped, so it has work from its first
/// accept to its last close, and nothing but the clients' looking runs
/// beside it. Live: clients hold `load.connections` in flight beside it,
/// and each window shows whether it was busy (`live::MIN_BUSY`).
pub fn regime(e: &Emulator, s: &TrialSettings) -> RegimeRecord {
    let live = e.config.workload() == WorkloadRegime::Live;
    RegimeRecord {
        regime: Regime::Saturated,
        backlog: (!live).then_some(e.config.backlog as u64),
        live: live.then(|| LiveLoad {
            connections: s.connections as u64,
            vcpus: e.config.guest_vcpus() as u64,
            nohz_full: e.config.nohz_full,
        }),
        warning: (s.saturation.regime == Regime::Idle).then(|| {
            "saturation.regime = \"idle\" does not apply to the emulated meter: its servers serve backlogs".into()
        }),
        ..Default::default()
    }
}

/// The soft limit on open files ratchet's servers get on this host.
fn open_files() -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) };
    // The guest kernel's own ceiling (fs.nr_open).
    l.rlim_cur.min(1 << 20)
}

/// Guests in an emulator as a measuring host.
pub struct Emulated<'a> {
    pub emulator: &'a Emulator,
    pub settings: &'a TrialSettings,
}

impl MeasuringHost for Emulated<'_> {
    /// Guests ration by their own rule, emulated capacity is steady and
    /// each guest gates its own arms: nothing to screen or wait for.
    fn settle(&self, samples: &mut Samples, _: &[Arm], _: Duration) -> Result<Vec<f64>> {
        samples.regime = Some(regime(self.emulator, self.settings));
        Ok(Vec::new())
    }

    fn measure(
        &self,
        samples: &mut Samples,
        arms: &[Arm],
        count: usize,
        seed: u64,
        on_step: &mut dyn FnMut(Step<'_>),
    ) -> Result<()> {
        measure(
            samples,
            arms,
            count,
            seed,
            self.emulator,
            self.settings,
            on_step,
        )
    }
}

/// Measures `n` more samples of every arm in emulated guests.
pub(super) fn measure(
    samples: &mut Samples,
    arms: &[Arm],
    n: usize,
    seed: u64,
    e: &Emulator,
    settings: &TrialSettings,
    on_step: &mut dyn FnMut(Step<'_>),
) -> Result<()> {
    for arm in arms {
        verify(arm)?;
    }
    samples.schedule = Some(Schedule::Blocks);
    let first = samples.count();
    let measurement = MEASUREMENTS.fetch_add(1, Ordering::SeqCst);
    let shares = shares(n, guests(e, n));
    on_step(Step {
        block: first + 1,
        sample_count: first + n,
        arm: &format!("every arm, in {} emulated guests", shares.len()),
        done: 0,
        so_far: samples,
    });
    let work = tempfile::Builder::new()
        .prefix("ratchet-guests-")
        .tempdir()
        .context("creating a directory for the guests")?;
    if samples.regime.is_none() {
        samples.regime = Some(regime(e, settings));
    }
    let regime = samples.regime.clone();
    let results: Vec<Result<Samples>> = std::thread::scope(|scope| {
        let handles: Vec<_> = shares
            .iter()
            .enumerate()
            .map(|(g, &k)| {
                let dir = work.path().join(format!("guest-{g}"));
                let regime = regime.clone();
                let seed = guest_seed(seed, measurement, first, g);
                scope.spawn(move || {
                    let plan = job::Job {
                        e,
                        arms,
                        samples: k,
                        seed,
                        settings: guest_settings(e, settings),
                        regime,
                    };
                    plan.run(&dir)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a guest thread panicked"))
            .collect()
    });
    for r in results {
        let got = r?;
        samples.orders.extend(got.orders);
        for (arm, trials) in got.trials.into_iter().enumerate() {
            samples.trials[arm].extend(trials);
        }
    }
    // Kept for a failed guest or when asked: its console, channel and
    // plugin output are the evidence.
    if std::env::var_os("RATCHET_KEEP_GUESTS").is_some()
        || samples.trials.iter().flatten().any(|m| !m.gate.passed)
    {
        let kept = work.keep();
        eprintln!("ratchet: the guests' files are kept in {}", kept.display());
    }
    Ok(())
}

/// What every guest holds: busybox, its init, and ratchet with the
/// libraries it loads. `dir` holds the guest's copy of ratchet.
pub fn base_image(e: &Emulator, dir: &Path) -> Result<Image> {
    let mut img = Image::default();
    img.file(Path::new("/bin/busybox"), &e.busybox)?;
    img.bytes(Path::new("/init"), guest::init_script().into_bytes(), 0o755);
    let ratchet = guest_ratchet(dir)?;
    img.file(Path::new(guest::RATCHET_PATH), &ratchet)?;
    for lib in image::libraries(&ratchet)? {
        img.file(&lib, &lib)?;
    }
    for d in ["/proc", "/sys", "/dev", "/tmp"] {
        img.dir(Path::new(d));
    }
    Ok(img)
}

/// ratchet as the guest runs it: this executable without its debug
/// sections, which nothing in the guest reads. The guest kernel copies the
/// whole initramfs into memory before init runs, in emulated instructions:
/// with the release build's line tables ratchet was 93 MB of a 98 MB image,
/// and unpacking it cost a quarter of a billion of a guest's 3.5 billion
/// instructions.
fn guest_ratchet(dir: &Path) -> Result<PathBuf> {
    let exe = std::env::current_exe().context("finding ratchet's own executable")?;
    let copy = dir.join("ratchet");
    let out = std::process::Command::new("objcopy")
        .arg("--strip-debug")
        .arg(&exe)
        .arg(&copy)
        .output()
        .context("running objcopy for the guest's copy of ratchet (Debian: binutils)")?;
    if !out.status.success() {
        bail!(
            "objcopy --strip-debug {} failed: {}",
            exe.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(copy)
}

/// The host files an arm runs: its program, and for a shell command line
/// every program the line names.
pub(super) fn programs_of(arm: &Arm) -> Vec<PathBuf> {
    let c = &arm.command;
    if c.program.ends_with("sh") && c.args.first().is_some_and(|a| a == "-c") {
        return c
            .args
            .get(1)
            .map(|l| image::programs_in(l))
            .unwrap_or_default();
    }
    vec![c.program.clone()]
}

/// The samples the guest reported, each window's cost replaced by the
/// whole guest's instructions per connection.
pub(super) fn guest_samples(
    channel: &[String],
    marks: &Marks,
    marks_path: &Path,
    e: &Emulator,
) -> Result<Samples> {
    if let Some(err) = channel.iter().find_map(|l| l.strip_prefix("ERROR ")) {
        bail!("ratchet in the guest failed: {err}");
    }
    let json = channel
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("RESULT "))
        .context("the guest powered off without reporting a result")?;
    let mut samples: Samples = serde_json::from_str(json).context("parsing the guest's result")?;
    let (sut, regime) = (e.config.sut_vcpu(), e.config.workload());
    for m in samples.trials.iter_mut().flatten() {
        count::count_window(m, marks, sut, regime)
            .with_context(|| format!("{}", marks_path.display()))?;
    }
    Ok(samples)
}

/// Names the functions of every profiled window of `samples`, from the
/// plugin's profile in `dir` and the kernel symbols the guest sent.
pub(super) fn name_profiles(
    samples: &mut Samples,
    channel: &[String],
    dir: &Path,
    e: &Emulator,
) -> Result<()> {
    if !samples
        .trials
        .iter()
        .flatten()
        .any(|m| m.profile_window.is_some())
    {
        return Ok(());
    }
    let path = dir.join(vm::PROFILE_FILE);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let sections = functions::sections(&text).with_context(|| format!("{}", path.display()))?;
    let kernel = KernelSymbols::from_lines(channel.iter().map(String::as_str));
    if kernel.is_empty() {
        bail!("the guest sent no kernel symbols for its profile");
    }
    let regime = regime_label(e);
    for m in samples.trials.iter_mut().flatten() {
        let Some(w) = &m.profile_window else { continue };
        let blocks = sections.get(&w.marks[1]).with_context(|| {
            format!(
                "{}: no profile closed by marker {}",
                path.display(),
                w.marks[1]
            )
        })?;
        m.profile = Some(functions::profile(
            blocks,
            e.config.sut_vcpu(),
            w,
            &kernel,
            regime.clone(),
        ));
    }
    Ok(())
}

/// What a profile says it was taken in.
fn regime_label(e: &Emulator) -> String {
    format!(
        "emulated, {} regime: vCPU {} alone, the server's, of {} vCPUs",
        e.config.workload().name(),
        e.config.sut_vcpu(),
        e.config.guest_vcpus()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_shared_evenly_and_every_guest_gets_some() {
        assert_eq!(shares(12, 2), vec![6, 6]);
        assert_eq!(shares(7, 2), vec![4, 3]);
        assert_eq!(shares(1, 2), vec![1]);
        assert_eq!(shares(6, 4), vec![2, 2, 1, 1]);
    }

    #[test]
    fn every_guest_is_seeded_apart() {
        let seeds: std::collections::HashSet<u64> = (0..4)
            .flat_map(|f| (0..3).map(move |g| guest_seed(1, 0, f * 6, g)))
            .collect();
        assert_eq!(seeds.len(), 12);
        assert_ne!(
            guest_seed(1, 0, 0, 0),
            guest_seed(1, 1, 0, 0),
            "a second look differs"
        );
        assert_eq!(guest_seed(1, 1, 0, 0), guest_seed(1, 1, 0, 0));
    }
}
