//! `ratchet report`: one self-contained HTML file per run (inline SVG, no
//! script, nothing fetched), for a reviewer who was not there: what was tried,
//! what each attempt cost, how sure each verdict was, where the champion
//! stands against the control, where its CPU time goes, and, once the run
//! has been replayed or ablated, whether its keeps held up.

use anyhow::Result;
use std::fmt::Write;
use std::path::Path;

use crate::bench::meters::emulator::WorkloadRegime;
use crate::bench::meters::profile::Profile;
use crate::config::Config;
use crate::record::lineage::{Lineage, Source};
use crate::record::recorded::RecordedRun;
use crate::record::stack_ablation::PartInStack;
use crate::referee::figures::{
    fmt_ci, fmt_ci_at, fmt_comparison, fmt_estimate, fmt_ratio, fmt_vs_control,
};
use crate::review::ablate::AblationRecord;
use crate::review::charts::{
    control_chart, cost_chart, profile_chart, ratio_chart, style, SECTIONS,
};
use crate::review::functions;
use crate::review::log::{judged_screen, part_lines, stacks, StackParts, PARTS_LEGEND};
use crate::review::replay::ReplayRecord;
use crate::review::svg::escape;
use crate::review::tree;

fn attempts_table(run: &RecordedRun) -> String {
    let mut s = String::from(
        "<table><thead><tr><th>#</th><th>verdict</th><th>origin</th><th>ratio</th><th>interval (coverage)</th>\
         <th>vs control</th><th>hypothesis and evidence</th></tr></thead><tbody>",
    );
    for a in &run.attempts {
        let (color, _) = style(a.verdict);
        let c = a.vs_champion.as_ref();
        let detail = a.evidence().unwrap_or("");
        let _ = write!(
            s,
            "<tr id=\"attempt-{n}\"><td>{n}</td><td><span class=\"verdict\" style=\"background:{color}\">{v}</span></td>\
             <td>{o}</td><td>{r}</td><td>{ci}</td><td>{vc}</td><td><div>{h}</div>",
            n = a.number,
            v = escape(a.verdict.name()),
            o = escape(&a.origin.describe(&a.stack_of, a.retry_of)),
            r = fmt_ratio(c.and_then(|c| c.ratio_median)),
            ci = fmt_ci_at(c.and_then(|c| c.ratio_interval), c.map(|c| c.ci_level)),
            vc = fmt_ratio(a.vs_control.as_ref().and_then(|c| c.ratio_median)),
            h = escape(&a.hypothesis),
        );
        let parts = a
            .ablation
            .iter()
            .flat_map(|ab| &ab.parts)
            .map(PartInStack::line);
        let lines = judged_screen(a)
            .into_iter()
            .chain([detail.to_string()])
            .chain(parts);
        for d in lines.filter(|d| !d.is_empty()) {
            let _ = write!(s, "<div class=\"detail\">{}</div>", escape(&d));
        }
        let reference = a.attempt_ref.as_deref().unwrap_or("");
        if !a.diff.is_empty() {
            let lines = a.diff.lines().count();
            let _ = write!(
                s,
                "<details><summary>diff ({lines} lines) {}</summary><pre>{}</pre></details>",
                escape(reference),
                escape(&a.diff)
            );
        }
        s += "</td></tr>";
    }
    s + "</tbody></table>"
}

/// The champions, each kept stack with what its parts gave in it.
fn lineage_table(lineage: &Lineage, stacks: &[StackParts]) -> String {
    let mut s = String::from(
        "<table><thead><tr><th>attempt</th><th>commit</th><th>ratio</th><th>interval</th>\
         <th>to start</th><th>to control</th><th>hypothesis</th></tr></thead><tbody>",
    );
    for st in &lineage.steps {
        let commit = st.commit.as_deref().unwrap_or(&st.recorded_commit);
        let _ = write!(
            s,
            "<tr><td>{}</td><td><code>{}</code>{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{}</td><td>{}</td></tr>",
            if st.attempt == 0 { "start".into() } else { st.attempt.to_string() },
            escape(crate::record::gitops::short(commit)),
            if st.commit.is_none() { " (not in this repository)" } else { "" },
            fmt_ratio(st.ratio),
            fmt_ci(st.interval),
            st.cumulative,
            fmt_ratio(st.vs_control),
            escape(&st.hypothesis)
        );
        let parts: String = part_lines(stacks, st.attempt)
            .map(|l| format!("<div class=\"detail\">{}</div>", escape(&l)))
            .collect();
        if !parts.is_empty() {
            let _ = write!(s, "<tr><td></td><td colspan=\"6\">{parts}</td></tr>");
        }
    }
    s += "</tbody></table>";
    if !stacks.is_empty() {
        let _ = write!(
            s,
            "<p class=\"note\">{}</p>",
            escape(PARTS_LEGEND.trim_end())
        );
    }
    s
}

fn facts(run: &RecordedRun) -> String {
    let r = &run.run;
    let f = &r.fingerprint;
    let aa = r.aa.as_ref().map_or("not run".into(), |aa| {
        format!(
            "spread (cv of block ratios) {:.1}%, interval [{:.3}, {:.3}]; {} samples per measurement",
            aa.cv * 100.0,
            aa.interval[0],
            aa.interval[1],
            aa.samples_needed
        )
    });
    let rows = [
        (
            "status",
            format!(
                "{} — {}",
                r.status,
                r.stop_reason.clone().unwrap_or_default()
            ),
        ),
        ("started", r.started_at.clone()),
        ("agent", r.agent.clone()),
        ("base commit", r.base_commit.clone()),
        ("branch", r.branch.clone()),
        (
            "meter",
            format!("{} ({}): {}", f.meter_event, run.unit(), f.meter_reason),
        ),
        ("threshold", format!("{:.1}%", run.threshold() * 100.0)),
        ("A/A check", aa),
        ("load", load(&r.config, &f.meter_source)),
        (
            "machine",
            format!(
                "{}; {} cores, SUT core {}; kernel {}; governor {}",
                f.cpu_model, f.cores, f.sut_core, f.kernel, f.governor
            ),
        ),
        (
            "toolchain",
            format!("liburing {}; {}; {}", f.liburing, f.gcc, f.go),
        ),
    ];
    let mut s = String::from("<table class=\"facts\">");
    for (k, v) in rows {
        let _ = write!(s, "<tr><th>{k}</th><td>{}</td></tr>", escape(&v));
    }
    s + "</table>"
}

/// The load as the run's meter applied it: an emulated trial counts
/// connections, and its timed settings were never used.
pub fn load(c: &Config, meter_source: &str) -> String {
    let e = &c.emulator;
    if meter_source != "emulated" {
        return format!(
            "load.connections = {}; {} ms warm-up, {} ms window",
            c.load.connections, c.trial.warmup_ms, c.trial.window_ms
        );
    }
    if e.workload() == WorkloadRegime::Live {
        format!(
            "emulated, live: {} connections in flight; {} warm-up connections, {} in a window",
            c.load.connections, e.warmup_connections, e.window_connections
        )
    } else {
        format!(
            "emulated, backlog: {} connections queued at a time; {} warm-up and {} measured backlogs a trial",
            e.backlog, e.warmup_batches, e.batches
        )
    }
}

/// One table row, every cell escaped.
fn html_row(cells: &[String]) -> String {
    let mut s = String::from("<tr>");
    for c in cells {
        let _ = write!(s, "<td>{}</td>", escape(c));
    }
    s + "</tr>"
}

/// The newest record of a review command (`replays`, `ablations`) beside the run.
fn latest<T: serde::de::DeserializeOwned>(run: &RecordedRun, kind: &str) -> Option<(String, T)> {
    let mut files: Vec<_> = std::fs::read_dir(run.dir.join(kind))
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let path = files.pop()?;
    let name = path.file_name()?.to_string_lossy().to_string();
    crate::files::read_json(&path).ok().map(|v| (name, v))
}

fn replay_section(run: &RecordedRun) -> Option<String> {
    let (name, r): (String, ReplayRecord) = latest(run, "replays")?;
    let mut s = format!(
        "<section id=\"replay\"><h2>Replayed</h2><p class=\"note\">The newest replay ({}), {} samples: \
         each keep measured again against its predecessor, side by side. Ratios only: raw costs from \
         different machines are not compared.</p>",
        escape(&name),
        r.sample_count
    );
    if !r.fingerprint_differences.is_empty() {
        let _ = write!(
            s,
            "<p class=\"note\">Fingerprint differences: {}</p>",
            escape(&r.fingerprint_differences.join("; "))
        );
    }
    s += "<table><thead><tr><th>attempt</th><th>recorded</th><th>replayed</th><th>verdict</th>\
          <th>reproduced</th><th>hypothesis</th></tr></thead><tbody>";
    for k in &r.keeps {
        s += &html_row(&k.cells());
    }
    let c = &r.champion;
    let _ = write!(
        s,
        "</tbody></table><p>Final champion now: {} of the start (recorded {:.3}), {} of the control \
         (recorded {}).</p>",
        fmt_comparison(&c.vs_start),
        c.recorded_vs_start,
        fmt_vs_control(c.vs_control.as_ref()),
        fmt_ratio(c.recorded_vs_control)
    );
    if let Some(ds) = &r.decisions {
        let differ = crate::review::replay::disagreements(ds);
        let heading = crate::review::replay::decisions_heading(&r);
        let _ = write!(
            s,
            "<p>{}: {} of {} agree{}</p>",
            escape(&(heading[..1].to_uppercase() + &heading[1..])),
            ds.iter().filter(|d| d.agrees == Some(true)).count(),
            ds.iter().filter(|d| d.agrees.is_some()).count(),
            if differ.is_empty() {
                String::new()
            } else {
                format!("; differing: {}", escape(&differ.join(", ")))
            }
        );
    }
    Some(s + "</section>")
}

fn ablation_section(run: &RecordedRun) -> Option<String> {
    let (name, a): (String, AblationRecord) = latest(run, "ablations")?;
    let mut s = format!(
        "<section id=\"ablation\"><h2>Ablation</h2><p class=\"note\">The newest ablation ({}), {} samples: \
         each kept change reverted from the final champion. Ratio = cost(champion) / cost(without it).</p>\
         <table><thead><tr><th>attempt</th><th>when kept</th><th>in the final champion</th><th>finding</th>\
         <th>hypothesis</th></tr></thead><tbody>",
        escape(&name),
        a.sample_count
    );
    for c in &a.contributions {
        let mut cells = c.cells().to_vec();
        if let Some(n) = &c.note {
            cells[3] += &format!(" ({n})");
        }
        cells.push(c.hypothesis.clone());
        s += &html_row(&cells);
    }
    s += "</tbody></table>";
    for p in &a.pairs {
        let _ = write!(
            s,
            "<p>#{} + #{}: factor {}: {}</p>",
            p.attempts[0],
            p.attempts[1],
            fmt_estimate(p.factor, p.factor_ci95),
            escape(&p.description)
        );
    }
    Some(s + "</section>")
}

const CSS: &str = "body{font-family:sans-serif;max-width:1100px;margin:24px auto;color:#222;padding:0 12px}\
h1{font-size:22px}h2{font-size:17px;margin-top:32px}table{border-collapse:collapse;width:100%;font-size:13px}\
th,td{border-bottom:1px solid #ddd;padding:4px 6px;text-align:left;vertical-align:top}\
.facts th{width:130px;color:#555}.verdict{color:white;padding:1px 6px;border-radius:3px}\
.detail{color:#8a4b08;font-size:12px;white-space:pre-wrap}pre{font-size:11px;background:#f6f6f6;padding:6px;overflow-x:auto}\
.note{color:#555;font-size:13px}.warn{color:#b2182b}svg.chart{display:block;margin:8px 0}";

/// The whole report as one HTML document.
/// `results` is the directory of every run's records, where the loop
/// stored the run's profiles.
pub fn render(run: &RecordedRun, lineage: &Lineage, results: &Path) -> String {
    let r = &run.run;
    let champion = lineage.steps.last().expect("lineage has its base");
    let kept = lineage.steps.len() - 1;
    let mut s = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>ratchet run {id}</title>\
         <style>{CSS}</style></head><body><h1>ratchet run {id}</h1>\
         <p>{n} attempts, {kept} kept. The champion costs <b>{cum:.3}</b> of the run's start \
         (product of the kept ratios) and <b>{vc}</b> of the control.</p>",
        id = escape(&r.run_id),
        n = run.attempts.len(),
        cum = champion.cumulative,
        vc = fmt_ratio(champion.vs_control),
    );
    s += &facts(run);
    if lineage.source == Source::Journal {
        let _ = write!(
            s,
            "<p class=\"note\">Branch {} is not in the repository this report was made in: \
             the lineage is read from the journal.</p>",
            escape(&r.branch)
        );
    }
    for w in &lineage.warnings {
        let _ = write!(s, "<p class=\"warn\">warning: {}</p>", escape(w));
    }
    let unit = run.unit();
    let sections = [
        (
            SECTIONS[0],
            "Cost per connection",
            cost_chart(run, lineage),
            format!(
                "Medians over each attempt's sample_count, in {unit}. Raw costs drift with the machine between \
                 attempts; the verdicts rest on ratios measured side by side, below."
            ),
        ),
        (
            SECTIONS[1],
            "Ratios and their intervals",
            ratio_chart(run),
            "A candidate is kept only if its median ratio is at or below the keep line and the whole \
             interval is below 1."
                .to_string(),
        ),
        against_control(run),
        profile_section(results, &r.run_id, champion.attempt),
    ];
    for (id, title, chart, note) in sections {
        let _ = write!(
            s,
            "<section id=\"{id}\"><h2>{title}</h2><p class=\"note\">{}</p>{chart}</section>",
            escape(&note)
        );
    }
    s += &replay_section(run).unwrap_or_default();
    s += &ablation_section(run).unwrap_or_default();
    s += "<section id=\"lineage\"><h2>Champion lineage</h2>";
    s += &lineage_table(lineage, &stacks(&run.attempts));
    s += "</section><section id=\"search\"><h2>The search</h2><p class=\"note\">Each champion, \
          then the attempts measured against it: the agent's ideas, stacks of promising attempts \
          and retries of earlier ideas, with the ratio to that champion and its interval.</p>";
    s += &tree::render_html(&tree::levels(&run.attempts));
    s += "</section><section id=\"attempts\"><h2>Every attempt</h2>";
    s += &attempts_table(run);
    s += "</section></body></html>\n";
    s
}

/// The control's section: its chart, or what a run without one gave up.
/// The baseline's and the champion's profiles: shares by DSO, and the
/// hottest functions where the profiles name them.
fn profile_section(
    results: &Path,
    run_id: &str,
    at: usize,
) -> (&'static str, &'static str, String, String) {
    let base = Profile::load_stored(results, run_id, 0);
    let champion = Profile::load_stored(results, run_id, at);
    let emulated = champion
        .as_ref()
        .or(base.as_ref())
        .is_some_and(|p| p.unit.is_some());
    let note = if emulated {
        "Emulated instructions on the server's own vCPU, in an extra, unscored window of the live \
         regime, by the function each translated block starts in. On loopback the server's core \
         also does part of the client's receive work, as a real core does."
    } else {
        "perf record -e cpu-clock -g on the server in an extra, unscored window. On loopback the \
         server's kernel share includes part of the client's receive work."
    };
    (
        SECTIONS[3],
        "Profile: baseline and champion",
        profile_chart(base.as_ref(), champion.as_ref(), at)
            + &functions::table(base.as_ref(), champion.as_ref()),
        note.to_string(),
    )
}

fn against_control(run: &RecordedRun) -> (&'static str, &'static str, String, String) {
    let (chart, note) = if !run.run.config.run.has_control() {
        (
            String::new(),
            "This run had no control (run.control = \"none\"): nothing frozen was measured beside \
             its attempts, so the machine's drift was not checked against a reference.",
        )
    } else {
        (
            control_chart(run),
            "The champion of each attempt, measured in the same samples as the frozen control; \
             the first point is the run's baseline.",
        )
    };
    (SECTIONS[2], "Against the control", chart, note.to_string())
}

/// Writes the report of `run` to `out`.
pub fn write(repo: &git2::Repository, run: &RecordedRun, results: &Path, out: &Path) -> Result<()> {
    let lineage = Lineage::read(repo, run)?;
    let html = render(run, &lineage, results);
    crate::files::write_atomic(out, html.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An emulated run's report once listed the timed warm-up and window
    /// it never used.
    #[test]
    fn the_load_is_described_in_the_terms_of_the_meter_that_applied_it() {
        let mut c = Config::default();
        let host = load(&c, "pmu");
        assert!(host.contains("ms window"), "{host}");
        let backlog = load(&c, "emulated");
        assert!(
            backlog.starts_with("emulated, backlog: 256 connections"),
            "{backlog}"
        );
        assert!(!backlog.contains(" ms"), "{backlog}");
        c.emulator.regime = WorkloadRegime::Live;
        let live = load(&c, "emulated");
        assert!(
            live.starts_with("emulated, live: 256 connections in flight"),
            "{live}"
        );
        assert!(!live.contains(" ms"), "{live}");
    }
}
