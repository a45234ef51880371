//! The object store: a Kubernetes-shaped keeper of objects with optimistic
//! concurrency, generations, finalizers, label selectors and resumable
//! watches. Controllers, the API and the boot services talk only to the
//! [`Store`] trait; [`open`] picks the backend from a [`StoreConfig`].
//!
//! Backends today: [`embedded`] (one redb file in the data directory, what
//! `metalherd serve` uses by default), [`kubernetes`] (resources on a
//! Kubernetes API server, `serve --store kubernetes`) and [`memory`]
//! (in-process, the test double; with [`memory::Faults`] to script
//! failures). The first and last take their object semantics from
//! [`semantics`]; the Kubernetes backend gets them from the API server.
//! All three pass one shared test suite (`tests.rs`; the Kubernetes run is
//! in tests/store_kubernetes.rs). Helpers built only on the trait: [`modify`]
//! (read, change, write, retry on conflict), [`reflect`] (list, watch,
//! relist), [`typed`] and [`events`].
//!
//! Objects travel as `serde_json::Value` so one trait (object-safe, usable as
//! `Arc<dyn Store>`) serves every kind. `resourceVersion` is an opaque string
//! to callers, as in Kubernetes: only the backend that issued it compares or
//! parses it.

pub mod cache;
pub mod dry_run;
pub mod embedded;
pub mod events;
pub mod kubernetes;
pub mod memory;
pub mod modify;
pub mod pinned;
pub mod reflect;
pub mod replay;
pub mod selector;
pub mod semantics;
pub mod typed;

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Stream;
use serde_json::Value;

use crate::api::{Kind, ValidationErrors};
pub use selector::Selector;
pub use typed::{Object, TypedStore};

/// The `store:` section of the config file.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoreSettings {
    /// How many changes the store keeps for watches to resume from
    /// (default [`embedded::DEFAULT_HISTORY`]); a client that resumes from
    /// further back gets `410 Gone` and lists again.
    #[serde(default)]
    pub watch_history: Option<u64>,
}

/// A `store:` section that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreSettingsError {
    #[error("store.watchHistory must be at least 1")]
    NoWatchHistory,
}

impl StoreSettings {
    /// The history to keep, checked.
    pub fn history(&self) -> Result<u64, StoreSettingsError> {
        match self.watch_history {
            None => Ok(embedded::DEFAULT_HISTORY),
            Some(0) => Err(StoreSettingsError::NoWatchHistory),
            Some(n) => Ok(n),
        }
    }
}

/// Namespace used when a manifest names none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// What can go wrong in a store call. Messages name the object, never its
/// contents (Secrets pass through here).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("{kind} {namespace}/{name} not found")]
    NotFound {
        kind: Kind,
        namespace: String,
        name: String,
    },
    #[error("{kind} {namespace}/{name} already exists")]
    AlreadyExists {
        kind: Kind,
        namespace: String,
        name: String,
    },
    #[error(
        "{kind} {namespace}/{name} was modified (resourceVersion {expected} is stale, current is {current}); read it again and retry"
    )]
    Conflict {
        kind: Kind,
        namespace: String,
        name: String,
        expected: String,
        current: String,
    },
    #[error("{0}")]
    Invalid(#[from] ValidationErrors),
    #[error(
        "resourceVersion {requested} is too old (oldest kept is {oldest}); list again and watch from the list's resourceVersion"
    )]
    Gone { requested: String, oldest: String },
    #[error("resourceVersion {0:?} is not one this store gives out")]
    BadResourceVersion(String),
    #[error("malformed object: {0}")]
    Malformed(String),
    /// The API server's RBAC refused a call (Kubernetes backend).
    #[error(
        "forbidden: cannot {verb} {resource}: {message} (grant the verb on the resource to metalherd's ServiceAccount)"
    )]
    Forbidden {
        verb: &'static str,
        resource: String,
        message: String,
    },
    #[error("store backend: {0}")]
    Backend(String),
}

impl StoreError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::NotFound { .. })
    }
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }
}

/// Options of a list or watch.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// Only this namespace; all namespaces when `None`.
    pub namespace: Option<String>,
    pub selector: Selector,
}

impl ListOptions {
    pub fn namespace(ns: &str) -> Self {
        ListOptions {
            namespace: Some(ns.to_string()),
            selector: Selector::default(),
        }
    }
}

/// The result of a list: the items and the resourceVersion to watch from so
/// nothing after the list is missed.
#[derive(Clone, Debug, Default)]
pub struct ObjectList {
    pub items: Vec<Value>,
    /// Opaque: pass it back to [`Store::watch`], never compare it.
    pub resource_version: String,
}

/// One change seen by a watch.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent {
    Added(Value),
    Modified(Value),
    Deleted(Value),
}

impl WatchEvent {
    pub fn object(&self) -> &Value {
        match self {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => o,
        }
    }
    /// Kubernetes watch event type: `ADDED`, `MODIFIED`, `DELETED`.
    pub fn type_str(&self) -> &'static str {
        match self {
            WatchEvent::Added(_) => "ADDED",
            WatchEvent::Modified(_) => "MODIFIED",
            WatchEvent::Deleted(_) => "DELETED",
        }
    }
    /// The resourceVersion the change produced (opaque).
    pub fn resource_version(&self) -> Option<&str> {
        resource_version_of(self.object())
    }
}

pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, StoreError>> + Send>>;

/// What a delete did.
#[derive(Clone, Debug, PartialEq)]
pub enum Deleted {
    /// The object is gone; here is its last state.
    Gone(Value),
    /// The object has finalizers: it is marked with a deletionTimestamp and
    /// goes when the last finalizer is removed.
    Marked(Value),
}

/// A Kubernetes-shaped object store.
///
/// Semantics every backend keeps:
/// - `create` sets uid, resourceVersion, generation 1 (the metalherd kinds
///   only, as kube-apiserver), creationTimestamp, the default namespace; a
///   name that exists is `AlreadyExists`.
/// - `update` replaces metadata and spec; status is kept from the stored
///   object for kinds with a status subresource. A `metadata.resourceVersion`
///   that is not current is a `Conflict` (absent means unconditional).
///   `generation` moves only when the spec changes. When the object is
///   marked for deletion and its last finalizer is removed, it is deleted.
/// - `update_status` changes only status and `metadata.managedFields` (when
///   given; same conflict rule).
/// - `delete` removes, or only marks when finalizers remain.
/// - `watch` from a resourceVersion yields every change after it, in order,
///   none twice; from `None` it starts at the current version. A version
///   older than the backend keeps is `Gone`; one it never gave out is
///   `BadResourceVersion`.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Value, StoreError>;
    /// The object's JSON bytes as stored, for typed readers that decode
    /// straight into their type (skipping the `Value` in between).
    async fn get_json(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<u8>, StoreError> {
        let v = self.get(kind, namespace, name).await?;
        serde_json::to_vec(&v).map_err(|e| StoreError::Malformed(e.to_string()))
    }
    async fn list(&self, kind: Kind, opts: &ListOptions) -> Result<ObjectList, StoreError>;
    async fn create(&self, kind: Kind, obj: Value) -> Result<Value, StoreError>;
    async fn update(&self, kind: Kind, obj: Value) -> Result<Value, StoreError>;
    async fn update_status(&self, kind: Kind, obj: Value) -> Result<Value, StoreError>;
    async fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<Deleted, StoreError>;
    async fn watch(
        &self,
        kind: Kind,
        opts: &ListOptions,
        from: Option<&str>,
    ) -> Result<WatchStream, StoreError>;
}

/// Which backend to open, and where.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum StoreConfig {
    /// One redb file (created when missing), keeping the last `history`
    /// changes for watches to resume from.
    Embedded { path: PathBuf, history: u64 },
    /// In-process only; everything is lost when the process ends.
    Memory,
    /// Resources on a Kubernetes API server; nothing kept in this process.
    Kubernetes {
        /// Kubeconfig file (its current context); the Pod's in-cluster
        /// configuration when `None`.
        kubeconfig: Option<PathBuf>,
        /// Lists and watches across all namespaces read only this one
        /// when set.
        namespace: Option<String>,
    },
}

/// Open the configured backend.
pub async fn open(config: &StoreConfig) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match config {
        StoreConfig::Embedded { path, history } => {
            Arc::new(embedded::EmbeddedStore::open_keeping(path, *history)?)
        }
        StoreConfig::Memory => Arc::new(memory::MemoryStore::new()),
        StoreConfig::Kubernetes {
            kubeconfig,
            namespace,
        } => Arc::new(
            kubernetes::KubernetesStore::connect(kubeconfig.as_deref(), namespace.clone()).await?,
        ),
    })
}

/// `metadata.resourceVersion`, when present (opaque).
pub fn resource_version_of(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// `(namespace, name)` of an object, with the default namespace filled in;
/// `""` for the cluster-scoped kinds (Namespaces), told by the `kind` field.
pub fn key_of(obj: &Value) -> (String, String) {
    let cluster_scoped = obj
        .get("kind")
        .and_then(Value::as_str)
        .and_then(Kind::from_kind_field)
        .is_some_and(|k| !k.namespaced());
    let ns = if cluster_scoped {
        String::new()
    } else {
        obj.pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or(DEFAULT_NAMESPACE)
            .to_string()
    };
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    (ns, name)
}

#[cfg(test)]
mod tests;
