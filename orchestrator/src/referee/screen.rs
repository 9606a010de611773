//! A generation's screen: one measurement of the champion (arm 0) beside
//! several candidates, which ranks them and says which are worth judging.
//! The screen decides what the keep rule looks at, never what is kept: a
//! candidate it ranks first is judged in a measurement of its own.

use crate::bench::samples::Samples;
use crate::referee::compare::Comparison;
use crate::referee::verdict::Verdict;

/// Added to a screen's seed: judgements are seeded by attempt number, and
/// the candidate judged after a screen must be measured afresh.
pub const SEED: u64 = 1 << 32;

/// One candidate as the screen found it.
#[derive(Clone, Debug)]
pub struct Screened {
    pub vs_champion: Comparison,
    /// Its place among the candidates that passed their gates, cheapest
    /// first (1 is the best).
    pub rank: Option<usize>,
    /// Why it could not be ranked: a gate it or the champion failed.
    pub failed: Option<String>,
    /// Whether the keep rule should judge it: see [`worth_judging`].
    pub worth_judging: bool,
}

/// Whether a screened candidate is worth a judgement of its own: it
/// measured cheaper than the champion, and clearing the keep line is within
/// its screen's interval. One whose whole interval is short of the line
/// cannot be kept by a fresh measurement of the same size but by chance.
pub fn worth_judging(c: &Comparison, threshold: f64) -> bool {
    match (c.ratio_median, c.ratio_interval) {
        (Some(m), Some([lo, _])) => {
            c.verdict != Verdict::Invalid && m < 1.0 && lo <= 1.0 - threshold
        }
        _ => false,
    }
}

/// The candidates at `arms` of `samples`, in the order given, each with
/// its comparison to the champion at 95%, its rank and whether it is worth
/// judging. A champion that failed its gate leaves nothing ranked.
pub fn rank(samples: &Samples, arms: &[usize], threshold: f64) -> Vec<Screened> {
    let champion_failed = samples.gate_failures(&[(0, "the champion")]);
    let mut out: Vec<Screened> = arms
        .iter()
        .map(|&arm| {
            let vs_champion = samples.compare(arm, 0, threshold);
            let failed = champion_failed
                .clone()
                .or_else(|| samples.gate_failures(&[(arm, "the candidate")]));
            Screened {
                worth_judging: failed.is_none() && worth_judging(&vs_champion, threshold),
                vs_champion,
                rank: None,
                failed,
            }
        })
        .collect();
    let mut order: Vec<usize> = (0..out.len())
        .filter(|&i| out[i].failed.is_none() && out[i].vs_champion.ratio_median.is_some())
        .collect();
    order.sort_by(|&a, &b| {
        let m = |i: usize| out[i].vs_champion.ratio_median.unwrap_or(f64::INFINITY);
        m(a).total_cmp(&m(b))
    });
    for (place, i) in order.into_iter().enumerate() {
        out[i].rank = Some(place + 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::measuring::planted::Planted;
    use crate::bench::measuring::MeasuringHost;
    use crate::bench::servers::arm::Arm;
    use crate::bench::servers::launch::ServerCommand;

    /// Samples of arms whose true costs are `costs` (the champion first).
    fn screen(costs: &[f64], noise: f64) -> Samples {
        let arms: Vec<Arm> = costs
            .iter()
            .enumerate()
            .map(|(i, _)| Arm {
                label: format!("arm {i}"),
                command: ServerCommand::new("/bin/false".into(), vec![], &Default::default()),
                source_hash: None,
                binary_hash: None,
            })
            .collect();
        let host = Planted {
            costs: costs.to_vec(),
            noise,
            drift: 0.05,
        };
        let mut samples = Samples::new(arms.len());
        host.measure(&mut samples, &arms, 12, 1, &mut |_| {})
            .unwrap();
        samples
    }

    #[test]
    fn candidates_rank_cheapest_first_and_only_those_the_line_is_within_are_judged() {
        // A gain past a 3% line, one resolved but short of it, a loss.
        let s = screen(&[100.0, 90.0, 98.5, 105.0], 0.002);
        let r = rank(&s, &[2, 1, 3], 0.03);
        let ranks: Vec<Option<usize>> = r.iter().map(|x| x.rank).collect();
        assert_eq!(ranks, vec![Some(2), Some(1), Some(3)]);
        let judged: Vec<bool> = r.iter().map(|x| x.worth_judging).collect();
        assert_eq!(judged, vec![false, true, false]);
        assert!(r.iter().all(|x| x.failed.is_none()));
    }

    #[test]
    fn a_noisy_screen_judges_a_small_gain_the_line_is_within() {
        let s = screen(&[100.0, 98.5], 0.03);
        let r = rank(&s, &[1], 0.03);
        assert!(r[0].vs_champion.ratio_interval.unwrap()[0] <= 0.97);
        assert!(r[0].worth_judging);
    }
}
