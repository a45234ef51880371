//! Feeding a runner from the store: through the store's reflector
//! ([`crate::store::reflect`]: list, watch from the list's version, list
//! again when the watch ends), ask for the key of every listed object and
//! of every change.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::runner::QueueHandle;
use crate::api::Kind;
use crate::store::reflect::{Reflected, reflect};
use crate::store::{ListOptions, Store, key_of};

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
/// `cancel` fires. Waits `relist_delay` (doubling while lists fail) before
/// listing again after an error.
pub async fn feed<K>(
    store: Arc<dyn Store>,
    kind: Kind,
    opts: ListOptions,
    map: KeyMap<K>,
    queue: QueueHandle<K>,
    relist_delay: Duration,
    cancel: CancellationToken,
) {
    reflect(
        store.as_ref(),
        kind,
        &opts,
        relist_delay,
        &cancel,
        |r| match r {
            Reflected::Listed(items) => items
                .iter()
                .flat_map(|o| map(o))
                .for_each(|k| queue.enqueue(k)),
            Reflected::Changed(ev) => map(ev.object()).into_iter().for_each(|k| queue.enqueue(k)),
        },
    )
    .await;
}

#[cfg(test)]
mod tests;
