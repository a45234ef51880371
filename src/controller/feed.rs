//! Feeding a runner from the store: list every object of a kind, ask for
//! each key, then watch from the list's resourceVersion and ask for the key
//! of every change; when the watch fails or ends (including `Gone`), list
//! again. Uses only `Store::list` and `Store::watch`, so it works the same on
//! every backend.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::runner::QueueHandle;
use crate::api::Kind;
use crate::store::{ListOptions, Store, StoreError, key_of};

/// A namespaced object's identity, the usual queue key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of a stored object (default namespace filled in).
    pub fn of(obj: &Value) -> Self {
        let (namespace, name) = key_of(obj);
        ObjectKey { namespace, name }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Keys to ask for when an object changes (an object may concern several
/// keys, e.g. a MachineClass concerns the Machines that use it).
pub type KeyMap<K> = Arc<dyn Fn(&Value) -> Vec<K> + Send + Sync>;

/// The identity mapping: an object's own key.
pub fn own_key() -> KeyMap<ObjectKey> {
    Arc::new(|v| vec![ObjectKey::of(v)])
}

/// Ask for the keys of every `kind` object and every change to one, until
/// `cancel` fires. Waits `relist_delay` before listing again after an error.
pub async fn feed<K>(
    store: Arc<dyn Store>,
    kind: Kind,
    opts: ListOptions,
    map: KeyMap<K>,
    queue: QueueHandle<K>,
    relist_delay: Duration,
    cancel: CancellationToken,
) {
    loop {
        let err = tokio::select! {
            _ = cancel.cancelled() => return,
            e = list_and_watch(store.as_ref(), kind, &opts, &map, &queue) => e,
        };
        tracing::warn!(%kind, error = %err, "watch ended; listing again");
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(relist_delay) => {}
        }
    }
}

/// One list plus the watch after it; returns why the watch stopped.
async fn list_and_watch<K>(
    store: &dyn Store,
    kind: Kind,
    opts: &ListOptions,
    map: &KeyMap<K>,
    queue: &QueueHandle<K>,
) -> StoreError {
    let list = match store.list(kind, opts).await {
        Ok(l) => l,
        Err(e) => return e,
    };
    for obj in &list.items {
        map(obj).into_iter().for_each(|k| queue.enqueue(k));
    }
    let mut watch = match store.watch(kind, opts, Some(list.resource_version)).await {
        Ok(w) => w,
        Err(e) => return e,
    };
    while let Some(ev) = watch.next().await {
        match ev {
            Ok(ev) => map(ev.object()).into_iter().for_each(|k| queue.enqueue(k)),
            Err(e) => return e,
        }
    }
    StoreError::Backend("watch closed".into())
}

#[cfg(test)]
mod tests;
