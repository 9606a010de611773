//! The meter plugin's output: one snapshot of every vCPU's instruction count
//! per marker the guest executed, in order, and a last `END` line written as
//! QEMU exits. Malformed or cut-short output is an error naming the file.

use anyhow::{bail, Context, Result};
use std::path::Path;

/// One snapshot: every vCPU's count of instructions so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub seq: u64,
    pub id: u32,
    /// The vCPU that executed the marker.
    pub vcpu: usize,
    pub counts: Vec<u64>,
    /// Every vCPU's `syscall` instructions so far (none in output written
    /// before the plugin counted them).
    pub syscalls: Vec<u64>,
}

#[derive(Clone, Debug, Default)]
pub struct Marks {
    pub snapshots: Vec<Snapshot>,
    /// Whether the plugin wrote its exit line: QEMU ended normally.
    pub complete: bool,
}

/// Instructions each vCPU executed between two snapshots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub per_vcpu: Vec<u64>,
    /// System calls each vCPU made in the window.
    pub syscalls: Vec<u64>,
    /// The vCPU that executed the opening marker.
    pub marked_on: usize,
}

fn parse_line(line: &str) -> Result<(bool, Snapshot)> {
    let mut words = line.split_whitespace();
    let end = match words.next() {
        Some("MARK") => false,
        Some("END") => true,
        _ => bail!("not a MARK or END line"),
    };
    let number = |w: Option<&str>| -> Result<u64> {
        w.context("too few fields")?.parse().context("not a number")
    };
    let seq = number(words.next())?;
    let id = number(words.next())? as u32;
    let mut vcpu = None;
    let mut counts = Vec::new();
    let mut syscalls = Vec::new();
    for w in words {
        let (k, v) = w.split_once('=').context("a field without '='")?;
        let v: u64 = v
            .parse()
            .with_context(|| format!("{k}={v:?} is not a number"))?;
        if k == "vcpu" {
            vcpu = Some(v as usize);
        } else if let Some(i) = k.strip_prefix('c') {
            if i.parse::<usize>().ok() != Some(counts.len()) {
                bail!("counter {k} out of order");
            }
            counts.push(v);
        } else if let Some(i) = k.strip_prefix('s') {
            if i.parse::<usize>().ok() != Some(syscalls.len()) {
                bail!("counter {k} out of order");
            }
            syscalls.push(v);
        } else {
            bail!("unknown field {k}");
        }
    }
    if counts.is_empty() {
        bail!("no counters");
    }
    if !syscalls.is_empty() && syscalls.len() != counts.len() {
        bail!(
            "{} system-call counters for {} vCPUs",
            syscalls.len(),
            counts.len()
        );
    }
    Ok((
        end,
        Snapshot {
            seq,
            id,
            vcpu: vcpu.context("no vcpu field")?,
            counts,
            syscalls,
        },
    ))
}

impl Marks {
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the meter plugin's output {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("the meter plugin's output {}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self> {
        let mut marks = Marks::default();
        for (n, line) in text.lines().enumerate() {
            if marks.complete {
                bail!("line {}: text after the END line", n + 1);
            }
            let (end, s) = parse_line(line).with_context(|| format!("line {}: {line:?}", n + 1))?;
            if s.seq != n as u64 + 1 {
                bail!(
                    "line {}: sequence number {} where {} belongs",
                    n + 1,
                    s.seq,
                    n + 1
                );
            }
            if marks
                .snapshots
                .first()
                .is_some_and(|f| f.counts.len() != s.counts.len())
            {
                bail!(
                    "line {}: {} counters, the first line had {}",
                    n + 1,
                    s.counts.len(),
                    marks.snapshots[0].counts.len()
                );
            }
            if end {
                marks.complete = true;
            } else {
                marks.snapshots.push(s);
            }
        }
        Ok(marks)
    }

    /// The instructions between snapshots `begin` and `end` (sequence
    /// numbers), checked to be a window's opening and closing markers.
    pub fn window(&self, begin: u64, end: u64) -> Result<Window> {
        let get = |seq: u64| {
            self.snapshots
                .get((seq as usize).wrapping_sub(1))
                .with_context(|| {
                    format!(
                        "no snapshot {seq} (the plugin wrote {})",
                        self.snapshots.len()
                    )
                })
        };
        let (a, b) = (get(begin)?, get(end)?);
        if a.id != crate::bench::meters::marker::Mark::WindowBegin as u32
            || b.id != crate::bench::meters::marker::Mark::WindowEnd as u32
        {
            bail!(
                "snapshots {begin} and {end} are markers {} and {}, not a window's begin and end",
                a.id,
                b.id
            );
        }
        Ok(Window {
            per_vcpu: b.counts.iter().zip(&a.counts).map(|(b, a)| b - a).collect(),
            syscalls: b
                .syscalls
                .iter()
                .zip(&a.syscalls)
                .map(|(b, a)| b - a)
                .collect(),
            marked_on: a.vcpu,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str =
        "MARK 1 1 vcpu=0 c0=100 c1=50 s0=1 s1=2\nMARK 2 2 vcpu=0 c0=180 c1=90 s0=4 s1=2\n\
                        END 3 0 vcpu=0 c0=200 c1=95 s0=5 s1=2\n";

    #[test]
    fn a_window_is_the_difference_of_its_two_snapshots() {
        let m = Marks::parse(GOOD).unwrap();
        assert!(m.complete);
        let w = m.window(1, 2).unwrap();
        assert_eq!(w.per_vcpu, vec![80, 40]);
        assert_eq!(w.syscalls, vec![3, 0]);
        assert_eq!(w.marked_on, 0);
        assert!(m.window(2, 1).is_err(), "the markers' roles are checked");
        assert!(m.window(1, 5).is_err());
    }

    #[test]
    fn malformed_output_is_refused_with_the_line() {
        for (bad, says) in [
            ("MARK 1 1 vcpu=0 c0=1\nMARK 3 2 vcpu=0 c0=2\n", "sequence"),
            ("MARK 1 1 vcpu=0 c0=x\n", "line 1"),
            ("MARK 1 1 c0=1\n", "vcpu"),
            ("MARK 1 1 vcpu=0 c1=1\n", "order"),
            (
                "MARK 1 1 vcpu=0 c0=1\nMARK 2 2 vcpu=0 c0=1 c1=2\n",
                "counters",
            ),
            ("hello\n", "line 1"),
            ("MARK 1 1 vcpu=0 c0=1 c1=2 s0=1\n", "system-call counters"),
        ] {
            let e = format!("{:#}", Marks::parse(bad).unwrap_err());
            assert!(e.contains(says), "{bad:?}: {e}");
        }
        let cut = Marks::parse("MARK 1 1 vcpu=0 c0=1\n").unwrap();
        assert!(!cut.complete);
    }

    #[test]
    fn a_missing_file_is_named() {
        let e = format!(
            "{:#}",
            Marks::read(Path::new("/nonexistent/marks")).unwrap_err()
        );
        assert!(e.contains("/nonexistent/marks"), "{e}");
    }
}
