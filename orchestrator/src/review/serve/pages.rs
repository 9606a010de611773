//! The pages: a run's is its report, as `ratchet report` renders it from
//! the same code, with a line saying the page follows the run and a script
//! that swaps in each new rendering the server pushes. The list of runs
//! says where each stands.

use anyhow::Result;
use std::fmt::Write;
use std::path::Path;

use super::paths::Results;
use crate::bench::regime::Regime;
use crate::bench::servers::secrets;
use crate::record::lineage::Lineage;
use crate::record::recorded::{self, RecordedRun};
use crate::referee::figures::fmt_ratio;
use crate::review::report;
use crate::review::svg::escape;

/// The page subscribes to its run's events and replaces its body with each
/// rendering: the server decides when there is news, the page never asks.
const SCRIPT: &str = "<script>\
const events = new EventSource(location.pathname.replace(/\\/$/, '') + '/events');\
events.addEventListener('report', e => { document.body.innerHTML = e.data; });\
</script>";

/// Run `id`'s report as `ratchet report` renders it now, split into its
/// head and its body, the body led by a line saying the page follows the
/// run. Every secret in ratchet's environment is redacted.
fn render(results: &Results, repo: &Path, id: &str) -> Result<(String, String)> {
    let run = RecordedRun::open(results.root(), Some(id))?;
    let repo = git2::Repository::open(repo)?;
    let lineage = Lineage::read(&repo, &run)?;
    let html = report::render(&run, &lineage, results.root());
    let head = between(&html, "<head>", "</head>").unwrap_or_default();
    let body = between(&html, "<body>", "</body>").unwrap_or(&html);
    let live = format!(
        "<p id=\"live\" class=\"note\">Run {id} is {status}{written}. This page follows its \
         journal (results/{id}/attempts.jsonl) and shows each attempt as it is decided. \
         <a href=\"/\">Every run</a></p>",
        id = escape(id),
        status = run.run.status,
        written = last_written(&run.dir),
    );
    Ok((secrets::redact(head), secrets::redact(&(live + body))))
}

/// The body of run `id`'s page: what the server pushes as the run goes on.
pub fn run_body(results: &Results, repo: &Path, id: &str) -> Result<String> {
    Ok(render(results, repo, id)?.1)
}

/// The whole page of run `id`.
pub fn run_page(results: &Results, repo: &Path, id: &str) -> Result<String> {
    let (head, body) = render(results, repo, id)?;
    Ok(format!(
        "<!DOCTYPE html><html lang=\"en\"><head>{head}{SCRIPT}</head><body>{body}</body></html>\n"
    ))
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = text.find(open)? + open.len();
    let end = start + text[start..].rfind(close)?;
    Some(&text[start..end])
}

/// Every run in `results/` (those in `only`, if any), newest first: its
/// status, meter, load, and where its champion stands.
pub fn runs_page(results: &Results, repo: &Path, only: &[String]) -> String {
    let mut ids: Vec<String> = recorded::run_ids(results.root())
        .unwrap_or_default()
        .into_iter()
        .filter(|id| only.is_empty() || only.contains(id))
        .collect();
    ids.reverse();
    let mut rows = String::new();
    for id in &ids {
        rows += &match run_row(results, repo, id) {
            Ok(row) => row,
            Err(e) => format!(
                "<tr><td>{}</td><td colspan=\"8\" class=\"warn\">unreadable: {}</td></tr>",
                escape(id),
                escape(&format!("{e:#}"))
            ),
        };
    }
    let html = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>ratchet runs</title>\
         <style>{CSS}</style></head><body><h1>ratchet runs</h1><p class=\"note\">{n} runs in {dir}. \
         A run's page follows it while it runs.</p><table><thead><tr><th>run</th><th>status</th>\
         <th>meter</th><th>regime</th><th>load</th><th>attempts</th><th>kept</th><th>champion vs start</th>\
         <th>vs control</th><th>report</th></tr></thead><tbody>{rows}</tbody></table></body></html>\n",
        n = ids.len(),
        dir = escape(&results.root().display().to_string()),
    );
    secrets::redact(&html)
}

const CSS: &str = "body{font-family:sans-serif;margin:24px;max-width:1100px}\
table{border-collapse:collapse;font-size:13px}th,td{border-bottom:1px solid #ddd;padding:4px 6px;\
text-align:left}.note{color:#555;font-size:13px}.warn{color:#b2182b}";

fn run_row(results: &Results, repo: &Path, id: &str) -> Result<String> {
    let run = RecordedRun::open(results.root(), Some(id))?;
    let repo = git2::Repository::open(repo)?;
    let lineage = Lineage::read(&repo, &run)?;
    let champion = lineage.steps.last().expect("lineage has its base");
    let f = &run.run.fingerprint;
    let report_link = if run.dir.join("report.html").is_file() {
        format!("<a href=\"/files/{id}/report.html\">report.html</a>")
    } else {
        "-".into()
    };
    let mut row = String::new();
    let _ = write!(
        row,
        "<tr><td><a href=\"/runs/{id}\">{id}</a></td><td>{status}</td><td>{meter}, in {unit}</td>\
         <td>{regime}</td><td>{load}</td><td>{n}</td><td>{kept}</td><td>{start:.3}</td><td>{control}</td>\
         <td>{report_link}</td></tr>",
        id = escape(id),
        status = run.run.status,
        meter = escape(&meter(&f.meter_event, &f.meter_source)),
        unit = run.unit(),
        regime = regime(&run.run.config, &f.meter_source),
        load = escape(&report::load(&run.run.config, &f.meter_source)),
        n = run.attempts.len(),
        kept = lineage.steps.len() - 1,
        start = champion.cumulative,
        control = fmt_ratio(champion.vs_control),
    );
    Ok(row)
}

/// What counted, and where: instructions on the host's PMU and in an
/// emulated guest are different meters with one event name.
fn meter(event: &str, source: &str) -> String {
    if source.is_empty() || source == event {
        event.to_string()
    } else {
        format!("{event} ({source})")
    }
}

/// The workload the run measured in, in its meter's terms.
fn regime(c: &crate::config::Config, meter_source: &str) -> &'static str {
    if meter_source == "emulated" {
        c.emulator.regime.name()
    } else {
        match c.saturation.regime {
            Regime::Saturated => "saturated",
            Regime::Idle => "idle",
        }
    }
}

/// When the run last wrote its journal or record: a run that says it is
/// running but has written nothing for long has likely crashed.
fn last_written(dir: &Path) -> String {
    ["attempts.jsonl", "run.json"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok()?.modified().ok())
        .max()
        .map_or(String::new(), |t| {
            format!(" (its records last written {})", crate::clock::utc(t))
        })
}
