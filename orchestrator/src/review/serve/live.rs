//! A run's page learns of each change to its records from the server, by
//! server-sent events: the server watches the run's journal and record, and
//! pushes a fresh rendering when either changes. A journal being appended
//! is read as `ratchet report` reads it: a torn last line is skipped until
//! it is whole.

use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{pages, State};
use crate::interrupt;

/// How often the server looks at a run's files: well inside the two
/// seconds a reader may wait to see an attempt after it is decided.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// What changes when the run writes: each file's length and modification
/// time.
type Stamp = Vec<Option<(u64, SystemTime)>>;

fn stamp(dir: &Path) -> Stamp {
    ["attempts.jsonl", "run.json"]
        .iter()
        .map(|f| {
            let m = std::fs::metadata(dir.join(f)).ok()?;
            Some((m.len(), m.modified().ok()?))
        })
        .collect()
}

struct Watch {
    state: Arc<State>,
    id: String,
    dir: PathBuf,
    last: Option<Stamp>,
}

/// The events of run `id` (its directory `dir`): one rendering at once,
/// then one per change, until ratchet is interrupted.
pub fn events(
    state: Arc<State>,
    id: String,
    dir: PathBuf,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let watch = Watch {
        state,
        id,
        dir,
        last: None,
    };
    Sse::new(stream::unfold(watch, next)).keep_alive(KeepAlive::default())
}

async fn next(mut w: Watch) -> Option<(Result<Event, Infallible>, Watch)> {
    loop {
        if interrupt::requested() {
            return None;
        }
        let now = stamp(&w.dir);
        if w.last.as_ref() != Some(&now) {
            w.last = Some(now);
            let (state, id) = (w.state.clone(), w.id.clone());
            let body = tokio::task::spawn_blocking(move || {
                pages::run_body(&state.results, &state.repo, &id)
            })
            .await;
            match body {
                Ok(Ok(body)) => return Some((Ok(Event::default().event("report").data(body)), w)),
                Ok(Err(e)) => eprintln!("ratchet serve: run {} not rendered: {e:#}", w.id),
                Err(e) => eprintln!("ratchet serve: run {} not rendered: {e}", w.id),
            }
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}
