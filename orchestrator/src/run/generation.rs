//! A generation (`search.generation` > 1): several of the agent's
//! candidates gathered on the same champion, screened in one measurement
//! beside it and the control, then judged one by one, best first, by the
//! unchanged judging sequence while the screen finds them worth it
//! ([`crate::referee::screen`]), until one is kept. The rest are recorded as
//! `screened`, with what the screen measured: the search learns from it,
//! and retries them on a newer champion.
//!
//! Attempts are numbered as they are proposed and journaled together when
//! the generation ends, in number order, before a champion they made: a
//! crash at any point leaves the journal a prefix of the run, and the
//! branch is rewound past a keep the journal does not hold
//! (`recover.rs`). What a crash loses is the generation's proposals.

use anyhow::{Context, Result};
use std::time::Instant;

use super::iterate::{Attempt, Prepared};
use super::{say, Loop};
use crate::bench::samples::{Samples, Tampered};
use crate::bench::servers::arm::{with_control, Arm};
use crate::record::journal::{AttemptRecord, Screen};
use crate::referee::figures::fmt_ratio;
use crate::referee::screen::{self, Screened};
use crate::referee::verdict::AttemptVerdict;

/// A generation's attempts not yet in the journal.
#[derive(Default)]
pub(super) struct Gathering {
    /// Ended, and waiting for the generation's end to be journaled.
    ended: Vec<AttemptRecord>,
    /// Fixed and waiting for the screen, as the agent is shown them.
    waiting: Vec<AttemptRecord>,
}

impl Gathering {
    pub fn end(&mut self, a: AttemptRecord) {
        self.waiting.retain(|w| w.number != a.number);
        self.ended.push(a);
    }
}

/// A candidate built and fit to measure.
struct Candidate {
    at: Attempt,
    tree: git2::Oid,
    arm: Arm,
}

impl Loop<'_> {
    /// The generation's attempts not yet journaled, ended ones first.
    pub(super) fn unjournaled(&self) -> Vec<&AttemptRecord> {
        self.gathering
            .iter()
            .flat_map(|g| g.ended.iter().chain(&g.waiting))
            .collect()
    }

    /// The size of the generation to gather now, if the next iteration is
    /// one: the search asks for more than one candidate at a time, at least
    /// two attempts are left, and the loop makes no move of its own (a
    /// stack or a retry is judged alone, as it comes).
    pub(super) fn generation_size(&self) -> Result<Option<usize>> {
        let left = self
            .config()
            .run
            .max_iterations
            .saturating_sub(self.attempts.len());
        let size = self.config().search.generation.min(left);
        if size < 2 {
            return Ok(None);
        }
        let ctx = self.proposal_context()?;
        Ok(self.own_move(&ctx).is_none().then_some(size))
    }

    /// Gathers, screens and judges a generation of up to `size`
    /// candidates. Returns false when the agent had nothing at all.
    pub(super) fn generation(&mut self, size: usize) -> Result<bool> {
        self.gathering = Some(Gathering::default());
        let outcome = self.gather_and_judge(size);
        match outcome {
            Ok(proposed) => {
                self.flush_generation()?;
                Ok(proposed)
            }
            Err(e) => {
                // Nothing of an unfinished generation is journaled: the
                // resumed run proposes it again.
                self.gathering = None;
                Err(e)
            }
        }
    }

    fn gather_and_judge(&mut self, size: usize) -> Result<bool> {
        let mut fixed = Vec::new();
        let mut proposed = false;
        for _ in 0..size {
            match self.prepare(false)? {
                Prepared::Exhausted => break,
                Prepared::Ended => proposed = true,
                Prepared::Fixed(at, tree) => {
                    proposed = true;
                    // The next candidate is made on the champion, and the
                    // agent is shown this one as in the generation.
                    self.git.reset_hard(at.champion)?;
                    let mut shown = at.record.clone();
                    shown.verdict = AttemptVerdict::Screened;
                    shown.detail = Some(
                        "in this generation: to be screened beside the others, not measured yet"
                            .into(),
                    );
                    if let Some(g) = self.gathering.as_mut() {
                        g.waiting.push(shown);
                    }
                    fixed.push((*at, tree));
                }
            }
        }
        let mut candidates = Vec::new();
        for (mut at, tree) in fixed {
            match self.admit(&mut at, tree)? {
                Some(arm) => candidates.push(Candidate { at, tree, arm }),
                None => self.discard(at, false)?,
            }
        }
        match candidates.len() {
            0 => {}
            1 => {
                let c = candidates.pop().expect("one candidate");
                self.judge_alone(c)?;
            }
            _ => self.screen_and_judge(candidates)?,
        }
        Ok(proposed)
    }

    /// A generation that left one candidate to measure: judged as any
    /// attempt is, with no screen.
    fn judge_alone(&mut self, c: Candidate) -> Result<()> {
        let mut at = c.at;
        self.check_out(&at)?;
        let judgement = self.judge(&mut at, c.tree)?;
        self.end_judged(at, c.tree, &judgement)
    }

    /// One measurement of the champion, every candidate and the control;
    /// then the candidates worth it judged best first until one is kept.
    fn screen_and_judge(&mut self, candidates: Vec<Candidate>) -> Result<()> {
        let numbers: Vec<usize> = candidates.iter().map(|c| c.at.n).collect();
        let arms = with_control(
            std::iter::once(self.champion_arm.clone())
                .chain(candidates.iter().map(|c| c.arm.clone())),
            self.control.as_ref(),
        );
        let mut samples = Samples::new(arms.len());
        let label = format!("screen of #{}-#{}", numbers[0], numbers[numbers.len() - 1]);
        let t = Instant::now();
        let measured = self.measure_seeded(
            &arms,
            self.run.sample_count,
            &mut samples,
            &label,
            &self.settings(),
            screen::SEED + numbers[0] as u64,
        );
        let share = t.elapsed().as_secs_f64() / candidates.len() as f64;
        if let Err(e) = measured {
            return self.end_tampered_screen(candidates, e, &numbers);
        }
        let threshold = self.config().compare.threshold;
        let arms_of: Vec<usize> = (1..=candidates.len()).collect();
        let ranked = screen::rank(&samples, &arms_of, threshold);
        say(&self.bar, screen_line(&numbers, &ranked));
        let mut order: Vec<(Candidate, Screened)> = candidates.into_iter().zip(ranked).collect();
        for (c, s) in &mut order {
            c.at.record.durations.measure_s += share;
            c.at.record.screen = Some(screen_record(&numbers, s));
        }
        order.sort_by_key(|(_, s)| s.rank.unwrap_or(usize::MAX));
        let mut kept: Option<usize> = None;
        let mut rest = Vec::new();
        let mut queue = order.into_iter();
        for (mut c, s) in queue.by_ref() {
            if s.failed.is_some() || !s.worth_judging {
                rest.push((c, s));
                continue;
            }
            self.check_out(&c.at)?;
            let judgement = self.judge(&mut c.at, c.tree)?;
            if judgement.verdict.is_keep() && self.survives_ablation(&mut c.at, c.tree)? {
                kept = Some(c.at.n);
                // The others are recorded before the keep, which journals
                // the generation before its champion.
                for (c, s) in queue.by_ref().chain(rest.drain(..)) {
                    self.end_screened(c, &s, &numbers, kept)?;
                }
                return self.keep(c.at, c.tree, &judgement);
            }
            self.discard(c.at, judgement.tampered)?;
        }
        for (c, s) in rest {
            self.end_screened(c, &s, &numbers, kept)?;
        }
        Ok(())
    }

    /// A candidate the keep rule did not judge: invalid when it failed a
    /// gate in the screen, else screened, with the screen's comparison.
    fn end_screened(
        &mut self,
        mut c: Candidate,
        s: &Screened,
        numbers: &[usize],
        kept: Option<usize>,
    ) -> Result<()> {
        c.at.record.vs_champion = Some(s.vs_champion.clone());
        c.at.record.build_ok = Some(true);
        c.at.record.binary_sha256 = c.arm.binary_hash.clone();
        let (verdict, detail) = match &s.failed {
            Some(gates) => (
                AttemptVerdict::Invalid,
                format!("in the screen of {}: {gates}", list(numbers)),
            ),
            None => (AttemptVerdict::Screened, screened_detail(s, numbers, kept)),
        };
        self.git.reset_hard(c.at.champion)?;
        let r = c.at.finish(verdict, Some(detail));
        self.record(r)
    }

    /// A screen whose measurement found a built binary modified: every
    /// candidate is out of scope, and the builds are made again.
    fn end_tampered_screen(
        &mut self,
        candidates: Vec<Candidate>,
        e: anyhow::Error,
        numbers: &[usize],
    ) -> Result<()> {
        let Some(tampered) = e.downcast_ref::<Tampered>() else {
            return Err(e);
        };
        let detail = format!("in the screen of {}: {tampered}", list(numbers));
        for c in candidates {
            let r = c.at.finish(AttemptVerdict::Scope, Some(detail.clone()));
            self.record(r)?;
        }
        self.rebuild_after_tampering()
    }

    /// The worktree at the attempt's fixed tree, as it is when an attempt
    /// is judged as it comes: the judge checks it did not move.
    fn check_out(&self, at: &Attempt) -> Result<()> {
        let name = at
            .record
            .attempt_ref
            .as_deref()
            .context("a fixed attempt has its ref")?;
        self.git.reset_hard(self.git.repo.refname_to_id(name)?)
    }

    /// Journals the generation's ended attempts in number order, and ends
    /// the generation.
    pub(super) fn flush_generation(&mut self) -> Result<()> {
        let Some(g) = self.gathering.take() else {
            return Ok(());
        };
        let mut ended = g.ended;
        ended.sort_by_key(|a| a.number);
        for a in ended {
            self.journal_attempt(a)?;
        }
        Ok(())
    }
}

fn list(numbers: &[usize]) -> String {
    numbers
        .iter()
        .map(|n| format!("#{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn screen_record(numbers: &[usize], s: &Screened) -> Screen {
    Screen {
        generation: numbers.to_vec(),
        rank: s.rank,
        vs_champion: Some(s.vs_champion.clone()),
    }
}

/// Where a screened candidate ranked, and why it was not judged.
fn screened_detail(s: &Screened, numbers: &[usize], kept: Option<usize>) -> String {
    let place = match s.rank {
        Some(r) => format!("ranked {r} of {}", numbers.len()),
        None => "not ranked".into(),
    };
    let why = match kept {
        Some(n) if s.worth_judging => format!("#{n} was kept first"),
        _ => "not worth judging: the keep line is outside its interval, or it cost more".into(),
    };
    format!("in the screen of {}: {place}; {why}", list(numbers))
}

/// The user's line for a screen: each candidate's ratio to the champion.
fn screen_line(numbers: &[usize], ranked: &[Screened]) -> String {
    let cells: Vec<String> = numbers
        .iter()
        .zip(ranked)
        .map(|(n, s)| match &s.failed {
            Some(_) => format!("#{n} failed a gate"),
            None => format!("#{n} {}", fmt_ratio(s.vs_champion.ratio_median)),
        })
        .collect();
    format!("screen of {}: {}", list(numbers), cells.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::referee::compare::Comparison;

    fn screened(rank: Option<usize>, worth: bool) -> Screened {
        Screened {
            vs_champion: Comparison::judged(0.95, 0.93, 0.97, 0.03),
            rank,
            failed: None,
            worth_judging: worth,
        }
    }

    #[test]
    fn a_screened_candidate_says_where_it_ranked_and_why_it_was_not_judged() {
        let gen = [4, 5, 6];
        assert_eq!(
            screened_detail(&screened(Some(2), true), &gen, Some(4)),
            "in the screen of #4, #5, #6: ranked 2 of 3; #4 was kept first"
        );
        for kept in [Some(4), None] {
            assert_eq!(
                screened_detail(&screened(Some(3), false), &gen, kept),
                "in the screen of #4, #5, #6: ranked 3 of 3; not worth judging: \
                 the keep line is outside its interval, or it cost more"
            );
        }
    }

    #[test]
    fn a_gathering_moves_an_attempt_from_waiting_to_ended_once() {
        let mut g = Gathering::default();
        let a = super::super::iterate::new_record(
            3,
            "offline",
            "c0",
            crate::bench::meters::meter::MeterEvent::TaskClock,
            "t0".into(),
        );
        g.waiting.push(a.clone());
        g.end(a);
        assert!(g.waiting.is_empty());
        assert_eq!(g.ended.len(), 1);
    }
}
