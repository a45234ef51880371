//! A read cache in front of a remote store (the Kubernetes backend), so
//! that the controllers and the boot services read the objects they need
//! on every reconcile and every boot request (the Machine, its class, its
//! set, its BMC and join Secrets) from memory instead of asking the API
//! server each time.
//!
//! The cache is fed by watches, the way an informer is:
//! - every list and watch made through [`CachingStore`] updates it before
//!   the caller sees the result, so a controller woken by a watch event
//!   reads an object at least as new as the event that woke it;
//! - the first read of a cached kind starts a reflector of that kind
//!   (list, watch, list again; [`super::reflect`]) that keeps it current
//!   whether or not another reader watches the kind;
//! - every write's answer is put in the cache, so this process reads its
//!   own writes; a write refused as a `Conflict` drops the entry, so the
//!   retry reads the object from the server.
//!
//! An entry is only ever replaced by a newer resourceVersion (when the
//! versions are numbers, as kube-apiserver's are), so a late event cannot
//! undo a write already seen; a deletion leaves a tombstone with its
//! version so that an older event cannot bring the object back.
//!
//! A read of an object the cache does not hold (not yet listed, created
//! by another client a moment ago, deleted) goes to the server. What the
//! cache gives is what the watches last brought: like any informer it can
//! lag the server by the watch's delay. Whoever plans from a cached object
//! writes at the resourceVersion it read (a Conflict means a fresh read
//! and a new plan), and a change to a class or set wakes every Machine
//! that uses it, so a plan made from a copy the watch had not yet updated
//! is superseded by the reconcile the update triggers.
//!
//! Lists and watches pass through: only reads by name are served here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{
    Deleted, ListOptions, ObjectList, Store, StoreError, WatchEvent, WatchStream, key_of,
    resource_version_of,
};
use crate::api::Kind;

/// The kinds read by name on the hot paths.
pub const CACHED_KINDS: [Kind; 4] = [
    Kind::Machine,
    Kind::MachineClass,
    Kind::MachineSet,
    Kind::Secret,
];

/// How long a reflector waits before listing again after its watch ends.
const RELIST_DELAY: Duration = Duration::from_secs(1);

type Key = (String, String);

#[derive(Clone, Debug)]
enum Entry {
    Live {
        version: Option<u64>,
        object: Arc<Value>,
    },
    /// Deleted at this version: an event older than it is ignored.
    Gone { version: Option<u64> },
}

impl Entry {
    fn version(&self) -> Option<u64> {
        match self {
            Entry::Live { version, .. } | Entry::Gone { version } => *version,
        }
    }
}

fn version_of(obj: &Value) -> Option<u64> {
    resource_version_of(obj).and_then(|v| v.parse().ok())
}

/// Whether an entry at `held` is newer than a change at `incoming` (never,
/// when either is not a number: the latest arrival wins).
fn newer(held: Option<u64>, incoming: Option<u64>) -> bool {
    matches!((held, incoming), (Some(h), Some(i)) if h > i)
}

/// Marked for deletion with no finalizer left: no longer stored.
fn is_finally_deleted(obj: &Value) -> bool {
    let marked = obj.pointer("/metadata/deletionTimestamp").is_some();
    let finalizers = obj
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty());
    marked && !finalizers
}

/// One kind's objects.
#[derive(Default)]
struct Shelf {
    entries: RwLock<HashMap<Key, Entry>>,
}

impl Shelf {
    fn entries(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<Key, Entry>> {
        self.entries.write().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, key: &Key) -> Option<Arc<Value>> {
        match self
            .entries
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
        {
            Some(Entry::Live { object, .. }) => Some(object.clone()),
            _ => None,
        }
    }

    fn put(&self, obj: &Value) {
        let version = version_of(obj);
        let mut entries = self.entries();
        let key = key_of(obj);
        if entries
            .get(&key)
            .is_some_and(|held| newer(held.version(), version))
        {
            return;
        }
        entries.insert(
            key,
            Entry::Live {
                version,
                object: Arc::new(obj.clone()),
            },
        );
    }

    fn gone(&self, obj: &Value) {
        let version = version_of(obj);
        let mut entries = self.entries();
        let key = key_of(obj);
        if entries
            .get(&key)
            .is_some_and(|held| newer(held.version(), version))
        {
            return;
        }
        entries.insert(key, Entry::Gone { version });
    }

    fn forget(&self, key: &Key) {
        self.entries().remove(key);
    }

    /// A complete list at `list_version` of everything in `namespace`
    /// (all namespaces when `None`): an entry in that scope the list lacks
    /// was deleted, unless it is newer than the list.
    fn listed(&self, namespace: Option<&str>, items: &[Value], list_version: Option<u64>) {
        let present: std::collections::HashSet<Key> = items.iter().map(key_of).collect();
        for obj in items {
            self.put(obj);
        }
        let mut entries = self.entries();
        entries.retain(|key, entry| {
            let in_scope = namespace.is_none_or(|ns| key.0 == ns);
            !in_scope || present.contains(key) || newer(entry.version(), list_version)
        });
    }
}

/// The cache and the store behind it. Cheap to clone (all shared).
#[derive(Clone)]
pub struct CachingStore {
    inner: Arc<dyn Store>,
    shelves: Arc<HashMap<Kind, Shelf>>,
    /// The kinds a reflector was started for.
    reflecting: Arc<Mutex<Vec<Kind>>>,
    cancel: CancellationToken,
}

impl CachingStore {
    /// Cache [`CACHED_KINDS`] of `inner`; reflectors stop with `cancel`.
    pub fn new(inner: Arc<dyn Store>, cancel: CancellationToken) -> Self {
        CachingStore {
            inner,
            shelves: Arc::new(
                CACHED_KINDS
                    .iter()
                    .map(|k| (*k, Shelf::default()))
                    .collect(),
            ),
            reflecting: Arc::new(Mutex::new(Vec::new())),
            cancel,
        }
    }

    /// Start keeping `kind` current, once.
    fn reflect(&self, kind: Kind) {
        {
            let mut started = self.reflecting.lock().unwrap_or_else(|e| e.into_inner());
            if started.contains(&kind) {
                return;
            }
            started.push(kind);
        }
        let this = self.clone();
        tokio::spawn(async move {
            let cancel = this.cancel.clone();
            super::reflect::reflect(
                &this,
                kind,
                &ListOptions::default(),
                RELIST_DELAY,
                &cancel,
                |_| {},
            )
            .await;
        });
    }

    fn observe(&self, kind: Kind, ev: &WatchEvent) {
        if let Some(shelf) = self.shelves.get(&kind) {
            match ev {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => shelf.put(o),
                WatchEvent::Deleted(o) => shelf.gone(o),
            }
        }
    }

    fn written(&self, kind: Kind, result: &Result<Value, StoreError>) {
        let Some(shelf) = self.shelves.get(&kind) else {
            return;
        };
        match result {
            // The update that removed the last finalizer of an object
            // marked for deletion deleted it.
            Ok(obj) if is_finally_deleted(obj) => shelf.gone(obj),
            Ok(obj) => shelf.put(obj),
            Err(StoreError::Conflict {
                namespace, name, ..
            }) => shelf.forget(&(namespace.clone(), name.clone())),
            Err(_) => {}
        }
    }

    /// The cached copy, starting the kind's reflector on first use.
    fn cached(&self, kind: Kind, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let shelf = self.shelves.get(&kind)?;
        self.reflect(kind);
        let ns = if kind.namespaced() {
            if namespace.is_empty() {
                super::DEFAULT_NAMESPACE
            } else {
                namespace
            }
        } else {
            ""
        };
        shelf.get(&(ns.to_string(), name.to_string()))
    }
}

#[async_trait]
impl Store for CachingStore {
    async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Value, StoreError> {
        if let Some(v) = self.cached(kind, namespace, name) {
            return Ok(Value::clone(&v));
        }
        let v = self.inner.get(kind, namespace, name).await?;
        if let Some(shelf) = self.shelves.get(&kind) {
            shelf.put(&v);
        }
        Ok(v)
    }

    async fn get_json(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<u8>, StoreError> {
        if let Some(v) = self.cached(kind, namespace, name) {
            return serde_json::to_vec(&*v).map_err(|e| StoreError::Malformed(e.to_string()));
        }
        if !self.shelves.contains_key(&kind) {
            return self.inner.get_json(kind, namespace, name).await;
        }
        let v = self.get(kind, namespace, name).await?;
        serde_json::to_vec(&v).map_err(|e| StoreError::Malformed(e.to_string()))
    }

    async fn list(&self, kind: Kind, opts: &ListOptions) -> Result<ObjectList, StoreError> {
        let list = self.inner.list(kind, opts).await?;
        if let Some(shelf) = self.shelves.get(&kind) {
            if opts.selector.is_empty() {
                let version = list.resource_version.parse().ok();
                shelf.listed(opts.namespace.as_deref(), &list.items, version);
            } else {
                list.items.iter().for_each(|o| shelf.put(o));
            }
        }
        Ok(list)
    }

    async fn create(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        let r = self.inner.create(kind, obj).await;
        self.written(kind, &r);
        r
    }

    async fn update(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        let r = self.inner.update(kind, obj).await;
        self.written(kind, &r);
        r
    }

    async fn update_status(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        let r = self.inner.update_status(kind, obj).await;
        self.written(kind, &r);
        r
    }

    async fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<Deleted, StoreError> {
        let r = self.inner.delete(kind, namespace, name).await;
        if let Some(shelf) = self.shelves.get(&kind) {
            match &r {
                Ok(Deleted::Gone(o)) => shelf.gone(o),
                Ok(Deleted::Marked(o)) => shelf.put(o),
                Err(_) => {}
            }
        }
        r
    }

    async fn watch(
        &self,
        kind: Kind,
        opts: &ListOptions,
        from: Option<&str>,
    ) -> Result<WatchStream, StoreError> {
        let stream = self.inner.watch(kind, opts, from).await?;
        if !self.shelves.contains_key(&kind) {
            return Ok(stream);
        }
        let this = self.clone();
        Ok(Box::pin(stream.map(move |ev| {
            if let Ok(ev) = &ev {
                this.observe(kind, ev);
            }
            ev
        })))
    }
}

#[cfg(test)]
mod tests;
