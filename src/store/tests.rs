//! Store semantics, exercised on the embedded backend.

use futures::StreamExt;
use serde_json::{Value, json};

use super::embedded::EmbeddedStore;
use super::*;

fn open() -> (tempfile::TempDir, EmbeddedStore) {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(&dir.path().join("store.redb")).unwrap();
    (dir, s)
}

fn machine(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "labels": labels},
        "spec": {"bmc": {"address": "ipmi://10.0.0.5", "credentialsSecretRef": {"name": "bmc"}}}
    })
}

fn rv(v: &Value) -> String {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn create_sets_metadata_and_rejects_duplicates() {
    let (_d, s) = open();
    let m = s
        .create(Kind::Machine, machine("m1", json!({})))
        .await
        .unwrap();
    assert_eq!(m["metadata"]["namespace"], "default");
    assert_eq!(m["metadata"]["generation"], 1);
    assert!(m["metadata"]["uid"].as_str().unwrap().len() > 10);
    assert!(
        m["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    let e = s
        .create(Kind::Machine, machine("m1", json!({})))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::AlreadyExists { .. }), "{e}");
}

#[tokio::test]
async fn stale_resource_version_is_a_conflict() {
    let (_d, s) = open();
    let m = s
        .create(Kind::Machine, machine("m1", json!({})))
        .await
        .unwrap();
    let mut a = m.clone();
    a["spec"]["online"] = json!(true);
    let a2 = s.update(Kind::Machine, a).await.unwrap();
    assert_ne!(rv(&a2), rv(&m));
    // A writer still holding the first version loses.
    let mut b = m.clone();
    b["spec"]["online"] = json!(false);
    b["metadata"]["labels"] = json!({"x": "y"});
    let e = s.update(Kind::Machine, b).await.unwrap_err();
    assert!(e.is_conflict(), "{e}");
    let got = s.get(Kind::Machine, "default", "m1").await.unwrap();
    assert_eq!(got, a2);
    // Same for status.
    let mut st = m.clone();
    st["status"] = json!({"phase": "Available"});
    assert!(
        s.update_status(Kind::Machine, st)
            .await
            .unwrap_err()
            .is_conflict()
    );
}

#[tokio::test]
async fn generation_moves_only_on_spec_changes() {
    let (_d, s) = open();
    let m = s
        .create(Kind::Machine, machine("m1", json!({})))
        .await
        .unwrap();
    let mut l = m.clone();
    l["metadata"]["labels"] = json!({"rack": "r1"});
    let l = s.update(Kind::Machine, l).await.unwrap();
    assert_eq!(l["metadata"]["generation"], 1);
    let mut st = l.clone();
    st["status"] = json!({"phase": "Available"});
    let st = s.update_status(Kind::Machine, st).await.unwrap();
    assert_eq!(st["metadata"]["generation"], 1);
    assert_eq!(st["status"]["phase"], "Available");
    let mut sp = st.clone();
    sp["spec"]["online"] = json!(true);
    let sp = s.update(Kind::Machine, sp).await.unwrap();
    assert_eq!(sp["metadata"]["generation"], 2);
    // Spec updates keep status; status sent with a spec update is ignored.
    assert_eq!(sp["status"]["phase"], "Available");
    let mut ig = sp.clone();
    ig["status"] = json!({"phase": "Ready"});
    let ig = s.update(Kind::Machine, ig).await.unwrap();
    assert_eq!(ig["status"]["phase"], "Available");
    assert_eq!(
        rv(&ig),
        rv(&sp),
        "a no-op update does not bump resourceVersion"
    );
}

#[tokio::test]
async fn finalizers_delay_deletion_until_removed() {
    let (_d, s) = open();
    let mut m = machine("m1", json!({}));
    m["metadata"]["finalizers"] = json!(["metalherd.dev/machine"]);
    s.create(Kind::Machine, m).await.unwrap();
    let d = s.delete(Kind::Machine, "default", "m1").await.unwrap();
    let Deleted::Marked(marked) = d else {
        panic!("expected marked, got {d:?}")
    };
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    // Still there, still marked; a second delete changes nothing.
    let again = s.delete(Kind::Machine, "default", "m1").await.unwrap();
    assert!(matches!(again, Deleted::Marked(_)));
    let mut cur = s.get(Kind::Machine, "default", "m1").await.unwrap();
    assert_eq!(
        cur["metadata"]["deletionTimestamp"],
        marked["metadata"]["deletionTimestamp"]
    );
    // Removing the last finalizer deletes it.
    cur["metadata"]["finalizers"] = json!([]);
    s.update(Kind::Machine, cur).await.unwrap();
    assert!(
        s.get(Kind::Machine, "default", "m1")
            .await
            .unwrap_err()
            .is_not_found()
    );
    // Without finalizers, delete is immediate.
    s.create(Kind::Machine, machine("m2", json!({})))
        .await
        .unwrap();
    assert!(matches!(
        s.delete(Kind::Machine, "default", "m2").await.unwrap(),
        Deleted::Gone(_)
    ));
    assert!(
        s.delete(Kind::Machine, "default", "m2")
            .await
            .unwrap_err()
            .is_not_found()
    );
}

#[tokio::test]
async fn list_filters_by_namespace_and_labels() {
    let (_d, s) = open();
    s.create(Kind::Machine, machine("a", json!({"rack": "r1"})))
        .await
        .unwrap();
    s.create(Kind::Machine, machine("b", json!({"rack": "r2"})))
        .await
        .unwrap();
    let mut c = machine("c", json!({"rack": "r1"}));
    c["metadata"]["namespace"] = json!("lab");
    s.create(Kind::Machine, c).await.unwrap();
    let all = s
        .list(Kind::Machine, &ListOptions::default())
        .await
        .unwrap();
    assert_eq!(all.items.len(), 3);
    let r1 = s
        .list(
            Kind::Machine,
            &ListOptions {
                namespace: None,
                selector: Selector::parse("rack=r1").unwrap(),
            },
        )
        .await
        .unwrap();
    assert_eq!(r1.items.len(), 2);
    let def = s
        .list(Kind::Machine, &ListOptions::namespace("default"))
        .await
        .unwrap();
    assert_eq!(def.items.len(), 2);
    // Kinds do not leak into each other.
    assert!(
        s.list(Kind::MachineSet, &ListOptions::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn invalid_objects_are_refused_and_change_nothing() {
    let (_d, s) = open();
    let mut bad = machine("m1", json!({}));
    bad["spec"]["bootMACAddress"] = json!("nope");
    let e = s.create(Kind::Machine, bad).await.unwrap_err();
    assert!(
        e.to_string()
            .starts_with("spec.bootMACAddress: malformed MAC"),
        "{e}"
    );
    let l = s
        .list(Kind::Machine, &ListOptions::default())
        .await
        .unwrap();
    assert!(l.items.is_empty());
    assert_eq!(l.resource_version, 0);
}

#[tokio::test]
async fn secret_string_data_is_stored_as_base64_data() {
    let (_d, s) = open();
    let sec = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bmc"},
                     "stringData": {"username": "admin", "password": "pw"}});
    let v = s.create(Kind::Secret, sec).await.unwrap();
    assert_eq!(v["data"]["username"], "YWRtaW4=");
    assert!(v.get("stringData").is_none());
}

#[tokio::test]
async fn watch_resumed_from_a_version_sees_every_later_change_once() {
    let (_d, s) = open();
    let m = s
        .create(Kind::Machine, machine("m1", json!({})))
        .await
        .unwrap();
    let from: u64 = rv(&m).parse().unwrap();
    // Changes after `from`, some before the watch starts, some after.
    let mut cur = m.clone();
    for i in 0..5 {
        cur["metadata"]["labels"] = json!({"i": i.to_string()});
        cur = s.update(Kind::Machine, cur).await.unwrap();
    }
    s.create(Kind::MachineSet, json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": "w"}, "spec": {"replicas": 1, "selector": {}, "template": {"classRef": {"name": "c"}}}}))
        .await
        .unwrap();
    let mut w = s
        .watch(Kind::Machine, &ListOptions::default(), Some(from))
        .await
        .unwrap();
    let writer = {
        let s = s.clone();
        let mut cur = cur.clone();
        tokio::spawn(async move {
            for i in 5..10 {
                cur["metadata"]["labels"] = json!({"i": i.to_string()});
                cur = s.update(Kind::Machine, cur).await.unwrap();
            }
            s.delete(Kind::Machine, "default", "m1").await.unwrap();
        })
    };
    let mut seen = Vec::new();
    while seen.len() < 11 {
        let ev = tokio::time::timeout(std::time::Duration::from_secs(10), w.next())
            .await
            .expect("watch stalled")
            .unwrap()
            .unwrap();
        seen.push(ev);
    }
    writer.await.unwrap();
    let rvs: Vec<u64> = seen.iter().map(|e| e.resource_version()).collect();
    let mut sorted = rvs.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(rvs, sorted, "in order, none twice");
    assert!(rvs.iter().all(|r| *r > from));
    let labels: Vec<String> = seen[..10]
        .iter()
        .map(|e| {
            e.object()["metadata"]["labels"]["i"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(labels, (0..10).map(|i| i.to_string()).collect::<Vec<_>>());
    assert!(matches!(seen[10], WatchEvent::Deleted(_)));
    // Nothing more arrives.
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(200), w.next())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn watch_reopens_after_restart_and_misses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let from = {
        let s = EmbeddedStore::open(&path).unwrap();
        let m = s
            .create(Kind::Machine, machine("m1", json!({})))
            .await
            .unwrap();
        let from: u64 = rv(&m).parse().unwrap();
        s.create(Kind::Machine, machine("m2", json!({})))
            .await
            .unwrap();
        from
    };
    let s = EmbeddedStore::open(&path).unwrap();
    let mut w = s
        .watch(Kind::Machine, &ListOptions::default(), Some(from))
        .await
        .unwrap();
    let ev = w.next().await.unwrap().unwrap();
    assert_eq!(ev.object()["metadata"]["name"], "m2");
    assert!(matches!(ev, WatchEvent::Added(_)));
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod writer_tests;
