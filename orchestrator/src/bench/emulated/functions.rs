//! A profile in emulated instructions by function: the plugin's counts by
//! translated block over an unscored window, on the server's vCPU alone,
//! each block's instructions given to the function its first address lies
//! in. The study found MSG_MORE this way, seeing a kernel write function
//! take twice its expected share; a cpu-clock profile by DSO, one bar at
//! 98% "kernel", shows nothing of the kind.

use anyhow::{Context, Result};
use std::collections::{BTreeMap, HashMap};

use super::symbols::{KernelSymbols, Place, Symbolizer};
use crate::bench::host::trial::ProfileWindow;
use crate::bench::meters::profile::{group, Profile};

/// How many functions a profile keeps, hottest first.
const TOP: usize = 40;

/// One line of the plugin's profile: a block's instructions on one vCPU.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockCount {
    pub pc: u64,
    pub vcpu: usize,
    pub instructions: u64,
}

/// The plugin's profile file, by the sequence number of the marker that
/// closed each section.
pub fn sections(text: &str) -> Result<HashMap<u64, Vec<BlockCount>>> {
    let mut out: HashMap<u64, Vec<BlockCount>> = HashMap::new();
    let mut current = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(seq) = line.strip_prefix("PROFILE ") {
            let seq = seq
                .trim()
                .parse()
                .with_context(|| format!("line {}", i + 1))?;
            out.entry(seq).or_default();
            current = Some(seq);
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(seq), [pc, vcpu, n, _runs]) = (current, f.as_slice()) else {
            anyhow::bail!("line {}: not a profile line: {line:?}", i + 1);
        };
        let parsed = (|| {
            Some(BlockCount {
                pc: u64::from_str_radix(pc, 16).ok()?,
                vcpu: vcpu.parse().ok()?,
                instructions: n.parse().ok()?,
            })
        })();
        let block = parsed.with_context(|| format!("line {}: {line:?}", i + 1))?;
        out.get_mut(&seq).expect("opened above").push(block);
    }
    Ok(out)
}

/// The profile of `window` from its section's `blocks`, on vCPU `vcpu`.
pub fn profile(
    blocks: &[BlockCount],
    vcpu: usize,
    window: &ProfileWindow,
    kernel: &KernelSymbols,
    regime: String,
) -> Profile {
    let mut names = Symbolizer::new(kernel, &window.maps, &window.exe);
    let mut by_function: BTreeMap<Place, u64> = BTreeMap::new();
    let mut total = 0u64;
    for b in blocks.iter().filter(|b| b.vcpu == vcpu) {
        *by_function.entry(names.place(b.pc)).or_default() += b.instructions;
        total += b.instructions;
    }
    let share = |n: u64| n as f64 / total.max(1) as f64;
    let mut dso_shares: BTreeMap<String, f64> = BTreeMap::new();
    for (place, &n) in &by_function {
        *dso_shares.entry(group(&place.dso).into()).or_default() += share(n);
    }
    let mut top: Vec<(u64, Place)> = by_function.into_iter().map(|(p, n)| (n, p)).collect();
    top.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    top.truncate(TOP);
    Profile {
        dso_shares,
        top: top
            .into_iter()
            .map(|(n, p)| (share(n), p.dso, p.function))
            .collect(),
        regime: Some(regime),
        context_switches_per_connection: None,
        unit: Some("emulated instructions".into()),
        per_connection: (window.connections > 0).then(|| total as f64 / window.connections as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
PROFILE 7
ffffffff81001010 3 600 60
ffffffff81001020 3 200 20
ffffffff81002000 3 100 10
ffffffff81002000 0 999 9
7f0000001000 3 100 50
PROFILE 9
";

    #[test]
    fn blocks_add_up_by_function_on_the_server_vcpu_only() {
        let s = sections(LOG).unwrap();
        assert_eq!(s[&9], vec![]);
        let k = KernelSymbols::from_lines(
            [
                "SYM ffffffff81001000 tcp_sendmsg",
                "SYM ffffffff81002000 tcp_write_xmit",
            ]
            .into_iter(),
        );
        let w = ProfileWindow {
            connections: 10,
            ..Default::default()
        };
        let p = profile(&s[&7], 3, &w, &k, "live".into());
        assert_eq!(p.per_connection, Some(100.0));
        assert_eq!(p.top[0], (0.8, "[kernel]".into(), "tcp_sendmsg".into()));
        assert_eq!(p.top[1].2, "tcp_write_xmit");
        assert!((p.top[1].0 - 0.1).abs() < 1e-12);
        assert!((p.dso_shares["kernel"] - 0.9).abs() < 1e-12);
        assert!((p.dso_shares["other"] - 0.1).abs() < 1e-12);
        assert!(
            p.render().contains("emulated instructions"),
            "{}",
            p.render()
        );
    }

    #[test]
    fn a_malformed_line_is_named() {
        let e = sections("PROFILE 1\nzz 1 2 3\n").unwrap_err();
        assert!(format!("{e:#}").contains("line 2"), "{e:#}");
        assert!(sections("1 2 3 4\n").is_err());
    }
}
