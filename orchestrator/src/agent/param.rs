//! Parameterized ideas: a playbook entry whose change is the integer value
//! of one C `#define`, explored over a range rather than as fixed pairs.
//!
//! The values form a grid (powers of two from `min`, or `min + k * step`).
//! From the champion's current value the search first tries the neighbours
//! `coarse` grid points away on each side; when both were measured against
//! this champion without a keep, it tries the neighbours `fine` points away
//! (a compass search, coarse then fine). A keep moves the current value, and
//! the search starts again from there at the coarse step.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::agent::edit::Edit;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scale {
    /// min, 2 min, 4 min, ... up to max.
    #[default]
    Log2,
    /// min, min + step, ... up to max.
    Linear,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Param {
    /// The `#define` whose value the idea sets.
    pub define: String,
    /// The repository-relative file holding the `#define`: named in
    /// every entry, since no file is every target's.
    pub path: String,
    pub min: i64,
    pub max: i64,
    #[serde(default)]
    pub scale: Scale,
    /// The grid's step, for the linear scale.
    #[serde(default = "one")]
    pub step: i64,
    /// Grid points between the current value and the first neighbours tried.
    #[serde(default = "two")]
    pub coarse: usize,
    /// Grid points to the neighbours tried once the coarse ones are measured.
    #[serde(default = "one_usize")]
    pub fine: usize,
    /// Values to try first, whatever the current value (each on the grid).
    #[serde(default)]
    pub values: Vec<i64>,
}

fn one() -> i64 {
    1
}
fn two() -> usize {
    2
}
fn one_usize() -> usize {
    1
}

impl Param {
    /// Checks the ranges; the error names the field, for the caller to
    /// prefix with the file.
    pub fn validate(&self) -> Result<()> {
        if self.define.is_empty()
            || !self
                .define
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            bail!("param.define must be a C identifier, got {:?}", self.define);
        }
        if self.min >= self.max {
            bail!(
                "param.min ({}) must be below param.max ({})",
                self.min,
                self.max
            );
        }
        if self.scale == Scale::Log2 && self.min < 1 {
            bail!(
                "param.min must be at least 1 on the log2 scale, got {}",
                self.min
            );
        }
        if self.step < 1 {
            bail!("param.step must be at least 1, got {}", self.step);
        }
        if self.fine == 0 || self.coarse < self.fine {
            bail!(
                "param.fine ({}) must be at least 1 and at most param.coarse ({})",
                self.fine,
                self.coarse
            );
        }
        let grid = self.grid();
        for (i, v) in self.values.iter().enumerate() {
            if *v < self.min || *v > self.max {
                bail!(
                    "param.values[{i}] = {v} is outside the range param.min {} .. param.max {}",
                    self.min,
                    self.max
                );
            }
            if !grid.contains(v) {
                bail!("param.values[{i}] = {v} is not on the grid ({grid:?})");
            }
        }
        Ok(())
    }

    pub fn grid(&self) -> Vec<i64> {
        let mut v = vec![self.min];
        loop {
            let last = *v.last().expect("non-empty");
            let next = match self.scale {
                Scale::Log2 => last.saturating_mul(2),
                Scale::Linear => last.saturating_add(self.step),
            };
            if next > self.max || next == last {
                return v;
            }
            v.push(next);
        }
    }

    /// The value of the `#define` in `text`, if it is there as an integer.
    pub fn current(&self, text: &str) -> Option<i64> {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix("#define ")?.trim_start();
            let value = rest.strip_prefix(self.define.as_str())?;
            value.starts_with([' ', '\t']).then_some(())?;
            value
                .trim()
                .trim_end_matches(['L', 'U', 'l', 'u'])
                .parse()
                .ok()
        })
    }

    /// The edit that sets the `#define` to `value` in `text`.
    pub fn edit(&self, text: &str, value: i64) -> Option<Edit> {
        let line = text.lines().find(|l| {
            l.strip_prefix("#define ")
                .and_then(|r| r.trim_start().strip_prefix(self.define.as_str()))
                .is_some_and(|r| r.starts_with([' ', '\t']))
        })?;
        Some(Edit {
            path: self.path.clone(),
            search: format!("{line}\n"),
            replace: format!("#define {} {value}\n", self.define),
        })
    }

    /// The values to try against a champion whose value is `current`, in
    /// order, at the first step whose values are not all `measured` yet
    /// (listed values first, then coarse neighbours, then fine ones).
    pub fn candidates(&self, current: i64, measured: &dyn Fn(i64) -> bool) -> Vec<i64> {
        let listed: Vec<i64> = self
            .values
            .iter()
            .copied()
            .filter(|v| *v != current && !measured(*v))
            .collect();
        if !listed.is_empty() {
            return listed;
        }
        let grid = self.grid();
        // The nearest grid point stands for a current value off the grid.
        let at = (0..grid.len())
            .min_by_key(|&i| (grid[i] - current).abs())
            .expect("a grid has a point");
        let mut step = self.coarse;
        loop {
            let around: Vec<i64> = [at.checked_sub(step), Some(at + step)]
                .into_iter()
                .flatten()
                .filter_map(|i| grid.get(i).copied())
                .filter(|v| *v != current)
                .collect();
            let open: Vec<i64> = around.iter().copied().filter(|v| !measured(*v)).collect();
            if !open.is_empty() {
                return open;
            }
            if step == self.fine {
                return vec![];
            }
            step = (step / 2).max(self.fine);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Param {
        Param {
            define: "FILE_TABLE".into(),
            path: "treatment/server.c".into(),
            min: 256,
            max: 16384,
            scale: Scale::Log2,
            step: 1,
            coarse: 2,
            fine: 1,
            values: vec![],
        }
    }

    #[test]
    fn the_grid_and_the_current_value() {
        assert_eq!(table().grid(), [256, 512, 1024, 2048, 4096, 8192, 16384]);
        let src = "#define QUEUE_DEPTH 2048\n#define FILE_TABLE 4096\n#define FILE_TABLE_X 3\n";
        assert_eq!(table().current(src), Some(4096));
        let e = table().edit(src, 1024).unwrap();
        assert_eq!(e.search, "#define FILE_TABLE 4096\n");
        assert_eq!(e.replace, "#define FILE_TABLE 1024\n");
        assert_eq!(table().current("#define FILE_TABLES 2\n"), None);
    }

    #[test]
    fn coarse_then_fine() {
        let p = table();
        assert_eq!(p.candidates(4096, &|_| false), [1024, 16384]);
        // Both coarse neighbours measured against this champion: fine.
        assert_eq!(
            p.candidates(4096, &|v| v == 1024 || v == 16384),
            [2048, 8192]
        );
        assert!(p
            .candidates(4096, &|v| [1024, 2048, 8192, 16384].contains(&v))
            .is_empty());
        // At the edge of the range only one side exists.
        assert_eq!(p.candidates(16384, &|_| false), [4096]);
        // Listed values come first.
        let listed = Param {
            values: vec![512],
            ..table()
        };
        assert_eq!(listed.candidates(4096, &|_| false), [512]);
        assert_eq!(listed.candidates(4096, &|v| v == 512), [1024, 16384]);
    }

    #[test]
    fn out_of_range_values_are_named() {
        let p = Param {
            values: vec![1024, 65536],
            ..table()
        };
        let e = p.validate().unwrap_err().to_string();
        assert!(
            e.contains("param.values[1] = 65536 is outside the range"),
            "{e}"
        );
        let p = Param { min: 0, ..table() };
        assert!(p.validate().unwrap_err().to_string().contains("param.min"));
        let p = Param {
            coarse: 0,
            ..table()
        };
        assert!(p.validate().unwrap_err().to_string().contains("param.fine"));
    }
}
