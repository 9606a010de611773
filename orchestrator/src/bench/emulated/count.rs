//! What a window costs: the meter plugin's counts over a trial's windows
//! put in place of the guest's time, by the regime's rule.

use anyhow::{Context, Result};

use super::marks::Marks;
use crate::bench::host::trial::{EmulatedCounts, Measurement};
use crate::bench::meters::emulator::WorkloadRegime;

/// Puts the plugin's counts over `m`'s windows in place of the guest's
/// time: the server vCPU's live, the whole guest's for backlogs.
pub fn count_window(
    m: &mut Measurement,
    marks: &Marks,
    sut: usize,
    regime: WorkloadRegime,
) -> Result<()> {
    m.cost_per_connection = None;
    m.slice_costs.clear();
    if m.windows.is_empty() {
        return Ok(());
    }
    let (mut server, mut guest, mut syscalls) = (0, 0, None);
    for &[begin, end] in &m.windows {
        let w = marks.window(begin, end)?;
        if let Some(&n) = w.syscalls.get(sut) {
            *syscalls.get_or_insert(0) += n;
        }
        server += *w
            .per_vcpu
            .get(sut)
            .context("no count for the server's vCPU")?;
        guest += w.per_vcpu.iter().sum::<u64>();
    }
    m.emulated = Some(EmulatedCounts {
        server,
        generator: guest - server,
        guest,
    });
    let cost = match regime {
        WorkloadRegime::Live => server,
        _ => guest,
    };
    m.meter_delta.primary = cost;
    if regime == WorkloadRegime::Live && m.window_completed > 0 {
        m.syscalls_per_connection = syscalls.map(|n| n as f64 / m.window_completed as f64);
    }
    if m.gate.passed && m.window_completed > 0 {
        m.cost_per_connection = Some(cost as f64 / m.window_completed as f64);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cost_the_whole_guests_instructions_per_connection() {
        // Two windows: 2000 and 1000 instructions on vCPU 1; what ran
        // between them (snapshots 2 to 3) is not counted.
        let marks = Marks::parse(
            "MARK 1 1 vcpu=0 c0=1000 c1=500\nMARK 2 2 vcpu=0 c0=6000 c1=2500\n\
             MARK 3 1 vcpu=0 c0=7000 c1=9500\nMARK 4 2 vcpu=0 c0=10000 c1=10500\n\
             END 5 0 vcpu=0 c0=1 c1=1\n",
        )
        .unwrap();
        let mut m = Measurement {
            windows: vec![[1, 2], [3, 4]],
            window_completed: 100,
            cost_per_connection: Some(123.0),
            slice_costs: vec![1.0],
            ..Default::default()
        };
        m.gate.passed = true;
        count_window(&mut m, &marks, 1, WorkloadRegime::Backlog).unwrap();
        // The whole guest's 11000 over 100 connections.
        assert_eq!(m.cost_per_connection, Some(110.0));
        assert_eq!(m.emulated.unwrap().generator, 8000);
        assert!(
            m.slice_costs.is_empty(),
            "guest-time slices are not instructions"
        );
        // Live, the server vCPU's 3000 alone.
        count_window(&mut m, &marks, 1, WorkloadRegime::Live).unwrap();
        assert_eq!(m.cost_per_connection, Some(30.0));
        assert_eq!(m.meter_delta.primary, 3000);
        m.gate.passed = false;
        count_window(&mut m, &marks, 1, WorkloadRegime::Backlog).unwrap();
        assert_eq!(m.cost_per_connection, None, "a failed gate has no score");
    }
}
