//! The embedded store: one crash-safe, transactional redb file in the data
//! directory. Every write updates the object and appends the change to a
//! log keyed by resourceVersion in one redb transaction (writes arriving
//! together share a transaction and its fsync: [`writer`]); watches
//! replay that log from the version they ask for and then follow live changes, so
//! a watcher that reconnects misses nothing and sees nothing twice.
//!
//! Object semantics (resourceVersion, generation, finalizers) live in
//! [`super::semantics`]; this module only moves them in and out of redb.
//! resourceVersions are the log's keys (a `u64` counter), shown to callers
//! as decimal strings.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use redb::{Database, ReadableDatabase};
use serde_json::Value;
use tokio::sync::broadcast;

pub mod snapshot;
mod tables;
mod writer;

use tables::{Inner, LOG, META, OBJECTS, backend, last_rv, read_log};

/// Changes kept for watch resumption unless told otherwise.
pub const DEFAULT_HISTORY: u64 = tables::LOG_KEEP;
use writer::Writer;

use super::semantics::{self, Change};
use super::{Deleted, ListOptions, ObjectList, Store, StoreError, WatchStream};
use crate::api::Kind;

/// redb's page cache (its default is 1 GiB, which a busy store fills with
/// log pages nobody reads again).
const CACHE_BYTES: usize = 64 << 20;

/// Parse a resourceVersion this backend gave out.
fn parse_rv(s: &str) -> Result<u64, StoreError> {
    s.parse()
        .map_err(|_| StoreError::BadResourceVersion(s.to_string()))
}

/// The default store of `metalherd serve`.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
    writer: Arc<Writer>,
}

fn obj_key(kind: Kind, ns: &str, name: &str) -> String {
    format!("{}\0{}\0{}", kind.as_str(), ns, name)
}

fn kind_prefix(kind: Kind, ns: Option<&str>) -> String {
    match ns {
        Some(ns) => format!("{}\0{}\0", kind.as_str(), ns),
        None => format!("{}\0", kind.as_str()),
    }
}

impl EmbeddedStore {
    /// Open (or create) the store file. Fails with a clear error when the
    /// file cannot be created or is locked by another process.
    pub fn open(path: &Path) -> Result<EmbeddedStore, StoreError> {
        EmbeddedStore::open_keeping(path, tables::LOG_KEEP)
    }

    /// [`EmbeddedStore::open`], keeping the last `keep` changes (at least
    /// one) for watches to resume from.
    pub fn open_keeping(path: &Path, keep: u64) -> Result<EmbeddedStore, StoreError> {
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(path)
            .map_err(|e| {
                StoreError::Backend(format!("cannot open store {}: {e}", path.display()))
            })?;
        // Make sure the tables exist so readers never see "no such table".
        let w = db.begin_write().map_err(backend)?;
        {
            w.open_table(OBJECTS).map_err(backend)?;
            w.open_table(LOG).map_err(backend)?;
            w.open_table(META).map_err(backend)?;
        }
        w.commit().map_err(backend)?;
        let (tx, _) = broadcast::channel(4096);
        let inner = Arc::new(Inner {
            db,
            tx,
            path: path.to_path_buf(),
            keep: keep.max(1),
        });
        let writer = Arc::new(Writer::spawn(inner.clone())?);
        Ok(EmbeddedStore { inner, writer })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Run a blocking closure on the blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| StoreError::Backend(format!("store task failed: {e}")))?
    }

    /// Apply one write: the writer reads the current object, lets
    /// `semantics` decide the change, commits it with its log record, then
    /// broadcasts it.
    async fn write(
        &self,
        kind: Kind,
        ns: String,
        name: String,
        decide: impl FnOnce(Option<Value>, u64) -> Result<Change, StoreError> + Send + 'static,
    ) -> Result<Value, StoreError> {
        let key = obj_key(kind, &ns, &name);
        self.writer.submit(kind, key, Box::new(decide)).await
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Value, StoreError> {
        let key = obj_key(kind, namespace, name);
        let (ns, nm) = (namespace.to_string(), name.to_string());
        self.blocking(move |inner| {
            let r = inner.db.begin_read().map_err(backend)?;
            let t = r.open_table(OBJECTS).map_err(backend)?;
            match t.get(key.as_str()).map_err(backend)? {
                Some(g) => serde_json::from_slice(g.value()).map_err(backend),
                None => Err(StoreError::NotFound {
                    kind,
                    namespace: ns,
                    name: nm,
                }),
            }
        })
        .await
    }

    async fn get_json(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<u8>, StoreError> {
        let key = obj_key(kind, namespace, name);
        let (ns, nm) = (namespace.to_string(), name.to_string());
        self.blocking(move |inner| {
            let r = inner.db.begin_read().map_err(backend)?;
            let t = r.open_table(OBJECTS).map_err(backend)?;
            match t.get(key.as_str()).map_err(backend)? {
                Some(g) => Ok(g.value().to_vec()),
                None => Err(StoreError::NotFound {
                    kind,
                    namespace: ns,
                    name: nm,
                }),
            }
        })
        .await
    }

    async fn list(&self, kind: Kind, opts: &ListOptions) -> Result<ObjectList, StoreError> {
        let opts = opts.clone();
        self.blocking(move |inner| {
            let r = inner.db.begin_read().map_err(backend)?;
            let t = r.open_table(OBJECTS).map_err(backend)?;
            let meta = r.open_table(META).map_err(backend)?;
            let rv = meta
                .get("rv")
                .map_err(backend)?
                .map(|g| g.value())
                .unwrap_or(0);
            let prefix = kind_prefix(kind, opts.namespace.as_deref());
            let mut items = Vec::new();
            for item in t.range(prefix.as_str()..).map_err(backend)? {
                let (k, v) = item.map_err(backend)?;
                if !k.value().starts_with(&prefix) {
                    break;
                }
                let obj: Value = serde_json::from_slice(v.value()).map_err(backend)?;
                if opts.selector.matches(&obj) {
                    items.push(obj);
                }
            }
            Ok(ObjectList {
                items,
                resource_version: rv.to_string(),
            })
        })
        .await
    }

    async fn create(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        let obj = semantics::prepare_input(kind, obj)?;
        let (ns, name) = super::key_of(&obj);
        self.write(kind, ns, name, move |cur, rv| {
            semantics::create(kind, cur, obj, rv)
        })
        .await
    }

    async fn update(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        let obj = semantics::prepare_input(kind, obj)?;
        let (ns, name) = super::key_of(&obj);
        self.write(kind, ns, name, move |cur, rv| {
            semantics::update(kind, cur, obj, rv)
        })
        .await
    }

    async fn update_status(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        let (ns, name) = super::key_of(&obj);
        self.write(kind, ns, name, move |cur, rv| {
            semantics::update_status(kind, cur, obj, rv)
        })
        .await
    }

    async fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<Deleted, StoreError> {
        let (ns, nm) = (namespace.to_string(), name.to_string());
        let marked = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let m2 = marked.clone();
        let v = self
            .write(kind, ns.clone(), nm.clone(), move |cur, rv| {
                let ch = semantics::delete(kind, &ns, &nm, cur, rv)?;
                if matches!(ch, Change::Put { .. } | Change::Unchanged(_)) {
                    m2.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(ch)
            })
            .await?;
        if marked.load(std::sync::atomic::Ordering::Relaxed) {
            Ok(Deleted::Marked(v))
        } else {
            Ok(Deleted::Gone(v))
        }
    }

    async fn watch(
        &self,
        kind: Kind,
        opts: &ListOptions,
        from: Option<&str>,
    ) -> Result<WatchStream, StoreError> {
        // Subscribe before reading the log so nothing falls between them.
        let live = self.inner.tx.subscribe();
        let from = match from {
            Some(f) => parse_rv(f)?,
            None => self.blocking(last_rv).await?,
        };
        // Check `from` now so a too-old version is an error of the call.
        let inner = self.inner.clone();
        let backlog = tokio::task::spawn_blocking(move || read_log(&inner, kind, from))
            .await
            .map_err(|e| StoreError::Backend(e.to_string()))??;
        let inner = self.inner.clone();
        Ok(super::replay::serve(
            opts.clone(),
            from,
            backlog,
            live,
            move |b| (b.kind == kind).then_some((b.rv, b.event)),
            move |seen| {
                let inner = inner.clone();
                async move {
                    tokio::task::spawn_blocking(move || read_log(&inner, kind, seen))
                        .await
                        .map_err(|e| StoreError::Backend(e.to_string()))?
                }
            },
        ))
    }
}

#[cfg(test)]
mod tests;
