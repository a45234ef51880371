//! What only the embedded backend promises (the shared suite in
//! `store/tests.rs` covers the rest). Group commit: concurrent writes share
//! transactions yet each caller sees its own result, versions stay
//! contiguous and in watch order, a refused write fails alone. The file:
//! dropping the store closes it, and a watch resumes across a reopen.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::StreamExt;
use serde_json::{Value, json};

use super::EmbeddedStore;
use crate::api::Kind;
use crate::store::*;

fn machine(name: &str) -> Value {
    json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": name},
        "spec": {"bmc": {"address": "ipmi://10.0.0.5", "credentialsSecretRef": {"name": "bmc"}}}
    })
}

fn rv(v: &Value) -> u64 {
    resource_version_of(v).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_each_commit_once_in_one_order() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(EmbeddedStore::open(&dir.path().join("s.redb")).unwrap());
    let mut watch = s
        .watch(Kind::Machine, &ListOptions::default(), Some("0"))
        .await
        .unwrap();
    let n = 200;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let s = s.clone();
        tasks.spawn(async move { s.create(Kind::Machine, machine(&format!("m{i:03}"))).await });
    }
    let mut rvs = BTreeSet::new();
    while let Some(r) = tasks.join_next().await {
        let v = r.unwrap().unwrap();
        assert!(rvs.insert(rv(&v)), "a version given twice");
    }
    assert_eq!(rvs.len(), n);
    assert_eq!(*rvs.first().unwrap(), 1);
    assert_eq!(*rvs.last().unwrap(), n as u64, "versions are contiguous");
    let mut seen = vec![];
    while seen.len() < n {
        let ev = watch.next().await.unwrap().unwrap();
        seen.push(ev.resource_version().unwrap().parse::<u64>().unwrap());
    }
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    assert_eq!(seen, sorted, "the watch sees changes in version order");
    let list = s
        .list(Kind::Machine, &ListOptions::default())
        .await
        .unwrap();
    assert_eq!(list.items.len(), n);
    assert_eq!(list.resource_version, n.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_write_fails_alone_among_concurrent_ones() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(EmbeddedStore::open(&dir.path().join("s.redb")).unwrap());
    let m = s.create(Kind::Machine, machine("m1")).await.unwrap();
    // Many writers race on one object from the same version: exactly one
    // wins, the rest are conflicts, and other objects are unaffected.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20 {
        let (s1, s2) = (s.clone(), s.clone());
        let mut o = m.clone();
        o["metadata"]["labels"] = json!({"try": i.to_string()});
        tasks.spawn(async move { s1.update(Kind::Machine, o).await });
        tasks.spawn(async move { s2.create(Kind::Machine, machine(&format!("o{i}"))).await });
    }
    let (mut ok, mut conflicts) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            Ok(_) => ok += 1,
            Err(e) if e.is_conflict() => conflicts += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!((ok, conflicts), (21, 19));
    let list = s
        .list(Kind::Machine, &ListOptions::default())
        .await
        .unwrap();
    assert_eq!(list.items.len(), 21);
    assert_eq!(
        list.resource_version, "22",
        "refused writes took no version"
    );
}

#[tokio::test]
async fn dropping_the_store_closes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let s = EmbeddedStore::open(&path).unwrap();
    s.create(Kind::Machine, machine("m1")).await.unwrap();
    drop(s);
    let again = EmbeddedStore::open(&path).unwrap();
    let m = again.get(Kind::Machine, "default", "m1").await.unwrap();
    assert_eq!(rv(&m), 1);
}

#[tokio::test]
async fn watch_reopens_after_restart_and_misses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let from = {
        let s = EmbeddedStore::open(&path).unwrap();
        let m = s.create(Kind::Machine, machine("m1")).await.unwrap();
        s.create(Kind::Machine, machine("m2")).await.unwrap();
        resource_version_of(&m).unwrap().to_string()
    };
    let s = EmbeddedStore::open(&path).unwrap();
    let mut w = s
        .watch(Kind::Machine, &ListOptions::default(), Some(&from))
        .await
        .unwrap();
    let ev = w.next().await.unwrap().unwrap();
    assert_eq!(ev.object()["metadata"]["name"], "m2");
    assert!(matches!(ev, WatchEvent::Added(_)));
}

#[tokio::test]
async fn a_short_history_answers_gone_past_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open_keeping(&dir.path().join("s.redb"), 3).unwrap();
    let first = s.create(Kind::Machine, machine("m0")).await.unwrap();
    let mut last = first.clone();
    for i in 1..10 {
        last = s
            .create(Kind::Machine, machine(&format!("m{i}")))
            .await
            .unwrap();
    }
    let from_first = rv(&first).to_string();
    let opts = ListOptions::default();
    match s.watch(Kind::Machine, &opts, Some(&from_first)).await {
        Err(StoreError::Gone { .. }) => {}
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a watch from {from_first} of 10 changes, 3 kept"),
    }
    // Recent enough: the changes after it, in order.
    let recent = (rv(&last) - 2).to_string();
    let mut w = s.watch(Kind::Machine, &opts, Some(&recent)).await.unwrap();
    for want in ["m8", "m9"] {
        let ev = w.next().await.unwrap().unwrap();
        assert_eq!(ev.object()["metadata"]["name"], want);
    }
}
