//! Names for the code addresses of an emulated profile: the guest kernel's
//! functions from its kallsyms (sent by the guest, which is not relocated),
//! and the server's user-space functions from the symbol tables of the very
//! files it mapped, which the guest holds at their host paths.

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
use std::collections::HashMap;

use crate::bench::servers::mappings::Mapping;

/// Where a code address lies: a file (or the kernel) and, when its symbol
/// table names it, a function.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place {
    pub dso: String,
    pub function: String,
}

/// x86-64 kernel addresses are the upper half.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// The guest kernel's text symbols, sorted by address.
#[derive(Default)]
pub struct KernelSymbols(Vec<(u64, String)>);

impl KernelSymbols {
    /// From the guest's `SYM <hex address> <name>` lines.
    pub fn from_lines<'a>(lines: impl Iterator<Item = &'a str>) -> Self {
        let mut syms: Vec<(u64, String)> = lines
            .filter_map(|l| {
                let (addr, name) = l.strip_prefix("SYM ")?.split_once(' ')?;
                let addr = u64::from_str_radix(addr, 16).ok()?;
                (addr != 0).then(|| (addr, name.to_string()))
            })
            .collect();
        syms.sort();
        Self(syms)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn name(&self, pc: u64) -> Option<&str> {
        let i = self.0.partition_point(|(a, _)| *a <= pc);
        i.checked_sub(1).map(|i| self.0[i].1.as_str())
    }
}

/// One file's loadable segments and function symbols.
#[derive(Default)]
struct FileSymbols {
    /// (file offset, size in the file, virtual address) of each segment.
    segments: Vec<(u64, u64, u64)>,
    /// (address, size, name), sorted by address.
    functions: Vec<(u64, u64, String)>,
}

impl FileSymbols {
    fn read(path: &str) -> Self {
        let Ok(data) = std::fs::read(path) else {
            return Self::default();
        };
        let Ok(file) = object::File::parse(&*data) else {
            return Self::default();
        };
        let segments = file
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                (offset, size, s.address())
            })
            .collect();
        let mut functions: Vec<(u64, u64, String)> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
            .collect();
        functions.sort();
        functions.dedup_by_key(|f| f.0);
        Self {
            segments,
            functions,
        }
    }

    /// The function at `offset` in the file, by its segments' addresses.
    fn name(&self, offset: u64) -> Option<&str> {
        let &(start, _, vaddr) = self
            .segments
            .iter()
            .find(|&&(o, size, _)| (o..o + size).contains(&offset))?;
        let addr = offset - start + vaddr;
        let i = self.functions.partition_point(|f| f.0 <= addr);
        let (at, size, name) = &self.functions[i.checked_sub(1)?];
        (size == &0 || addr < at + size).then_some(name.as_str())
    }
}

/// Names addresses of the kernel and of one server's mappings.
pub struct Symbolizer<'a> {
    kernel: &'a KernelSymbols,
    maps: &'a [Mapping],
    exe: &'a str,
    files: HashMap<String, FileSymbols>,
}

impl<'a> Symbolizer<'a> {
    pub fn new(kernel: &'a KernelSymbols, maps: &'a [Mapping], exe: &'a str) -> Self {
        Self {
            kernel,
            maps,
            exe,
            files: HashMap::new(),
        }
    }

    pub fn place(&mut self, pc: u64) -> Place {
        if pc >= KERNEL_START {
            return Place {
                dso: "[kernel]".into(),
                function: self.kernel.name(pc).unwrap_or("[unknown]").into(),
            };
        }
        let Some(m) = self.maps.iter().find(|m| (m.start..m.end).contains(&pc)) else {
            return Place {
                dso: "[user, unmapped]".into(),
                function: format!("{pc:#x}"),
            };
        };
        let file = self
            .files
            .entry(m.path.clone())
            .or_insert_with(|| FileSymbols::read(&m.path));
        let offset = pc - m.start + m.offset;
        Place {
            dso: if m.path == self.exe {
                "server".into()
            } else {
                m.path.rsplit('/').next().unwrap_or(&m.path).to_string()
            },
            function: file
                .name(offset)
                .map_or_else(|| format!("+{offset:#x}"), str::to_string),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_address_takes_the_symbol_below_it() {
        let k = KernelSymbols::from_lines(
            [
                "SYM ffffffff81002000 tcp_sendmsg",
                "SYM ffffffff81001000 tcp_write_xmit",
                "STEP 0 x",
            ]
            .into_iter(),
        );
        let mut s = Symbolizer::new(&k, &[], "");
        assert_eq!(s.place(0xffffffff81001abc).function, "tcp_write_xmit");
        assert_eq!(s.place(0xffffffff81002000).function, "tcp_sendmsg");
        assert_eq!(s.place(0xffffffff81000fff).function, "[unknown]");
        assert_eq!(s.place(0xffffffff81000fff).dso, "[kernel]");
    }

    /// This test binary's own `main` is found through a mapping of itself,
    /// as the guest reports the server's.
    #[test]
    fn a_user_address_is_named_from_the_mapped_files_symbols() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap();
        let maps: Vec<Mapping> =
            crate::bench::servers::mappings::executable_mappings(std::process::id() as i32)
                .into_iter()
                .filter(|m| m.path == exe)
                .collect();
        let here = a_user_address_is_named_from_the_mapped_files_symbols as *const () as u64;
        let k = KernelSymbols::default();
        let mut s = Symbolizer::new(&k, &maps, exe);
        let p = s.place(here);
        assert_eq!(p.dso, "server");
        assert!(
            p.function
                .contains("a_user_address_is_named_from_the_mapped_files_symbols"),
            "{p:?}"
        );
        assert_eq!(s.place(0x10).dso, "[user, unmapped]");
    }
}
