//! The range check every stage's section of `harness.toml` uses, so that
//! each out-of-range value is refused in the same words: the field's full
//! name, the range, and the value given.

use anyhow::{bail, Result};

pub fn range(field: &str, value: f64, lo: f64, hi: f64) -> Result<()> {
    if !(lo..=hi).contains(&value) || value.is_nan() {
        bail!("{field} must be between {lo} and {hi}, got {value}");
    }
    Ok(())
}
