//! `ratchet ablate`: leave-one-out over a run's kept mutations. Each kept
//! change is reverted from the final champion and the result measured side by
//! side with the champion, which gives each change's contribution in the final
//! combination (not the one it showed when it was kept, against an older
//! champion). Pairs are reverted together too: when removing both costs
//! something other than the two single removals predict, the pair interacts.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::bench::environment::{self, Fingerprint};
use crate::bench::samples::Samples;
use crate::record::lineage;
use crate::record::recorded::RecordedRun;
use crate::referee::compare::{ArmSummary, Comparison};
use crate::referee::figures::{arm_medians, fmt_estimate, fmt_ratio};
use crate::referee::stats;
use crate::referee::verdict::Verdict;
use crate::review::progress;
use crate::session::Session;

/// One kept change, judged in the final combination.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Contribution {
    pub attempt: usize,
    pub hypothesis: String,
    /// Its ratio to the champion it was kept against.
    pub recorded_ratio: Option<f64>,
    #[serde(alias = "recorded_ci95")]
    pub recorded_interval: Option<[f64; 2]>,
    /// cost(champion) / cost(champion without it): below 1, the change helps.
    pub in_final: Option<Comparison>,
    /// contributes | nothing measurable | now costs | invalid | not revertible
    pub finding: String,
    pub note: Option<String>,
}

impl Contribution {
    /// attempt, ratio when kept with its interval, ratio in the final
    /// champion with its interval, finding: the row both renderings show.
    pub fn cells(&self) -> [String; 4] {
        let f = self.in_final.as_ref();
        [
            self.attempt.to_string(),
            fmt_estimate(self.recorded_ratio, self.recorded_interval),
            fmt_estimate(
                f.and_then(|f| f.ratio_median),
                f.and_then(|f| f.ratio_interval),
            ),
            self.finding.clone(),
        ]
    }
}

/// Whether two kept changes interact in the final combination.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Interaction {
    pub attempts: [usize; 2],
    /// Per block: r(both removed) / (r(first removed) x r(second removed)),
    /// each r a cost ratio to the champion. 1 means independent.
    pub factor: Option<f64>,
    pub factor_ci95: Option<[f64; 2]>,
    pub interacts: bool,
    pub description: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AblationRecord {
    pub run_id: String,
    pub ablated_at: String,
    pub champion_attempt: usize,
    pub threshold: f64,
    #[serde(alias = "blocks")]
    pub sample_count: usize,
    pub unit: String,
    pub fingerprint: Fingerprint,
    pub arms: Vec<ArmSummary>,
    pub contributions: Vec<Contribution>,
    pub pairs: Vec<Interaction>,
    pub samples: Samples,
}

/// What the measurement of a change says about it in the final combination
/// (`c` is cost(champion) / cost(champion without it)). Both directions need
/// an effect of at least the threshold and an interval clear of 1, as the
/// keep rule does: anything less is not resolved here.
pub fn finding(c: &Comparison, threshold: f64) -> &'static str {
    match (c.verdict, c.ratio_median, c.ratio_interval) {
        (Verdict::Invalid, _, _) => "invalid",
        (Verdict::Better, _, _) => "contributes",
        (_, Some(m), Some([lo, _])) if lo > 1.0 && m >= 1.0 / (1.0 - threshold) => "now costs",
        _ => "nothing measurable",
    }
}

/// Per-block interaction factors of a pair, from costs per block of the
/// champion, each single removal and the double removal.
pub fn interaction(
    champion: &[Option<f64>],
    first: &[Option<f64>],
    second: &[Option<f64>],
    both: &[Option<f64>],
) -> Vec<f64> {
    (0..champion.len())
        .filter_map(|b| {
            let (c, i, j, ij) = (champion[b]?, first[b]?, second[b]?, both[b]?);
            Some((ij / c) / ((i / c) * (j / c)))
        })
        .collect()
}

pub fn describe(factor: f64, interacts: bool) -> String {
    if !interacts {
        "no interaction resolved: removing both costs about what the two removals predict".into()
    } else if factor > 1.0 {
        format!(
            "overlap: removing both costs {factor:.2}x what the single removals predict; \
             each covers for the other, so one only helps without the other"
        )
    } else {
        format!(
            "synergy: removing both costs {factor:.2}x what the single removals predict; \
             one only helps with the other"
        )
    }
}

pub struct Ablation<'a> {
    pub session: &'a Session,
    pub repo: &'a git2::Repository,
    pub run: &'a RecordedRun,
    pub seed: u64,
    pub pairs: bool,
}

impl Ablation<'_> {
    /// The champion's tree without the kept changes at `steps` (lineage
    /// indices), reverted newest first.
    fn without(&self, trees: &[git2::Oid], steps: &[usize]) -> Result<git2::Oid> {
        let mut tree = *trees.last().expect("a lineage has its base");
        for &i in steps.iter().rev() {
            tree = lineage::carry_over(self.repo, trees[i], tree, trees[i - 1])
                .context("later changes edit the same lines")?;
        }
        Ok(tree)
    }

    pub fn run(&self) -> Result<AblationRecord> {
        let (lineage, trees) = lineage::with_trees(self.repo, self.run)?;
        let k = lineage.steps.len() - 1;
        let threshold = self.session.config().compare.threshold;
        let mut built = self.build_arms(&lineage, &trees)?;
        let sample_count = self.session.config().compare.samples;
        let mut samples = Samples::new(built.arms.len());
        if built.arms.len() > 1 {
            progress::measure(
                self.session,
                &self.session.trial_settings(),
                &built.arms,
                sample_count,
                self.seed,
                &mut samples,
                "ablating: ",
            )?;
        }
        let arms_of: Vec<Option<usize>> = (1..=k).map(|i| built.arm_of(&[i])).collect();
        for (a, c) in arms_of.into_iter().zip(built.contributions.iter_mut()) {
            let Some(a) = a else { continue };
            let cmp = samples.compare(0, a, threshold);
            c.finding = finding(&cmp, threshold).into();
            c.note = note(c.recorded_ratio, &c.finding, threshold);
            c.in_final = Some(cmp);
        }
        let pairs = interactions(&built, &samples, &lineage, threshold);
        Ok(AblationRecord {
            run_id: self.run.run.run_id.clone(),
            ablated_at: crate::clock::now_utc(),
            champion_attempt: lineage.steps[k].attempt,
            threshold,
            sample_count,
            unit: self.session.plan.event.unit().into(),
            fingerprint: environment::fingerprint(
                &self.session.plan,
                None,
                built.arms[0].source_hash.clone(),
            ),
            arms: built
                .arms
                .iter()
                .enumerate()
                .map(|(i, a)| samples.arm_summary(i, &a.label))
                .collect(),
            contributions: built.contributions,
            pairs,
            samples,
        })
    }

    /// The champion, and the champion without each kept change (and
    /// without each pair, with `pairs`): every one that can be reverted
    /// and built. A change that cannot says why in its contribution.
    fn build_arms(&self, lineage: &lineage::Lineage, trees: &[git2::Oid]) -> Result<Built> {
        let k = lineage.steps.len() - 1;
        let workspace = &self.session.workspace;
        let mut built = Built {
            arms: vec![workspace.prepare_tree(self.repo, trees[k], "champion")?],
            index: Vec::new(),
            contributions: Vec::new(),
        };
        for i in 1..=k {
            let step = &lineage.steps[i];
            let mut c = Contribution {
                attempt: step.attempt,
                hypothesis: step.hypothesis.clone(),
                recorded_ratio: step.ratio,
                recorded_interval: step.interval,
                in_final: None,
                finding: "not revertible".into(),
                note: None,
            };
            let label = format!("without #{}", step.attempt);
            match self
                .without(trees, &[i])
                .and_then(|t| workspace.prepare_tree(self.repo, t, &label))
            {
                Ok(arm) => built.push(vec![i], arm),
                Err(e) => c.note = Some(format!("{e:#}")),
            }
            built.contributions.push(c);
        }
        if self.pairs {
            for i in 1..=k {
                for j in i + 1..=k {
                    let label = format!(
                        "without #{} #{}",
                        lineage.steps[i].attempt, lineage.steps[j].attempt
                    );
                    if let Ok(arm) = self
                        .without(trees, &[i, j])
                        .and_then(|t| workspace.prepare_tree(self.repo, t, &label))
                    {
                        built.push(vec![i, j], arm);
                    }
                }
            }
        }
        Ok(built)
    }
}

/// The arms an ablation measures: the champion first, then one per removal
/// set that could be built, with each set's arm index.
struct Built {
    arms: Vec<crate::bench::servers::arm::Arm>,
    index: Vec<(Vec<usize>, usize)>,
    contributions: Vec<Contribution>,
}

impl Built {
    fn push(&mut self, set: Vec<usize>, arm: crate::bench::servers::arm::Arm) {
        self.index.push((set, self.arms.len()));
        self.arms.push(arm);
    }

    fn arm_of(&self, set: &[usize]) -> Option<usize> {
        self.index.iter().find(|(s, _)| s == set).map(|(_, a)| *a)
    }
}

/// What a change that helped when it was kept, and does not help now,
/// should tell the reader: the combination changed its worth.
fn note(recorded_ratio: Option<f64>, finding: &str, threshold: f64) -> Option<String> {
    let helped = recorded_ratio.is_some_and(|r| r <= 1.0 - threshold);
    match (helped, finding) {
        (true, "nothing measurable") => Some(format!(
            "helped when kept ({}); in the final combination its effect is not resolved at the threshold",
            fmt_ratio(recorded_ratio)
        )),
        (true, "now costs") => Some(format!(
            "helped when kept ({}); in the final combination it costs",
            fmt_ratio(recorded_ratio)
        )),
        _ => None,
    }
}

/// Every measured pair's interaction factor, against the two single
/// removals it is made of.
fn interactions(
    built: &Built,
    samples: &Samples,
    lineage: &lineage::Lineage,
    threshold: f64,
) -> Vec<Interaction> {
    let costs = |arm: usize| -> Vec<Option<f64>> {
        samples.trials[arm]
            .iter()
            .map(|m| m.cost_per_connection)
            .collect()
    };
    let mut pairs = Vec::new();
    for (set, both) in built.index.iter().filter(|(s, _)| s.len() == 2) {
        let (Some(a), Some(b)) = (built.arm_of(&set[..1]), built.arm_of(&set[1..])) else {
            continue;
        };
        let f = interaction(&costs(0), &costs(a), &costs(b), &costs(*both));
        let (factor, ci) = stats::median_ci95(&f).unzip();
        let interacts = matches!((factor, ci), (Some(m), Some([lo, hi]))
            if (lo > 1.0 || hi < 1.0) && (m - 1.0).abs() >= threshold);
        pairs.push(Interaction {
            attempts: [lineage.steps[set[0]].attempt, lineage.steps[set[1]].attempt],
            factor,
            factor_ci95: ci,
            interacts,
            description: describe(factor.unwrap_or(1.0), interacts),
        });
    }
    pairs
}

pub fn render(r: &AblationRecord) -> String {
    let mut s = format!(
        "ablation of run {}'s champion (attempt {}): {} samples; threshold {:.1}%; meter in {}\n\
         ratio = cost(champion) / cost(champion without the change); < 1: the change helps\n\n\
         {:>7}  {:<23}  {:<23}  {:<20} hypothesis\n",
        r.run_id,
        r.champion_attempt,
        r.sample_count,
        r.threshold * 100.0,
        r.unit,
        "attempt",
        "when kept [interval]",
        "in final [interval]",
        "finding",
    );
    for c in &r.contributions {
        let [n, kept, now, finding] = c.cells();
        s += &format!(
            "{n:>7}  {kept:<23}  {now:<23}  {finding:<20} {}\n",
            c.hypothesis
        );
        if let Some(n) = &c.note {
            s += &format!("{:>7}  note: {}\n", "", n.lines().next().unwrap_or(""));
        }
    }
    if !r.pairs.is_empty() {
        s += "\npairs (factor = r(both removed) / (r(first) x r(second)); 1 = independent):\n";
        for p in &r.pairs {
            s += &format!(
                "  #{} + #{}: factor {}  {}{}\n",
                p.attempts[0],
                p.attempts[1],
                fmt_estimate(p.factor, p.factor_ci95),
                if p.interacts { "INTERACT: " } else { "" },
                p.description
            );
        }
    }
    s + "\n" + &arm_medians(&r.unit, &r.arms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_that_helped_when_kept_says_what_became_of_it() {
        let quiet = note(Some(0.9), "nothing measurable", 0.03).unwrap();
        assert!(quiet.contains("not resolved"), "{quiet}");
        let costs = note(Some(0.9), "now costs", 0.03).unwrap();
        assert!(costs.contains("it costs"), "{costs}");
        // One that never cleared the threshold has nothing to explain.
        assert_eq!(note(Some(0.99), "now costs", 0.03), None);
        assert_eq!(note(None, "nothing measurable", 0.03), None);
        assert_eq!(note(Some(0.9), "helps", 0.03), None);
    }

    #[test]
    fn independent_changes_have_a_factor_of_one() {
        // Champion 100; removing a costs 1.2x, b 1.5x, both 1.8x = 1.2 x 1.5.
        let f = interaction(
            &[Some(100.0)],
            &[Some(120.0)],
            &[Some(150.0)],
            &[Some(180.0)],
        );
        assert!((f[0] - 1.0).abs() < 1e-12, "{f:?}");
    }

    #[test]
    fn a_change_masked_by_another_shows_as_overlap() {
        // Removing a alone changes nothing (b already covers it), removing
        // b costs 2x, removing both 4x.
        let f = interaction(
            &[Some(100.0)],
            &[Some(100.0)],
            &[Some(200.0)],
            &[Some(400.0)],
        );
        assert!((f[0] - 2.0).abs() < 1e-12);
        assert!(describe(f[0], true).starts_with("overlap"));
        assert!(describe(0.5, true).starts_with("synergy"));
        assert!(describe(1.0, false).starts_with("no interaction"));
    }

    fn cmp(median: f64, lo: f64, hi: f64) -> Comparison {
        Comparison::judged(median, lo, hi, 0.1)
    }

    #[test]
    fn findings_need_the_threshold_in_both_directions() {
        assert_eq!(finding(&cmp(0.8, 0.75, 0.85), 0.1), "contributes");
        assert_eq!(finding(&cmp(0.98, 0.95, 1.01), 0.1), "nothing measurable");
        // Surely costlier, but by less than the threshold: not resolved.
        assert_eq!(finding(&cmp(1.02, 1.01, 1.03), 0.1), "nothing measurable");
        assert_eq!(finding(&cmp(1.3, 1.2, 1.4), 0.1), "now costs");
    }

    #[test]
    fn blocks_with_a_failed_trial_are_left_out() {
        let f = interaction(
            &[Some(100.0), Some(100.0)],
            &[Some(100.0), None],
            &[Some(100.0), Some(100.0)],
            &[Some(100.0), Some(100.0)],
        );
        assert_eq!(f, [1.0]);
    }
}
