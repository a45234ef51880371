//! A server-side dry run (`?dryRun=All`): a store whose writes answer what
//! the store behind it would do, with the same refusals (invalid object,
//! name taken, stale resourceVersion, not found), and change nothing.
//! Reads, lists and watches pass through.
//!
//! The answer follows kube-apiserver's: a dry-run create carries a uid and
//! a creationTimestamp but no resourceVersion (none was given out); a
//! dry-run update or delete keeps the stored resourceVersion.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::semantics::{self, Change};
use super::{Deleted, ListOptions, ObjectList, Store, StoreError, WatchStream, key_of};
use crate::api::Kind;

/// The resourceVersion semantics would give the change; replaced below.
const UNUSED_VERSION: u64 = 0;

pub struct DryRunStore {
    inner: Arc<dyn Store>,
}

impl DryRunStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        DryRunStore { inner }
    }

    async fn current(&self, kind: Kind, ns: &str, name: &str) -> Result<Option<Value>, StoreError> {
        match self.inner.get(kind, ns, name).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What `change` would leave, at the stored resourceVersion.
    fn answer(change: Change, cur: Option<&Value>) -> Result<Value, StoreError> {
        let mut v = match change {
            Change::Unchanged(v) | Change::Put { object: v, .. } | Change::Remove { last: v } => v,
        };
        let meta = v
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| StoreError::Malformed("object has no metadata".into()))?;
        match cur.and_then(super::resource_version_of) {
            Some(rv) => meta.insert("resourceVersion".into(), rv.into()),
            None => meta.remove("resourceVersion"),
        };
        Ok(v)
    }
}

#[async_trait]
impl Store for DryRunStore {
    async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Value, StoreError> {
        self.inner.get(kind, namespace, name).await
    }

    async fn list(&self, kind: Kind, opts: &ListOptions) -> Result<ObjectList, StoreError> {
        self.inner.list(kind, opts).await
    }

    async fn create(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        let obj = semantics::prepare_input(kind, obj)?;
        let (ns, name) = key_of(&obj);
        let cur = self.current(kind, &ns, &name).await?;
        let change = semantics::create(kind, cur, obj, UNUSED_VERSION)?;
        Self::answer(change, None)
    }

    async fn update(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        let obj = semantics::prepare_input(kind, obj)?;
        let (ns, name) = key_of(&obj);
        let cur = self.current(kind, &ns, &name).await?;
        let change = semantics::update(kind, cur.clone(), obj, UNUSED_VERSION)?;
        Self::answer(change, cur.as_ref())
    }

    async fn update_status(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        let (ns, name) = key_of(&obj);
        let cur = self.current(kind, &ns, &name).await?;
        let change = semantics::update_status(kind, cur.clone(), obj, UNUSED_VERSION)?;
        Self::answer(change, cur.as_ref())
    }

    async fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<Deleted, StoreError> {
        let cur = self.current(kind, namespace, name).await?;
        let change = semantics::delete(kind, namespace, name, cur.clone(), UNUSED_VERSION)?;
        let gone = matches!(change, Change::Remove { .. });
        let v = Self::answer(change, cur.as_ref())?;
        Ok(if gone {
            Deleted::Gone(v)
        } else {
            Deleted::Marked(v)
        })
    }

    async fn watch(
        &self,
        kind: Kind,
        opts: &ListOptions,
        from: Option<&str>,
    ) -> Result<WatchStream, StoreError> {
        self.inner.watch(kind, opts, from).await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::memory::MemoryStore;

    fn machine(name: &str) -> Value {
        json!({
            "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
            "metadata": {"name": name, "labels": {"a": "1"}},
            "spec": {"bmc": {"address": "ipmi://10.0.0.5", "credentialsSecretRef": {"name": "bmc"}}}
        })
    }

    #[tokio::test]
    async fn writes_answer_as_the_store_would_and_change_nothing() {
        let inner: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let dry = DryRunStore::new(inner.clone());
        let before = inner
            .list(Kind::Machine, &ListOptions::default())
            .await
            .unwrap();

        let created = dry.create(Kind::Machine, machine("m1")).await.unwrap();
        assert!(created["metadata"]["uid"].is_string());
        assert!(created["metadata"].get("resourceVersion").is_none());
        assert!(inner.get(Kind::Machine, "default", "m1").await.is_err());

        let stored = inner.create(Kind::Machine, machine("m1")).await.unwrap();
        let e = dry.create(Kind::Machine, machine("m1")).await.unwrap_err();
        assert!(matches!(e, StoreError::AlreadyExists { .. }), "{e}");

        let mut changed = stored.clone();
        changed["metadata"]["labels"]["a"] = json!("2");
        let answer = dry.update(Kind::Machine, changed.clone()).await.unwrap();
        assert_eq!(answer["metadata"]["labels"]["a"], "2");
        assert_eq!(
            answer["metadata"]["resourceVersion"],
            stored["metadata"]["resourceVersion"]
        );
        let mut stale = changed.clone();
        stale["metadata"]["resourceVersion"] = json!("1");
        inner.update(Kind::Machine, changed).await.unwrap();
        assert!(
            dry.update(Kind::Machine, stale)
                .await
                .unwrap_err()
                .is_conflict()
        );

        let mut bad = machine("m2");
        bad["spec"]["bootMACAddress"] = json!("nope");
        assert!(matches!(
            dry.create(Kind::Machine, bad).await.unwrap_err(),
            StoreError::Invalid(_)
        ));

        assert!(matches!(
            dry.delete(Kind::Machine, "default", "m1").await.unwrap(),
            Deleted::Gone(_)
        ));
        assert!(
            dry.delete(Kind::Machine, "default", "nope")
                .await
                .unwrap_err()
                .is_not_found()
        );
        let after = inner.get(Kind::Machine, "default", "m1").await.unwrap();
        assert_eq!(after["metadata"]["labels"]["a"], "2", "still stored");
        let list = inner
            .list(Kind::Machine, &ListOptions::default())
            .await
            .unwrap();
        assert_eq!(list.items.len(), 1);
        assert_ne!(before.resource_version, list.resource_version);
    }
}
