//! The clock a guest's time limits run on. Counts do not depend on the
//! host's load, but a limit in wall time does: a guest that boots in 30 s
//! on an idle host missed its 120 s while a build shared both cores, and a
//! sound compare failed. So a limit counts the wall time less the time the
//! emulator's busiest thread sat runnable, waiting for a CPU the host gave
//! to something else (the kernel's schedstat): what the guest could have
//! used. A guest that hangs still reaches it; one the host starves does not.

use std::time::{Duration, Instant};

pub struct GuestClock {
    pid: i32,
    start: Instant,
}

/// One thread's (time on a CPU, time runnable but waiting), in ns.
fn schedstat(path: &std::path::Path) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut f = text.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some((f.next()??, f.next()??))
}

impl GuestClock {
    pub fn start(pid: i32) -> Self {
        Self {
            pid,
            start: Instant::now(),
        }
    }

    /// The time the busiest thread waited for a CPU since it began, where
    /// the kernel keeps schedstat (else none, and the limit is wall time).
    fn starved(&self) -> Duration {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) else {
            return Duration::ZERO;
        };
        let busiest = tasks
            .filter_map(|t| schedstat(&t.ok()?.path().join("schedstat")))
            .max_by_key(|&(ran, _)| ran);
        Duration::from_nanos(busiest.map_or(0, |(_, waited)| waited))
    }

    /// Wall time since the start, less the time the host starved the guest.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed().saturating_sub(self.starved())
    }

    pub fn wall(&self) -> Duration {
        self.start.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn spin(cpu: usize) -> std::process::Child {
        Command::new("taskset")
            .args(["-c", &cpu.to_string(), "sh", "-c", "while :; do :; done"])
            .spawn()
            .unwrap()
    }

    /// Two spinners on one CPU each wait about half the time, so the
    /// clock of one runs at most about half the wall's pace (less where
    /// anything else shares that CPU: only the upper bound is asserted).
    #[test]
    fn a_starved_guest_clock_runs_slower_than_the_wall() {
        let mut a = spin(0);
        let mut b = spin(0);
        let clock = GuestClock::start(a.id() as i32);
        std::thread::sleep(Duration::from_millis(1500));
        let pace = clock.elapsed().as_secs_f64() / clock.wall().as_secs_f64();
        for c in [&mut a, &mut b] {
            c.kill().ok();
            c.wait().ok();
        }
        assert!(
            pace < 0.75,
            "a guest sharing its CPU kept {pace:.2} of the wall's pace"
        );
    }

    #[test]
    fn schedstat_reads_its_first_two_fields() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("schedstat");
        std::fs::write(&p, "447714154 67727050 1539\n").unwrap();
        assert_eq!(schedstat(&p), Some((447_714_154, 67_727_050)));
        std::fs::write(&p, "x").unwrap();
        assert_eq!(schedstat(&p), None);
    }
}
