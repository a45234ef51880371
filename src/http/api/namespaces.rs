//! Namespaces as real objects (core/v1, cluster-scoped, kept by the store
//! under namespace `""`), with kube-apiserver's rules where metalherd can
//! keep them and a stricter one where a server is at stake:
//!
//! - `default` exists from the first start of every data directory; a
//!   data directory from before namespaces were objects gets one for each
//!   namespace its objects are in ([`ensure`]);
//! - an object created in a namespace that does not exist is refused with
//!   kube-apiserver's 404 (`namespaces "lab" not found`) ([`require`]);
//! - `default` may not be deleted (403, as kube-apiserver answers);
//! - a namespace that still holds Machines or MachineSets is not deleted:
//!   the refusal (409) lists them, since deleting a Machine retires its
//!   server and a namespace delete must never do that as a side effect;
//! - otherwise its other objects (Secrets, Events, Leases, MachineClasses,
//!   DiscoveredMachines) are deleted with it at once, as kube-apiserver's
//!   namespace controller does later; one held by a finalizer keeps the
//!   namespace (409, naming it). There is no `Terminating` phase.
//!
//! Creating in a namespace and deleting it are serialised by a lock
//! ([`Gate`]), so no object is created in a namespace being deleted
//! through the API. The controllers write through the store and create
//! only beside objects that already exist (a MachineSet's Machines, an
//! object's Events), so they never start a namespace of their own.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::{Value, json};
use tokio::sync::{RwLock, RwLockReadGuard};

use super::handlers::ok_json;
use super::normalize::normalize;
use super::{ApiError, ApiState};
use crate::api::Kind;
use crate::store::{DEFAULT_NAMESPACE, Deleted, ListOptions, Store, StoreError};

/// Creates in a namespace (shared) against deleting one (exclusive).
#[derive(Clone, Debug, Default)]
pub struct Gate(Arc<RwLock<()>>);

/// How many names a refusal lists per kind before "and N more".
const LISTED: usize = 10;

/// The canonical Namespace object `name`.
pub fn object(name: &str) -> Result<Value, StoreError> {
    let v = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    normalize(Kind::Namespace, &v).map_err(StoreError::Invalid)
}

/// Create `default` and a Namespace for every namespace objects are in,
/// where missing. Returns the names created.
pub async fn ensure(store: &dyn Store) -> Result<Vec<String>, StoreError> {
    let mut wanted = BTreeSet::from([DEFAULT_NAMESPACE.to_string()]);
    for kind in Kind::ALL.into_iter().filter(|k| k.namespaced()) {
        for o in store.list(kind, &ListOptions::default()).await?.items {
            wanted.insert(crate::store::key_of(&o).0);
        }
    }
    let mut created = Vec::new();
    for name in wanted {
        match store.create(Kind::Namespace, object(&name)?).await {
            Ok(_) => created.push(name),
            Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(created)
}

/// Hold off namespace deletes while an object is created in `ns`, which
/// must exist. Keep the guard until the object is written.
pub async fn require<'a>(st: &'a ApiState, ns: &str) -> Result<RwLockReadGuard<'a, ()>, ApiError> {
    let guard = st.namespaces.0.read().await;
    st.store.get(Kind::Namespace, "", ns).await?;
    Ok(guard)
}

/// `n Kinds (a, b, ... and m more)`.
fn listing(kind: Kind, names: &[String]) -> String {
    let n = names.len();
    let plural = if n == 1 { "" } else { "s" };
    let shown: Vec<&str> = names.iter().take(LISTED).map(String::as_str).collect();
    let more = match n.saturating_sub(LISTED) {
        0 => String::new(),
        m => format!(", and {m} more"),
    };
    format!("{n} {kind}{plural} ({}{more})", shown.join(", "))
}

fn names(list: &[Value]) -> Vec<String> {
    list.iter().map(|o| crate::store::key_of(o).1).collect()
}

fn conflict(message: String, name: &str) -> ApiError {
    let mut e = ApiError::new(StatusCode::CONFLICT, "Conflict", message);
    e.details = Some(json!({"name": name, "group": "", "kind": "namespaces"}));
    e
}

/// DELETE `/api/v1/namespaces/{name}`, by the rules above.
pub async fn delete(st: &ApiState, name: &str) -> Result<axum::response::Response, ApiError> {
    if name == DEFAULT_NAMESPACE {
        let mut e = ApiError::new(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!("namespaces {name:?} is forbidden: this namespace may not be deleted"),
        );
        e.details = Some(json!({"name": name, "kind": "namespaces"}));
        return Err(e);
    }
    let _exclusive = st.namespaces.0.write().await;
    st.store.get(Kind::Namespace, "", name).await?;
    let in_ns = ListOptions::namespace(name);
    let mut servers = Vec::new();
    for kind in [Kind::Machine, Kind::MachineSet] {
        let found = names(&st.store.list(kind, &in_ns).await?.items);
        if !found.is_empty() {
            servers.push(listing(kind, &found));
        }
    }
    if !servers.is_empty() {
        return Err(conflict(
            format!(
                "namespace {name:?} still holds {}: deleting a namespace never retires servers, so it is refused; delete those first (deleting a Machine retires its server, deleting a MachineSet its Machines), then the namespace",
                servers.join(" and ")
            ),
            name,
        ));
    }
    let mut held = Vec::new();
    for kind in Kind::ALL
        .into_iter()
        .filter(|k| k.namespaced() && !matches!(k, Kind::Machine | Kind::MachineSet))
    {
        let mut stuck = Vec::new();
        for o in st.store.list(kind, &in_ns).await?.items {
            let (_, obj) = crate::store::key_of(&o);
            match st.store.delete(kind, name, &obj).await {
                Ok(Deleted::Gone(_)) => {}
                Ok(Deleted::Marked(_)) => stuck.push(obj),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        if !stuck.is_empty() {
            held.push(listing(kind, &stuck));
        }
    }
    if !held.is_empty() {
        return Err(conflict(
            format!(
                "namespace {name:?} is not deleted: {} wait for their finalizers; it can go once they are gone",
                held.join(" and ")
            ),
            name,
        ));
    }
    match st.store.delete(Kind::Namespace, "", name).await? {
        Deleted::Gone(v) => Ok(ok_json(StatusCode::OK, &v)),
        Deleted::Marked(v) => Ok(ok_json(StatusCode::ACCEPTED, &v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    #[test]
    fn listings_name_a_few_and_count_the_rest() {
        let n: Vec<String> = (0..12).map(|i| format!("m{i}")).collect();
        assert_eq!(listing(Kind::Machine, &n[..1]), "1 Machine (m0)");
        assert_eq!(listing(Kind::MachineSet, &n[..2]), "2 MachineSets (m0, m1)");
        assert!(listing(Kind::Machine, &n).ends_with("m9, and 2 more)"));
    }

    #[tokio::test]
    async fn ensure_creates_default_and_the_namespaces_objects_are_in() {
        let store = MemoryStore::new();
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "lab"}});
        store.create(Kind::Secret, secret).await.unwrap();
        assert_eq!(ensure(&store).await.unwrap(), ["default", "lab"]);
        assert!(ensure(&store).await.unwrap().is_empty(), "once");
        let ns = store.get(Kind::Namespace, "", "lab").await.unwrap();
        assert_eq!(ns["status"]["phase"], "Active");
        assert!(ns["metadata"].get("namespace").is_none(), "{ns}");
        let all = store
            .list(Kind::Namespace, &ListOptions::default())
            .await
            .unwrap();
        assert_eq!(all.items.len(), 2);
    }
}
