//! Watch streams: chunked JSON lines, history replay, bookmarks, selector
//! transitions, timeouts, 410 Gone, and the streaming-list form (sendInitialEvents).

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use http::Response;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::select::Selector;
use super::{Query, Shared, convert, table};
use crate::registry::ResourceType;
use crate::status::ApiError;
use crate::store::{Change, EventType};

/// How often bookmarks are sent (and how often a stream notices its client left).
const BOOKMARK_EVERY: Duration = Duration::from_secs(1);

struct Stream {
    shared: Arc<Shared>,
    rt: ResourceType,
    selector: Selector,
    output: table::Output,
    bookmarks: bool,
    out: mpsc::Sender<Result<Bytes, std::io::Error>>,
}

impl Stream {
    async fn send(&self, v: &Value) -> bool {
        let mut line = v.to_string();
        line.push('\n');
        self.out.send(Ok(Bytes::from(line))).await.is_ok()
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Value {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({"type": "BOOKMARK", "object": {"kind": self.rt.kind, "apiVersion": self.rt.api_version(), "metadata": meta}})
    }

    /// Sends one change if it concerns this watcher; false when the client has gone.
    async fn change(&self, c: &Change) -> bool {
        let now = self.selector.matches(&c.object);
        let before = c.old.as_ref().is_some_and(|o| self.selector.matches(o));
        let kind = match c.kind {
            EventType::Added if now => "ADDED",
            EventType::Modified if now && before => "MODIFIED",
            EventType::Modified if now => "ADDED",
            EventType::Modified if before => "DELETED",
            EventType::Deleted if now || before => "DELETED",
            _ => return true,
        };
        let obj = match convert::one(
            &self.shared,
            &self.rt,
            (*c.object).clone(),
            &self.rt.version,
        )
        .await
        {
            Ok(o) => o,
            Err(e) => {
                return self
                    .send(&json!({"type": "ERROR", "object": e.to_status()}))
                    .await;
            }
        };
        let obj = self.output.one(&self.rt, obj);
        self.send(&json!({"type": kind, "object": obj})).await
    }
}

/// Opens a watch of `rt` in `namespace` (None = all namespaces).
pub(super) fn watch(
    shared: Arc<Shared>,
    rt: ResourceType,
    namespace: Option<String>,
    q: &Query,
    selector: Selector,
    output: table::Output,
) -> Response<Body> {
    let send_initial = q.flag("sendInitialEvents");
    let bookmarks = q.flag("allowWatchBookmarks");
    let timeout = q
        .non_empty("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs);
    let from = q
        .non_empty("resourceVersion")
        .filter(|rv| *rv != "0" && !send_initial);
    let start = {
        let mut st = shared.store.lock();
        match from {
            None => Ok(st.watch_current(&rt.key(), namespace.as_deref())),
            Some(rv) => match rv.parse::<u64>() {
                Ok(rv) => st.watch_from(&rt.key(), namespace.as_deref(), rv),
                Err(_) => Err(ApiError::bad_request(format!(
                    "invalid resource version {rv:?}: expected an integer"
                ))),
            },
        }
    };
    let (tx, rx) = mpsc::channel(256);
    let stream = Stream {
        shared,
        rt,
        selector,
        output,
        bookmarks,
        out: tx,
    };
    tokio::spawn(async move {
        let start = match start {
            Ok(s) => s,
            Err(e) => {
                stream
                    .send(&json!({"type": "ERROR", "object": e.to_status()}))
                    .await;
                return;
            }
        };
        let mut last_rv = start.rv;
        for c in &start.initial {
            if !stream.change(c).await {
                return;
            }
        }
        // The end of the initial events: annotated for the streaming-list form, and a
        // plain bookmark for any watch that allows them.
        if send_initial || stream.bookmarks {
            let b = stream.bookmark(start.rv, send_initial);
            if !stream.send(&b).await {
                return;
            }
        }
        let mut rx = start.rx;
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let mut tick = tokio::time::interval(BOOKMARK_EVERY);
        tick.tick().await;
        loop {
            let sleep_until = deadline
                .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86400));
            tokio::select! {
                ev = rx.recv() => match ev {
                    Some(c) => {
                        last_rv = last_rv.max(c.rv);
                        if !stream.change(&c).await { return; }
                    }
                    None => return,
                },
                _ = tick.tick() => {
                    if stream.out.is_closed() { return; }
                    if stream.bookmarks {
                        // Only claim the current resourceVersion when no event is in flight:
                        // events are queued under the store lock, so an empty queue seen under
                        // that lock means this watcher has everything up to `rv`.
                        let rv = {
                            let st = stream.shared.store.lock();
                            if rx.is_empty() { st.rv } else { last_rv }
                        };
                        last_rv = rv;
                        let b = stream.bookmark(rv, false);
                        if !stream.send(&b).await { return; }
                    }
                }
                _ = tokio::time::sleep_until(sleep_until) => return,
            }
        }
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache, private"),
    );
    resp
}
