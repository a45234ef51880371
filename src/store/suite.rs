//! The store's test suite, written once against `Arc<dyn Store>` and run
//! for every backend by [`all_tests!`]: one `#[tokio::test]` per suite
//! function, each on a fresh store. A new backend adds one `all_tests!`
//! line.
//!
//! This file is included twice with `#[path]`: by `src/store/tests.rs` for
//! the in-process backends, and by tests/store_kubernetes.rs for the
//! Kubernetes backend, whose stand-in API server is the `metalherd` binary
//! (only integration tests get its path). So it names nothing by crate
//! path: the including module imports the store's names (`Store`,
//! `StoreError`, `ListOptions`, `Selector`, `Deleted`, `WatchEvent`,
//! `Kind`) and this file takes them with `use super::*`.
//!
//! Only what a Kubernetes API server promises too belongs here; what only
//! the in-process backends promise (a list's version unchanged by a
//! refused write, a shortened change log) is tested in `tests.rs`.

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use serde_json::{Value, json};

#[allow(unused_imports)]
use super::*;

/// A fresh store, and whatever must live as long as it (a temp dir, a
/// stand-in API server).
pub type Opened = (Box<dyn std::any::Any>, Arc<dyn Store>);

/// One `#[tokio::test]` per suite function, run against the store that
/// the async fn `$open` returns.
macro_rules! store_suite {
    ($open:expr; $($test:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $test() {
                let (_keep, s): super::suite::Opened = $open().await;
                super::suite::$test(s).await;
            }
        )*
    };
}

/// The whole suite against the store `$open` returns.
macro_rules! all_tests {
    ($open:expr) => {
        store_suite!($open;
            create_sets_metadata_and_rejects_duplicates,
            stale_resource_version_is_a_conflict,
            generation_moves_only_on_spec_changes,
            finalizers_delay_deletion_until_removed,
            list_filters_by_namespace_and_labels,
            invalid_objects_are_refused_and_change_nothing,
            secret_string_data_is_stored_as_base64_data,
            watch_resumed_from_a_version_sees_every_later_change_once,
            watch_filters_by_namespace_and_labels,
            a_version_the_store_never_gave_is_refused,
            cluster_scoped_objects_have_no_namespace,
        );
    };
}

pub fn machine(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "labels": labels},
        "spec": {"bmc": {"address": "ipmi://10.0.0.5", "credentialsSecretRef": {"name": "bmc"}}}
    })
}

pub fn rv(v: &Value) -> String {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

pub async fn create_sets_metadata_and_rejects_duplicates(s: Arc<dyn Store>) {
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

pub async fn stale_resource_version_is_a_conflict(s: Arc<dyn Store>) {
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

pub async fn generation_moves_only_on_spec_changes(s: Arc<dyn Store>) {
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

pub async fn finalizers_delay_deletion_until_removed(s: Arc<dyn Store>) {
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

pub async fn list_filters_by_namespace_and_labels(s: Arc<dyn Store>) {
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

pub async fn invalid_objects_are_refused_and_change_nothing(s: Arc<dyn Store>) {
    let mut bad = machine("m1", json!({}));
    bad["spec"]["bootMACAddress"] = json!("nope");
    let e = s.create(Kind::Machine, bad).await.unwrap_err();
    // Refused on its field; the words are the refuser's (metalherd's
    // "malformed MAC", a kube-apiserver's schema pattern without the
    // webhook).
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    assert!(e.to_string().starts_with("spec.bootMACAddress: "), "{e}");
    let l = s
        .list(Kind::Machine, &ListOptions::default())
        .await
        .unwrap();
    assert!(l.items.is_empty());
}

pub async fn secret_string_data_is_stored_as_base64_data(s: Arc<dyn Store>) {
    let sec = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bmc"},
                     "stringData": {"username": "admin", "password": "pw"}});
    let v = s.create(Kind::Secret, sec).await.unwrap();
    assert_eq!(v["data"]["username"], "YWRtaW4=");
    assert!(v.get("stringData").is_none());
    // Defaulted as kube-apiserver does; no generation on a built-in kind.
    assert_eq!(v["type"], "Opaque");
    assert!(v["metadata"].get("generation").is_none(), "{v}");
}

pub async fn watch_resumed_from_a_version_sees_every_later_change_once(s: Arc<dyn Store>) {
    let m = s
        .create(Kind::Machine, machine("m1", json!({})))
        .await
        .unwrap();
    let from = rv(&m);
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
        .watch(Kind::Machine, &ListOptions::default(), Some(&from))
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
    // Versions are opaque: each change has its own, none is `from`; the
    // labels below show the order.
    let rvs: HashSet<&str> = seen.iter().filter_map(|e| e.resource_version()).collect();
    assert_eq!(rvs.len(), seen.len(), "none twice");
    assert!(!rvs.contains(from.as_str()));
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

pub async fn watch_filters_by_namespace_and_labels(s: Arc<dyn Store>) {
    let opts = ListOptions {
        namespace: Some("lab".into()),
        selector: Selector::parse("rack=r1").unwrap(),
    };
    let mut w = s.watch(Kind::Machine, &opts, None).await.unwrap();
    s.create(Kind::Machine, machine("a", json!({"rack": "r1"})))
        .await
        .unwrap();
    let mut b = machine("b", json!({"rack": "r2"}));
    b["metadata"]["namespace"] = json!("lab");
    s.create(Kind::Machine, b).await.unwrap();
    let mut c = machine("c", json!({"rack": "r1"}));
    c["metadata"]["namespace"] = json!("lab");
    s.create(Kind::Machine, c).await.unwrap();
    let ev = tokio::time::timeout(std::time::Duration::from_secs(10), w.next())
        .await
        .expect("watch stalled")
        .unwrap()
        .unwrap();
    assert_eq!(ev.object()["metadata"]["name"], "c");
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(200), w.next())
            .await
            .is_err()
    );
}

pub async fn a_version_the_store_never_gave_is_refused(s: Arc<dyn Store>) {
    let e = s
        .watch(
            Kind::Machine,
            &ListOptions::default(),
            Some("not-a-version"),
        )
        .await
        .err()
        .expect("refused");
    assert!(matches!(e, StoreError::BadResourceVersion(_)), "{e}");
}

pub async fn cluster_scoped_objects_have_no_namespace(s: Arc<dyn Store>) {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "suite-lab", "namespace": "default"}});
    let created = s.create(Kind::Namespace, ns).await.unwrap();
    assert!(created["metadata"].get("namespace").is_none(), "{created}");
    assert_eq!(created["metadata"]["name"], "suite-lab");
    s.get(Kind::Namespace, "", "suite-lab").await.unwrap();
    assert!(
        s.get(Kind::Namespace, "default", "suite-lab")
            .await
            .is_err()
    );
    // A server may hold other namespaces (`default`); none has a namespace.
    let all = s
        .list(Kind::Namespace, &ListOptions::default())
        .await
        .unwrap();
    assert!(
        all.items
            .iter()
            .any(|n| n["metadata"]["name"] == "suite-lab")
    );
    assert!(
        all.items
            .iter()
            .all(|n| n["metadata"].get("namespace").is_none())
    );
    match s.delete(Kind::Namespace, "", "suite-lab").await.unwrap() {
        // A Kubernetes API server finalizes a namespace before it goes.
        Deleted::Gone(v) | Deleted::Marked(v) => assert_eq!(v["metadata"]["name"], "suite-lab"),
    }
}
