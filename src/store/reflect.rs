//! List, then watch from the list's resourceVersion; when the watch fails,
//! ends or is `Gone`, wait and list again. The one loop every reader that
//! keeps a view of a kind in step with the store runs (the boot directory,
//! the controller feeds). Uses only `Store::list` and `Store::watch`, so it
//! works the same on every backend.
//!
//! The wait after a failure starts at the given delay and doubles while
//! lists keep failing, up to [`MAX_BACKOFF_FACTOR`] times it; a list that
//! succeeds resets it.

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{ListOptions, Store, StoreError, WatchEvent};
use crate::api::Kind;

/// The longest wait is the first one times this.
pub const MAX_BACKOFF_FACTOR: u32 = 16;

/// What the reflector tells its consumer.
#[derive(Debug)]
pub enum Reflected {
    /// A complete list: everything of the kind now (replaces any view
    /// built so far).
    Listed(Vec<Value>),
    /// One change after the list.
    Changed(WatchEvent),
}

/// Keep `apply` fed with `kind` objects until `cancel` fires.
pub async fn reflect(
    store: &dyn Store,
    kind: Kind,
    opts: &ListOptions,
    relist_delay: Duration,
    cancel: &CancellationToken,
    mut apply: impl FnMut(Reflected),
) {
    let mut delay = relist_delay;
    loop {
        let (err, listed) = tokio::select! {
            _ = cancel.cancelled() => return,
            r = list_and_watch(store, kind, opts, &mut apply) => r,
        };
        if listed {
            delay = relist_delay;
        }
        tracing::warn!(%kind, error = %err, "watch ended; listing again");
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        if !listed {
            delay = (delay * 2).min(relist_delay * MAX_BACKOFF_FACTOR);
        }
    }
}

/// One list plus the watch after it; returns why it stopped and whether
/// the list succeeded.
async fn list_and_watch(
    store: &dyn Store,
    kind: Kind,
    opts: &ListOptions,
    apply: &mut impl FnMut(Reflected),
) -> (StoreError, bool) {
    let list = match store.list(kind, opts).await {
        Ok(l) => l,
        Err(e) => return (e, false),
    };
    let from = list.resource_version;
    apply(Reflected::Listed(list.items));
    let mut watch = match store.watch(kind, opts, Some(&from)).await {
        Ok(w) => w,
        Err(e) => return (e, true),
    };
    while let Some(ev) = watch.next().await {
        match ev {
            Ok(ev) => apply(Reflected::Changed(ev)),
            Err(e) => return (e, true),
        }
    }
    (StoreError::Backend("watch closed".into()), true)
}
