//! Where a process's code sits: its executable file mappings, from
//! `/proc/<pid>/maps`, by which a code address of it names a file and an
//! offset in that file (the emulated profile names its functions so).

use serde::{Deserialize, Serialize};
use std::fs;

/// A file mapped executable into a process: where its code sits, so that
/// an instruction address of the process names a file and an offset in it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// The file offset mapped at `start`.
    pub offset: u64,
    pub path: String,
}

/// The executable file mappings of process `pid`, from `/proc/<pid>/maps`
/// (none if it is gone), and its vDSO, where its clock reads run.
pub fn executable_mappings(pid: i32) -> Vec<Mapping> {
    fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|t| parse_maps(&t))
        .unwrap_or_default()
}

fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (range, perms, offset) = (f.next()?, f.next()?, f.next()?);
            let path = f.nth(2)?;
            if !perms.contains('x') || !(path.starts_with('/') || path == "[vdso]") {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset: u64::from_str_radix(offset, 16).ok()?,
                path: path.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_executable_file_mappings_are_kept() {
        let maps = "\
55d0c0a00000-55d0c0a02000 r--p 00000000 08:01 131 /opt/server
55d0c0a02000-55d0c0a05000 r-xp 00002000 08:01 131 /opt/server
7f1c2a228000-7f1c2a3bd000 r-xp 00028000 08:01 77 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c2a5f0000-7f1c2a5f2000 r-xp 00000000 00:00 0 [vdso]
7f1c2a600000-7f1c2a621000 rw-p 00000000 00:00 0
";
        let m = parse_maps(maps);
        assert_eq!(m.len(), 3, "{m:?}");
        assert_eq!(
            m[0],
            Mapping {
                start: 0x55d0c0a02000,
                end: 0x55d0c0a05000,
                offset: 0x2000,
                path: "/opt/server".into()
            }
        );
        assert_eq!(m[1].path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(m[2].path, "[vdso]");
        let me = executable_mappings(std::process::id() as i32);
        assert!(me.iter().any(|m| m.path.contains("libc")), "{me:?}");
    }
}
