//! The number formats every command's text shares: ratios, intervals with
//! their coverage, estimates, and arms' medians in their meter's unit.

use crate::referee::compare::{ArmSummary, Comparison};

pub fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

/// A share as a whole percentage, or a dash where it was not measured.
pub fn percent(share: Option<f64>) -> String {
    share.map_or("-".into(), |u| format!("{:.0}%", u * 100.0))
}

pub fn fmt_ratio(v: Option<f64>) -> String {
    opt(v, 3)
}

pub fn fmt_ci(v: Option<[f64; 2]>) -> String {
    v.map_or("-".into(), |[l, h]| format!("[{l:.3}, {h:.3}]"))
}

/// An interval with the coverage it was computed at, as
/// `[0.820, 0.921] (97.5%)`: a keep decision's look and a plain comparison
/// differ, and a reader must not take one for the other.
pub fn fmt_ci_at(ci: Option<[f64; 2]>, level: Option<f64>) -> String {
    match (ci, level) {
        (Some(_), Some(l)) => format!("{} ({}%)", fmt_ci(ci), l * 100.0),
        _ => fmt_ci(ci),
    }
}

/// A ratio with its interval, as `0.862 [0.820, 0.921]`.
pub fn fmt_estimate(ratio: Option<f64>, ci: Option<[f64; 2]>) -> String {
    format!("{} {}", fmt_ratio(ratio), fmt_ci(ci))
}

/// A comparison against the control, or that there was none
/// (`run.control = "none"`).
pub fn fmt_vs_control(c: Option<&Comparison>) -> String {
    c.map_or_else(|| "- (no control)".into(), fmt_comparison)
}

/// A comparison's ratio with its interval.
pub fn fmt_comparison(c: &Comparison) -> String {
    fmt_estimate(c.ratio_median, c.ratio_interval)
}

/// Each arm's median cost on this machine, one line: raw costs belong to
/// the machine that measured them, so review commands print them apart.
pub fn arm_medians(unit: &str, arms: &[ArmSummary]) -> String {
    let mut s = format!("this machine, {unit} per connection (median):");
    for a in arms {
        let gate = if a.gate.passed { "" } else { " (gate FAILED)" };
        s += &format!(" {} {:.0}{gate};", a.arm, a.cost_per_connection.median);
    }
    s + "\n"
}
