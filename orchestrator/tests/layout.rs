//! The tree is the architecture: imports run one way between the stages
//! (bench <- referee <- agent <- config <- record <- session <- run, review)
//! and between the bench's folders, no module imports in a circle, and no
//! file grows past what a reader takes in at once.

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

/// `bench/host/trial.rs` -> `bench::host::trial`; `run/mod.rs` -> `run`.
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

/// The stages from the bottom up. A module may import its own stage and the
/// stages below it, never one above or beside it: the bench measures
/// without knowing who judges, the referee judges without knowing who
/// records, and `config` composes the stages' own sections without any of
/// them depending on the whole file. `session` is where the bench and the
/// configuration meet; `run` and `review` use everything below and never
/// each other.
const STAGES: &[(&str, u32)] = &[
    ("check", 0),
    ("files", 0),
    ("glob", 0),
    ("clock", 0),
    ("interrupt", 0),
    ("bench", 1),
    ("referee", 2),
    ("agent", 3),
    ("config", 4),
    ("record", 5),
    ("session", 6),
    ("run", 7),
    ("review", 7),
    ("doctor", 8),
    ("cli", 9),
    ("main", 10),
];

fn rank(module: &str) -> Option<u32> {
    STAGES
        .iter()
        .find(|(s, _)| *s == stage(module))
        .map(|&(_, r)| r)
}

/// The import edges that break [`STAGES`], as `from -> to`.
fn against_the_stages(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut bad = Vec::new();
    for (m, deps) in g {
        for d in deps {
            let allowed = stage(d) == stage(m) || rank(d) < rank(m);
            if !allowed {
                bad.push(format!("{m} -> {d}"));
            }
        }
    }
    bad
}

#[test]
fn every_module_belongs_to_a_stage() {
    let unplaced: Vec<String> = graph().into_keys().filter(|m| rank(m).is_none()).collect();
    assert!(unplaced.is_empty(), "modules in no stage: {unplaced:?}");
}

#[test]
fn every_import_runs_down_the_stages() {
    let bad = against_the_stages(&graph());
    assert!(bad.is_empty(), "imports against the stages: {bad:?}");
}

/// The check itself must see a violation: an edge from the bench up to the
/// configuration, and one between the two top stages, are both refused.
#[test]
fn an_import_up_or_across_the_stages_is_refused() {
    let mut g = BTreeMap::new();
    g.insert(
        "bench::trial".to_string(),
        BTreeSet::from(["config".to_string()]),
    );
    g.insert(
        "review::replay".to_string(),
        BTreeSet::from(["run::iterate".to_string(), "session".to_string()]),
    );
    assert_eq!(
        against_the_stages(&g),
        vec!["bench::trial -> config", "review::replay -> run::iterate"]
    );
}

/// The bench's floors, from the bottom up, read as its pipeline: what
/// counts (meters) knows no server; servers are built and launched without
/// knowing who loads them; the load and its gate know no host; what a
/// measurement is and the regime it ran in sit above them; the samples that
/// cross the seam, and the seam itself; then the two measuring hosts, this
/// machine and the emulated one, which borrows the host's trial; and at the
/// top the one place that chooses between them. A module imports its own
/// floor and the floors below it.
const BENCH_FLOORS: &[(&str, u32)] = &[
    ("bench::meters", 0),
    ("bench::servers", 1),
    ("bench::load", 2),
    ("bench::config", 3),
    ("bench::environment", 3),
    ("bench::meaning", 3),
    ("bench::measurement", 3),
    ("bench::regime", 3),
    ("bench::samples", 4),
    ("bench::measuring", 4),
    ("bench::host", 5),
    ("bench::emulated", 6),
    ("bench::choice", 7),
    ("bench::profiling", 7),
];

/// `bench::host::trial` -> the floor of `bench::host`; None outside the
/// bench, and for the bench's own root, which only declares its folders.
fn floor(module: &str) -> Option<u32> {
    BENCH_FLOORS
        .iter()
        .find(|(f, _)| module == *f || module.starts_with(&format!("{f}::")))
        .map(|&(_, n)| n)
}

/// The imports inside the bench that climb its floors, as `from -> to`.
fn up_the_floors(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut bad = Vec::new();
    for (m, deps) in g {
        let Some(from) = floor(m) else { continue };
        for d in deps {
            if floor(d).is_some_and(|to| to > from) {
                bad.push(format!("{m} -> {d}"));
            }
        }
    }
    bad
}

#[test]
fn every_bench_module_is_on_a_floor() {
    let unplaced: Vec<String> = graph()
        .into_keys()
        .filter(|m| m.starts_with("bench::") && floor(m).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "bench modules on no floor: {unplaced:?}"
    );
}

#[test]
fn every_import_in_the_bench_runs_down_its_floors() {
    let bad = up_the_floors(&graph());
    assert!(bad.is_empty(), "bench imports up its floors: {bad:?}");
}

/// The check must see a climb: a meter that reads the host's trial, and a
/// server that reads its samples, are refused; the host reading a server is
/// not.
#[test]
fn an_import_up_the_bench_floors_is_refused() {
    let mut g = BTreeMap::new();
    g.insert(
        "bench::meters::meter".to_string(),
        BTreeSet::from(["bench::host::trial".to_string()]),
    );
    g.insert(
        "bench::servers::launch".to_string(),
        BTreeSet::from(["bench::samples".to_string()]),
    );
    g.insert(
        "bench::host::trial".to_string(),
        BTreeSet::from(["bench::servers::launch".to_string()]),
    );
    assert_eq!(
        up_the_floors(&g),
        vec![
            "bench::meters::meter -> bench::host::trial",
            "bench::servers::launch -> bench::samples"
        ]
    );
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
const MAX_LINES: usize = 500;

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

/// The most lines one function under src/ may span, signature to closing
/// brace: past it, a function does several things a reader must hold at
/// once, and its steps want names.
const MAX_FUNCTION_LINES: usize = 100;

/// Every function of `text` (as rustfmt lays it out: the closing brace at
/// the signature's indentation) with its length in lines.
fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let sig = [
            "fn ",
            "pub fn ",
            "pub(crate) fn ",
            "pub(super) fn ",
            "async fn ",
        ]
        .iter()
        .find_map(|p| body.strip_prefix(p));
        let Some(sig) = sig else { continue };
        if line.trim_end().ends_with(';') {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(n) = lines[i + 1..].iter().position(|l| l.trim_end() == close) {
            let name: String = sig
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push((name, n + 2));
        }
    }
    out
}

#[test]
fn the_function_measure_counts_signature_to_closing_brace() {
    let text = "fn a() {\n    x();\n}\n\n    pub fn b(\n        y: u8,\n    ) {\n    }\n";
    assert_eq!(
        functions(text),
        vec![("a".to_string(), 3), ("b".to_string(), 4)]
    );
}

#[test]
fn no_function_is_over_the_line_limit() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let long: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            functions(&text)
                .into_iter()
                .filter(|(_, n)| *n > MAX_FUNCTION_LINES)
                .map(|(name, n)| format!("{}: {name} ({n} lines)", module_of(f)))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines: {long:?}"
    );
}
