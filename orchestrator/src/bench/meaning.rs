//! Which measurement settings a meter and its regime use. A flag the
//! measuring host ignores is refused, not accepted: `compare --connections
//! 32` under the emulated backlog once printed the default's counts to the
//! instruction, and nothing said the flag had not been used.

use anyhow::{bail, Result};

use crate::bench::meters::emulator::WorkloadRegime;
use crate::bench::meters::meter::MeterPlan;

/// A measurement setting given on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    WindowMs,
    WarmupMs,
    Connections,
    ScheduleDuet,
    RegimeIdle,
}

/// Why `s` means nothing under `plan`'s meter and regime, or None where it
/// takes effect.
pub fn ignored(plan: &MeterPlan, s: Setting) -> Option<String> {
    let e = plan.emulator.as_ref()?;
    let live = e.config.workload() == WorkloadRegime::Live;
    let regime = if live { "live" } else { "backlog" };
    let why = match s {
        Setting::WindowMs if live => "a live trial counts emulator.window_connections connections, not a timed window".into(),
        Setting::WindowMs => "a backlog trial counts emulator.batches backlogs, not a timed window".into(),
        Setting::WarmupMs if live => "a live trial warms up on emulator.warmup_connections connections, not for a time".into(),
        Setting::WarmupMs => "a backlog trial warms up on emulator.warmup_batches backlogs, not for a time".into(),
        Setting::Connections if live => return None,
        Setting::Connections => format!(
            "a backlog of emulator.backlog ({}) connections is queued while the server is stopped; no client is in flight (emulator.regime = \"live\" holds load.connections in flight)",
            e.config.backlog
        ),
        Setting::ScheduleDuet => "every arm is measured in blocks, in guests of its own".into(),
        Setting::RegimeIdle => "its servers always have work: a backlog, or clients that out-run them".into(),
    };
    Some(format!("under the emulated meter ({regime} regime), {why}"))
}

/// Refuses the first of `given` (each a flag and its setting) that `plan`
/// ignores, naming the flag.
pub fn refuse_ignored(plan: &MeterPlan, given: &[(&str, Setting)]) -> Result<()> {
    for (flag, s) in given {
        if let Some(why) = ignored(plan, *s) {
            bail!("{flag} has no effect: {why}; leave it out");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::meters::emulator::{Emulator, EmulatorConfig};
    use crate::bench::meters::meter::{MeterEvent, MeterSource};
    use std::sync::Arc;

    fn plan(emulated: Option<WorkloadRegime>) -> MeterPlan {
        let emulator = emulated.map(|regime| {
            Arc::new(Emulator {
                qemu: "qemu".into(),
                qemu_version: String::new(),
                kernel: "vmlinuz".into(),
                kernel_package: String::new(),
                busybox: "busybox".into(),
                plugin: "plugin.so".into(),
                plugin_sha256: String::new(),
                config: EmulatorConfig {
                    regime,
                    ..Default::default()
                },
            })
        });
        MeterPlan {
            event: MeterEvent::Instructions,
            source: if emulator.is_some() {
                MeterSource::Emulated
            } else {
                MeterSource::Pmu
            },
            emulator,
            reason: "test".into(),
            syscalls_tracepoint: None,
            sut_core: 1,
            cores: 2,
            drift: 0.0,
        }
    }

    const ALL: [Setting; 5] = [
        Setting::WindowMs,
        Setting::WarmupMs,
        Setting::Connections,
        Setting::ScheduleDuet,
        Setting::RegimeIdle,
    ];

    #[test]
    fn the_host_uses_every_setting() {
        let host = plan(None);
        assert!(ALL.iter().all(|&s| ignored(&host, s).is_none()));
    }

    /// The live regime holds clients in flight; the backlog has none.
    #[test]
    fn only_the_live_regime_uses_connections_and_neither_uses_a_window() {
        let live = plan(Some(WorkloadRegime::Live));
        let backlog = plan(Some(WorkloadRegime::Backlog));
        assert!(ignored(&live, Setting::Connections).is_none());
        for s in ALL {
            assert!(ignored(&backlog, s).is_some(), "{s:?}");
            if s != Setting::Connections {
                assert!(ignored(&live, s).is_some(), "{s:?}");
            }
        }
    }

    #[test]
    fn a_refusal_names_the_flag_and_the_regime() {
        let backlog = plan(Some(WorkloadRegime::Backlog));
        let e = refuse_ignored(&backlog, &[("--connections", Setting::Connections)]).unwrap_err();
        let e = e.to_string();
        assert!(e.starts_with("--connections has no effect"), "{e}");
        assert!(
            e.contains("backlog regime") && e.contains("emulator.backlog"),
            "{e}"
        );
        assert!(refuse_ignored(&plan(None), &[("--connections", Setting::Connections)]).is_ok());
    }
}
