//! `ratchet serve`: a read-only web server for the runs in `results/`, the
//! running one included. A run's page is its report, kept current as the
//! run writes (see `live.rs`); nothing outside `results/` is ever read (see
//! `paths.rs`), and every page has the secrets in ratchet's environment
//! redacted, as its logs do.

mod live;
pub mod pages;
pub mod paths;

use anyhow::{Context, Result};
use axum::extract::{self, Path as UrlPath};
use axum::http::{header, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::bench::servers::secrets;
use crate::interrupt;
use paths::Results;

/// What every request reads: the results directory, the repository whose
/// branches hold the champions, and the runs the user named (all if none).
pub struct State {
    pub results: Results,
    pub repo: PathBuf,
    pub only: Vec<String>,
}

pub struct Options {
    pub address: IpAddr,
    pub port: u16,
    pub results: PathBuf,
    pub repo: PathBuf,
    pub runs: Vec<String>,
}

/// Serves until Ctrl-C or SIGTERM. The address actually bound is printed
/// first, on stdout, so `--port 0` can be used.
pub fn serve(o: Options) -> Result<()> {
    let results = Results::new(&o.results)
        .with_context(|| format!("results directory {}", o.results.display()))?;
    for id in &o.runs {
        results
            .run_dir(id)
            .map_err(|why| anyhow::anyhow!("ratchet serve: {why}"))?;
    }
    if !o.address.is_loopback() {
        eprintln!(
            "warning: serving on {}: anyone who can reach this machine can read these runs' records. \
             To read them from another machine, forward a port over SSH instead (docs/guide.md).",
            o.address
        );
    }
    let state = Arc::new(State {
        results,
        repo: o.repo,
        only: o.runs,
    });
    let app = Router::new()
        .route("/", get(index))
        .route("/runs/{id}", get(run_page))
        .route("/runs/{id}/events", get(run_events))
        .route("/files/{*path}", get(file))
        .fallback(not_found)
        .with_state(state.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((o.address, o.port))
            .await
            .with_context(|| format!("binding {}:{}", o.address, o.port))?;
        let bound = listener.local_addr()?;
        println!(
            "ratchet serve: http://{bound}/ (the runs in {}); Ctrl-C stops",
            state.results.root().display()
        );
        axum::serve(listener, app)
            .with_graceful_shutdown(interrupted())
            .await
            .context("serving")
    })
}

async fn interrupted() {
    while !interrupt::requested() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

type Shared = extract::State<Arc<State>>;

/// A 404 that says nothing to the client and everything to the log.
fn refused(uri: &Uri, why: &str) -> Response {
    eprintln!("ratchet serve: 404 for {uri}: {why}");
    (StatusCode::NOT_FOUND, "not found\n").into_response()
}

async fn not_found(uri: Uri) -> Response {
    refused(&uri, "no such page")
}

/// The run `id`'s directory, if the user let it be served.
fn run_dir(state: &State, id: &str) -> Result<PathBuf, String> {
    if !state.only.is_empty() && !state.only.iter().any(|r| r == id) {
        return Err(format!("run {id:?} was not named on the command line"));
    }
    state.results.run_dir(id)
}

async fn index(extract::State(state): Shared) -> Response {
    let page = tokio::task::spawn_blocking(move || {
        pages::runs_page(&state.results, &state.repo, &state.only)
    })
    .await;
    match page {
        Ok(page) => Html(page).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn run_page(
    extract::State(state): Shared,
    UrlPath(id): UrlPath<String>,
    uri: Uri,
) -> Response {
    if let Err(why) = run_dir(&state, &id) {
        return refused(&uri, &why);
    }
    let page =
        tokio::task::spawn_blocking(move || pages::run_page(&state.results, &state.repo, &id))
            .await;
    match page {
        Ok(Ok(page)) => Html(page).into_response(),
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}\n")).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

async fn run_events(
    extract::State(state): Shared,
    UrlPath(id): UrlPath<String>,
    uri: Uri,
) -> Response {
    match run_dir(&state, &id) {
        Ok(dir) => live::events(state, id, dir).into_response(),
        Err(why) => refused(&uri, &why),
    }
}

/// A file of a run (a report written by `ratchet report`, a record), as
/// text with secrets redacted, or as bytes when it is an image.
async fn file(extract::State(state): Shared, UrlPath(path): UrlPath<String>, uri: Uri) -> Response {
    let run = path.split('/').next().unwrap_or_default();
    let real = match run_dir(&state, run).and_then(|_| state.results.resolve(&path)) {
        Ok(p) if p.is_file() => p,
        Ok(p) => return refused(&uri, &format!("{} is not a file", p.display())),
        Err(why) => return refused(&uri, &why),
    };
    let Ok(bytes) = std::fs::read(&real) else {
        return refused(&uri, &format!("{} could not be read", real.display()));
    };
    let kind = content_type(&real);
    if kind.starts_with("image/png") {
        return ([(header::CONTENT_TYPE, kind)], bytes).into_response();
    }
    let text = secrets::redact(&String::from_utf8_lossy(&bytes));
    ([(header::CONTENT_TYPE, kind)], text).into_response()
}

fn content_type(path: &std::path::Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("json") => "application/json",
        _ => "text/plain; charset=utf-8",
    }
}
