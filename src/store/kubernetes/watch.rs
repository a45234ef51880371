//! A store watch on a Kubernetes API server: one `?watch=true` request
//! after another, each from the last resourceVersion seen (an event's or a
//! bookmark's), so the caller sees one unbroken stream of changes although
//! the server ends every watch request after `timeoutSeconds`. An `ERROR`
//! event ends the stream with its mapped error: `410 Expired` becomes
//! [`StoreError::Gone`], on which [`crate::store::reflect`] lists again.

use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::Client;
use kube::core::WatchEvent as KubeEvent;
use kube::core::params::WatchParams;
use kube::core::request::Request;
use serde_json::Value;

use super::resource::Call;
use super::set_type;
use crate::api::Kind;
use crate::store::{StoreError, WatchEvent, WatchStream, resource_version_of};

/// How long the server keeps one watch request open. Below kube-rs's read
/// timeout (295 s), as kube-rs's own watcher does, so a quiet watch ends
/// cleanly instead of timing out.
const WATCH_TIMEOUT_SECS: u32 = 290;

/// Wait before reopening a watch that ended without yielding anything, so
/// a server that closes watches at once is not asked again in a busy loop.
const QUIET_REOPEN: Duration = Duration::from_secs(1);

type Raw = BoxStream<'static, Result<KubeEvent<Value>, kube::Error>>;

/// Where a watch reads from.
#[derive(Clone)]
pub struct Target {
    pub client: Client,
    pub kind: Kind,
    /// `None`: all namespaces.
    pub namespace: Option<String>,
    /// Label selector text (empty: everything).
    pub selector: String,
    pub path: String,
}

impl Target {
    fn call<'a>(&'a self, from: &'a str) -> Call<'a> {
        Call {
            verb: "watch",
            kind: self.kind,
            namespace: self.namespace.as_deref(),
            name: "",
            subresource: None,
            resource_version: Some(from),
        }
    }

    /// Open one watch request from `from`.
    async fn open(&self, from: &str) -> Result<Raw, StoreError> {
        let mut wp = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
        if !self.selector.is_empty() {
            wp = wp.labels(&self.selector);
        }
        let req = Request::new(&self.path)
            .watch(&wp, from)
            .map_err(|e| StoreError::Backend(format!("watch request: {e}")))?;
        let events = self
            .client
            .request_events::<Value>(req)
            .await
            .map_err(|e| self.call(from).error(e))?;
        Ok(events.boxed())
    }
}

struct State {
    target: Target,
    last: String,
    raw: Option<Raw>,
    /// Whether the current request yielded anything (event or bookmark).
    fruitful: bool,
    done: bool,
}

/// Open a watch from `from` (errors of the first request come back here,
/// as the trait promises) and keep it going.
pub async fn watch(target: Target, from: String) -> Result<WatchStream, StoreError> {
    let raw = target.open(&from).await?;
    let state = State {
        target,
        last: from,
        raw: Some(raw),
        fruitful: false,
        done: false,
    };
    Ok(futures::stream::unfold(state, next).boxed())
}

async fn next(mut st: State) -> Option<(Result<WatchEvent, StoreError>, State)> {
    loop {
        if st.done {
            return None;
        }
        let raw = match st.raw.as_mut() {
            Some(r) => r,
            None => {
                if !st.fruitful {
                    tokio::time::sleep(QUIET_REOPEN).await;
                }
                st.fruitful = false;
                match st.target.open(&st.last).await {
                    Ok(r) => st.raw.insert(r),
                    Err(e) => {
                        st.done = true;
                        return Some((Err(e), st));
                    }
                }
            }
        };
        let item = match raw.next().await {
            None => {
                // The server ended this request (timeoutSeconds): go on
                // from the last version seen.
                tracing::debug!(kind = %st.target.kind, from = %st.last, "watch request ended; reopening");
                st.raw = None;
                continue;
            }
            Some(item) => item,
        };
        st.fruitful = true;
        let ev = match item {
            Ok(KubeEvent::Added(o)) => WatchEvent::Added(set_type(st.target.kind, o)),
            Ok(KubeEvent::Modified(o)) => WatchEvent::Modified(set_type(st.target.kind, o)),
            Ok(KubeEvent::Deleted(o)) => WatchEvent::Deleted(set_type(st.target.kind, o)),
            Ok(KubeEvent::Bookmark(b)) => {
                st.last = b.metadata.resource_version;
                continue;
            }
            Ok(KubeEvent::Error(s)) => {
                let e = st.target.call(&st.last).status_error(&s);
                st.done = true;
                return Some((Err(e), st));
            }
            Err(e) => {
                let e = st.target.call(&st.last).error(e);
                st.done = true;
                return Some((Err(e), st));
            }
        };
        if let Some(rv) = resource_version_of(ev.object()) {
            st.last = rv.to_string();
        }
        return Some((Ok(ev), st));
    }
}
