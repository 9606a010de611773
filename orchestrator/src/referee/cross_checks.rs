//! What the table adds under its ratios, each a check on the measurement
//! as a whole rather than on one arm: the cgroups' CPU time against the
//! counters', the share of the SUT core no arm's counters saw, and whether
//! the generator rather than the servers set the pace.

use crate::referee::report::CompareReport;

/// The cgroups' CPU time against the counters' task-clock, all arms
/// together and per arm. Together they agree closely; per arm they do not
/// always, because cgroup accounting can charge one server's share of a
/// shared core to its neighbour (measured here: an idle-heavy server beside
/// a spinning one read 1.39, its neighbour 0.91, the sum 1.01), so this is
/// reported, not gated.
pub fn cgroup_cross_check(r: &CompareReport) -> String {
    let sums = |arm: Option<usize>| {
        let (mut cg, mut tc) = (0u64, 0u64);
        for (i, trials) in r.trials.iter().enumerate() {
            if arm.is_some_and(|a| a != i) {
                continue;
            }
            for t in trials {
                if let Some(c) = t.meter_delta.cgroup_ns {
                    cg += c;
                    tc += t.meter_delta.task_clock_ns;
                }
            }
        }
        (tc > 0).then(|| cg as f64 / tc as f64)
    };
    let Some(all) = sums(None) else {
        return String::new();
    };
    let per_arm: Vec<String> = (0..r.trials.len())
        .filter_map(|i| sums(Some(i)).map(|x| format!("{x:.2}")))
        .collect();
    format!(
        "cross-check: the servers' cgroups used {all:.3}x the CPU time their counters saw (per arm {}){}\n",
        per_arm.join(", "),
        if (all - 1.0).abs() > 0.1 {
            ": more than 10% apart, something on the core ran unmetered or the counters missed it"
        } else {
            ""
        }
    )
}

/// The share of the SUT core's busy time no arm's counters saw: what every
/// cost per connection leaves out.
pub fn unaccounted_share(r: &CompareReport) -> String {
    let mut unaccounted: Vec<f64> = r
        .trials
        .iter()
        .flatten()
        .filter_map(|t| t.sut_unaccounted)
        .collect();
    if unaccounted.is_empty() {
        return String::new();
    }
    unaccounted.sort_by(f64::total_cmp);
    format!(
        "\nSUT core: {:.1}% of its busy time (median over samples, range {:.1}-{:.1}%) ran in no arm: kernel threads, interrupts, other processes\n",
        100.0 * unaccounted[unaccounted.len() / 2],
        100.0 * unaccounted[0],
        100.0 * unaccounted[unaccounted.len() - 1]
    )
}

/// Where the generator, not the servers, set the pace: throughput then
/// says nothing of the servers.
pub fn generator_limit(r: &CompareReport) -> String {
    let busy = r
        .arms
        .iter()
        .filter_map(|a| a.generator_busy)
        .fold(0.0, f64::max);
    let sut = r.arms.iter().map(|a| a.sut_busy).fold(0.0, f64::max);
    if busy > 0.9 && sut < 0.9 {
        format!(
            "\nnote: the load generator used {:.0}% of its cores while the SUT core was at most {:.0}% busy: \
             the generator, not the server, is the limit; costs per connection remain comparable, throughput does not.\n",
            busy * 100.0,
            sut * 100.0
        )
    } else {
        String::new()
    }
}
