//! The tree is the architecture: imports run one way between the stages
//! (bench <- referee <- record <- run, review), no module imports in a
//! circle, and no file grows past what a reader takes in at once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `bench/trial.rs` -> `bench::trial`; `run/mod.rs` -> `run`.
fn module_of(path: &Path) -> String {
    let rel = path.strip_prefix(src()).unwrap().with_extension("");
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|p| p != "mod")
        .collect();
    parts.join("::")
}

/// Every module a file names as `crate::a::b`, cut to a known module.
fn imports(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + 7..];
        let path: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        for n in (1..=segs.len()).rev() {
            let m = segs[..n].join("::");
            if modules.contains(&m) {
                out.insert(m);
                break;
            }
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            // Only code: doc links name modules without importing them.
            let code: String = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            let m = module_of(f);
            let mut deps = imports(&code, &modules);
            deps.remove(&m);
            (m, deps)
        })
        .collect()
}

fn stage(module: &str) -> &str {
    module.split("::").next().unwrap()
}

#[test]
fn the_bench_and_the_referee_import_nothing_downstream() {
    let downstream = ["run", "record", "review", "cli"];
    let mut bad = Vec::new();
    for (m, deps) in graph() {
        let upstream_only = match stage(&m) {
            "bench" => vec!["run", "record", "review", "cli", "referee"],
            "referee" => downstream.to_vec(),
            "record" => vec!["run", "review", "cli"],
            _ => continue,
        };
        for d in deps {
            if upstream_only.contains(&stage(&d)) {
                bad.push(format!("{m} -> {d}"));
            }
        }
    }
    assert!(bad.is_empty(), "imports against the pipeline: {bad:?}");
}

#[test]
fn no_module_imports_in_a_circle() {
    let g = graph();
    // Depth-first search for a back edge, reporting the circle it closes.
    fn visit(
        m: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut c = path[i..].to_vec();
            c.push(m.to_string());
            return Some(c);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for d in g.get(m).into_iter().flatten() {
            // A parent module declaring its children is not an import.
            if d.starts_with(&format!("{m}::")) {
                continue;
            }
            if let Some(c) = visit(d, g, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for m in g.keys() {
        if let Some(c) = visit(m, &g, &mut Vec::new(), &mut done) {
            panic!("import circle: {}", c.join(" -> "));
        }
    }
}

/// The most lines a Rust file under src/ or tests/ may hold. Tests count
/// too: a reader checking what a test proves reads it as closely as the
/// code it tests.
const MAX_LINES: usize = 600;

#[test]
fn no_source_or_test_file_is_over_the_line_limit() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests"),
        &mut files,
    );
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).unwrap().lines().count();
            (n > MAX_LINES).then(|| format!("{} ({n} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines: {long:?}");
}
