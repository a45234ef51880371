//! The read cache: what it serves without asking, what it never gets
//! wrong (older versions, deletions, conflicts). The shared store suite
//! runs against it in `tests.rs` and, over kube-apiserver, in
//! tests/store_kubernetes.rs.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use super::*;
use crate::store::memory::MemoryStore;

/// The store behind the cache, counting the reads by name it is asked.
struct Counting {
    inner: MemoryStore,
    gets: AtomicUsize,
}

#[async_trait]
impl Store for Counting {
    async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Value, StoreError> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        self.inner.get(kind, namespace, name).await
    }
    async fn list(&self, kind: Kind, opts: &ListOptions) -> Result<ObjectList, StoreError> {
        self.inner.list(kind, opts).await
    }
    async fn create(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        self.inner.create(kind, obj).await
    }
    async fn update(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        self.inner.update(kind, obj).await
    }
    async fn update_status(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        self.inner.update_status(kind, obj).await
    }
    async fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<Deleted, StoreError> {
        self.inner.delete(kind, namespace, name).await
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

fn machine(name: &str) -> Value {
    json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "labels": {}},
        "spec": {"bmc": {"address": "ipmi://10.0.0.5", "credentialsSecretRef": {"name": "bmc"}}}
    })
}

fn setup() -> (Arc<Counting>, CachingStore, CancellationToken) {
    let inner = Arc::new(Counting {
        inner: MemoryStore::new(),
        gets: AtomicUsize::new(0),
    });
    let cancel = CancellationToken::new();
    let cached = CachingStore::new(inner.clone(), cancel.clone());
    (inner, cached, cancel)
}

/// Ask until `check` holds (the reflector runs on its own task).
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    for _ in 0..200 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never: {what}");
}

fn label(v: &Value) -> Option<&str> {
    v.pointer("/metadata/labels/step").and_then(Value::as_str)
}

#[tokio::test]
async fn reads_its_own_writes_and_another_clients_through_the_watch_without_asking() {
    let (inner, cached, cancel) = setup();
    let created = cached.create(Kind::Machine, machine("m1")).await.unwrap();
    // The first read starts the reflector; the object came from the write.
    let got = cached.get(Kind::Machine, "default", "m1").await.unwrap();
    assert_eq!(got, created);
    assert_eq!(inner.gets.load(Ordering::SeqCst), 0);

    // Another client changes it: the watch brings the change.
    let mut other = created.clone();
    other["metadata"]["labels"]["step"] = json!("two");
    inner.inner.update(Kind::Machine, other).await.unwrap();
    eventually("the watch's copy", async || {
        let v = cached.get(Kind::Machine, "", "m1").await.unwrap();
        label(&v) == Some("two")
    })
    .await;
    assert_eq!(inner.gets.load(Ordering::SeqCst), 0, "served from memory");
    // And its deletion: a deleted object is read from the store.
    inner
        .inner
        .delete(Kind::Machine, "default", "m1")
        .await
        .unwrap();
    eventually("the deletion", async || {
        cached
            .get(Kind::Machine, "default", "m1")
            .await
            .is_err_and(|e| e.is_not_found())
    })
    .await;
    assert!(inner.gets.load(Ordering::SeqCst) >= 1);
    cancel.cancel();
}

#[tokio::test]
async fn a_conflict_drops_the_copy_so_the_retry_reads_the_store() {
    let (inner, cached, cancel) = setup();
    let created = cached.create(Kind::Machine, machine("m1")).await.unwrap();
    // Another client's change the cache has not seen (no reflector yet:
    // nothing read it).
    let mut other = created.clone();
    other["metadata"]["labels"]["step"] = json!("theirs");
    inner.inner.update(Kind::Machine, other).await.unwrap();

    let mut mine = created.clone();
    mine["metadata"]["labels"]["step"] = json!("mine");
    let e = cached.update(Kind::Machine, mine).await.unwrap_err();
    assert!(e.is_conflict(), "{e}");
    let before = inner.gets.load(Ordering::SeqCst);
    let fresh = cached.get(Kind::Machine, "default", "m1").await.unwrap();
    assert_eq!(label(&fresh), Some("theirs"));
    assert_eq!(inner.gets.load(Ordering::SeqCst), before + 1);
    cancel.cancel();
}

#[test]
fn an_older_version_never_replaces_a_newer_one_nor_revives_a_deleted_one() {
    let shelf = Shelf::default();
    let at = |rv: &str, step: &str| {
        let mut m = machine("m1");
        m["metadata"]["resourceVersion"] = json!(rv);
        m["metadata"]["labels"]["step"] = json!(step);
        m
    };
    let key = ("default".to_string(), "m1".to_string());
    shelf.put(&at("7", "new"));
    shelf.put(&at("5", "old"));
    assert_eq!(label(&shelf.get(&key).unwrap()), Some("new"));
    shelf.gone(&at("8", "new"));
    shelf.put(&at("7", "new"));
    assert!(shelf.get(&key).is_none(), "an event before the deletion");
    shelf.put(&at("9", "again"));
    assert_eq!(label(&shelf.get(&key).unwrap()), Some("again"));
}

#[test]
fn a_complete_list_drops_what_it_lacks_unless_newer_than_the_list() {
    let shelf = Shelf::default();
    let at = |name: &str, ns: &str, rv: &str| {
        let mut m = machine(name);
        m["metadata"]["namespace"] = json!(ns);
        m["metadata"]["resourceVersion"] = json!(rv);
        m
    };
    shelf.put(&at("gone", "a", "3"));
    shelf.put(&at("later", "a", "12"));
    shelf.put(&at("elsewhere", "b", "4"));
    shelf.listed(Some("a"), &[at("kept", "a", "6")], Some(10));
    let has = |ns: &str, n: &str| shelf.get(&(ns.to_string(), n.to_string())).is_some();
    assert!(!has("a", "gone"));
    assert!(has("a", "later"), "written after the list was taken");
    assert!(has("a", "kept"));
    assert!(has("b", "elsewhere"), "outside the list's namespace");
}

#[tokio::test]
async fn kinds_it_does_not_cache_are_read_from_the_store() {
    let (inner, cached, cancel) = setup();
    let ev = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "e1"}, "involvedObject": {"kind": "Machine", "name": "m1"},
        "reason": "R", "message": "m", "type": "Normal"});
    cached.create(Kind::Event, ev).await.unwrap();
    cached.get(Kind::Event, "default", "e1").await.unwrap();
    cached.get(Kind::Event, "default", "e1").await.unwrap();
    assert_eq!(inner.gets.load(Ordering::SeqCst), 2);
    cancel.cancel();
}
