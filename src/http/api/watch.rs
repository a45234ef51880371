//! `?watch=true` streams: newline-delimited `{"type","object"}` events as
//! Kubernetes sends them. Without a resourceVersion (or with "0") the stream
//! starts with a synthetic `ADDED` per existing object, then follows
//! changes; with one it yields every change after it. A store error ends
//! the stream with an `ERROR` event carrying a `Status` (410 `Expired` for a
//! version too old). Streams end on shutdown and after `timeoutSeconds`.
//!
//! A version already too old when the watch starts is answered as
//! kube-apiserver answers it too: 200 and a single `ERROR` 410 event, not
//! an HTTP 410. Clients re-list on that event (kube-rs' watcher and
//! client-go's reflector do); an HTTP 410 at the start would have kube-rs
//! retry the same version for ever.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::Response;
use futures::{Stream, StreamExt, stream};
use serde_json::{Value, json};

use super::fields::FieldSelector;
use super::table::{self, IncludeObject};
use super::{ApiError, ApiState};
use crate::api::Kind;
use crate::store::{ListOptions, StoreError};

/// Longest a watch stays open without a client-given timeout; clients
/// reconnect from their last resourceVersion, as with Kubernetes.
const MAX_WATCH: Duration = Duration::from_secs(3600);

/// Which objects a watch yields (field selector) and how (as objects, or
/// as one-row Tables when the client asked for server-side printing).
#[derive(Clone, Debug, Default)]
pub struct Shape {
    pub fields: FieldSelector,
    pub table: Option<IncludeObject>,
}

impl Shape {
    fn render(&self, kind: Kind, type_: &str, obj: &Value) -> Option<Bytes> {
        if !self.fields.matches(kind, obj) {
            return None;
        }
        Some(match self.table {
            Some(include) => {
                let rv = obj
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str);
                line(
                    type_,
                    &table::table(kind, std::slice::from_ref(obj), rv, include),
                )
            }
            None => line(type_, obj),
        })
    }
}

/// What a watch asked for besides its objects.
#[derive(Clone, Copy, Debug, Default)]
pub struct Asked {
    /// `allowWatchBookmarks=true`: BOOKMARK events may be sent.
    pub bookmarks: bool,
    /// `sendInitialEvents=true`: the current objects first, then a
    /// BOOKMARK annotated `k8s.io/initial-events-end`.
    pub initial_events: bool,
}

/// The annotation of the BOOKMARK that ends the initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// How often a watch that allows bookmarks is sent one (kube-apiserver
/// sends them about once a minute).
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);

pub async fn watch(
    st: ApiState,
    kind: Kind,
    opts: ListOptions,
    from: Option<String>,
    timeout_seconds: Option<u64>,
    shape: Shape,
    asked: Asked,
) -> Result<Response, ApiError> {
    let (initial, from) = match from {
        Some(rv) if !asked.initial_events => (Vec::new(), rv),
        _ => {
            let list = st.store.list(kind, &opts).await?;
            (list.items, list.resource_version)
        }
    };
    // Open the store watch before answering so a version the store never
    // gave out is a plain HTTP error; one too old is an ERROR event.
    let changes = match st.store.watch(kind, &opts, Some(&from)).await {
        Ok(changes) => changes,
        Err(e @ StoreError::Gone { .. }) => {
            let gone = stream::once(async move { Ok(error_line(e)) });
            return stream_response(Box::pin(gone));
        }
        Err(e) => return Err(e.into()),
    };
    let mut added: Vec<Bytes> = initial
        .iter()
        .filter_map(|o| shape.render(kind, "ADDED", o))
        .collect();
    if asked.initial_events {
        added.push(bookmark(kind, &from, true));
    }
    let added = stream::iter(added.into_iter().map(Ok));
    // The latest version sent, for the periodic bookmarks.
    let latest = std::sync::Arc::new(std::sync::Mutex::new(from.clone()));
    let seen = latest.clone();
    let changes = changes
        .filter_map(move |r| {
            futures::future::ready(match r {
                Ok(ev) => {
                    if let (Some(rv), Ok(mut l)) = (ev.resource_version(), seen.lock()) {
                        *l = rv.to_string();
                    }
                    shape.render(kind, ev.type_str(), ev.object()).map(Ok)
                }
                Err(e) => Some(Err(e)),
            })
        })
        // End after the first error, sending it as an ERROR event.
        .scan(false, |done, r| {
            if *done {
                return futures::future::ready(None);
            }
            let item = match r {
                Ok(b) => b,
                Err(e) => {
                    *done = true;
                    error_line(e)
                }
            };
            futures::future::ready(Some(Ok(item)))
        });
    let limit = timeout_seconds
        .map(Duration::from_secs)
        .unwrap_or(MAX_WATCH)
        .min(MAX_WATCH);
    let cancel = st.cancel.clone();
    let end = async move {
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = tokio::time::sleep(limit) => {}
        }
    };
    let gauge = WatchGauge::new(st.metrics.watches.clone());
    let bookmarks = match asked.bookmarks {
        true => stream::unfold(latest, move |latest| async move {
            tokio::time::sleep(BOOKMARK_EVERY).await;
            let rv = latest.lock().map(|l| l.clone()).unwrap_or_default();
            Some((Some(Ok(bookmark(kind, &rv, false))), latest))
        })
        .boxed(),
        false => stream::pending().boxed(),
    };
    // The stream ends when the changes end (after an ERROR event), not
    // with the bookmarks.
    let changes = changes
        .map(Some)
        .chain(stream::once(futures::future::ready(None)));
    let body = added
        .chain(
            stream::select(changes, bookmarks)
                .take_while(|x| futures::future::ready(x.is_some()))
                .filter_map(futures::future::ready),
        )
        .take_until(Box::pin(end))
        .map(move |b| {
            let _keep = &gauge;
            b
        });
    stream_response(Box::pin(body))
}

type Lines = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, Infallible>> + Send>>;

fn stream_response(body: Lines) -> Result<Response, ApiError> {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                e.to_string(),
            )
        })
}

fn line(type_: &str, obj: &Value) -> Bytes {
    let mut b = serde_json::to_vec(&json!({"type": type_, "object": obj})).unwrap_or_default();
    b.push(b'\n');
    Bytes::from(b)
}

/// A BOOKMARK: only the kind and the version the watch has reached.
fn bookmark(kind: Kind, rv: &str, initial_events_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv});
    if initial_events_end {
        metadata["annotations"] = json!({INITIAL_EVENTS_END: "true"});
    }
    line(
        "BOOKMARK",
        &json!({"kind": kind.as_str(), "apiVersion": kind.api_version(), "metadata": metadata}),
    )
}

fn error_line(e: StoreError) -> Bytes {
    let err: ApiError = e.into();
    line("ERROR", &err.body())
}

/// Counts open watches; decremented when the response body is dropped.
struct WatchGauge(prometheus_client::metrics::gauge::Gauge);

impl WatchGauge {
    fn new(g: prometheus_client::metrics::gauge::Gauge) -> Self {
        g.inc();
        WatchGauge(g)
    }
}

impl Drop for WatchGauge {
    fn drop(&mut self) {
        self.0.dec();
    }
}
