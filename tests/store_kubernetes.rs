//! The store's shared test suite (src/store/suite.rs) against the
//! Kubernetes backend, on two API servers, as a differential (what passes
//! on one must pass on the other):
//! - `kube_apiserver`: the real kube-apiserver and etcd that
//!   scripts/kubernetes-build builds (tests/common/control_plane.rs), one
//!   per test binary with deploy/crds/ installed; the suite's tests take
//!   it in turn, each starting from namespaces emptied of its kinds.
//! - `stand_in`: each test starts its own `metalherd serve` (the stand-in
//!   API server, controller off, a separate process).
//!
//! Both are reached through a kubeconfig, TLS verified and with a token,
//! as any kube-rs client would.
//! The suite is included from the library's source rather than exported
//! from it, so the library ships no test code; it runs here because only
//! integration tests get the `metalherd` binary's path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::server::{Server, text};
#[allow(unused_imports)]
use metalherd::api::Kind;
#[allow(unused_imports)]
use metalherd::store::{Deleted, ListOptions, Selector, Store, StoreError, WatchEvent};

#[macro_use]
#[path = "../src/store/suite.rs"]
mod suite;

/// A stand-in API server and a Kubernetes store on it.
pub async fn stand_in_store() -> (Server, Arc<dyn Store>) {
    let s = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let path = s.kubeconfig_file();
    let store = metalherd::store::open(&metalherd::store::StoreConfig::Kubernetes {
        kubeconfig: Some(path),
        namespace: None,
    })
    .await
    .unwrap_or_else(|e| panic!("open the Kubernetes store: {e}"));
    // The stand-in, like a kube-apiserver, refuses objects in a namespace
    // that does not exist; the suite also writes in `lab`.
    store
        .create(
            Kind::Namespace,
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lab"}}),
        )
        .await
        .unwrap();
    (s, store)
}

mod stand_in {
    async fn open() -> super::suite::Opened {
        let (server, store) = super::stand_in_store().await;
        (Box::new(server), store)
    }
    all_tests!(open);
}

/// The shared kube-apiserver, held by one suite test at a time, with the
/// suite's namespaces (`default`, `lab`) emptied of every kind it writes.
pub async fn kube_apiserver_store() -> (
    tokio::sync::MutexGuard<'static, ()>,
    Arc<common::control_plane::ControlPlane>,
    Arc<dyn Store>,
) {
    // Each suite test runs on a runtime of its own: a lock that is not
    // tied to one.
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let turn = TURN.lock().await;
    let cp = tokio::task::spawn_blocking(|| {
        let cp = common::control_plane::shared();
        cp.namespace("lab");
        cp
    })
    .await
    .unwrap();
    let store = metalherd::store::open(&metalherd::store::StoreConfig::Kubernetes {
        kubeconfig: Some(cp.admin_kubeconfig()),
        namespace: None,
    })
    .await
    .unwrap_or_else(|e| panic!("open the Kubernetes store on kube-apiserver: {e}"));
    for kind in [
        Kind::Machine,
        Kind::MachineSet,
        Kind::MachineClass,
        Kind::Secret,
        Kind::Event,
    ] {
        for ns in ["default", "lab"] {
            let list = store.list(kind, &ListOptions::namespace(ns)).await.unwrap();
            for mut obj in list.items {
                let name = obj["metadata"]["name"].as_str().unwrap().to_string();
                if obj["metadata"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| !f.is_empty())
                {
                    obj["metadata"]["finalizers"] = serde_json::json!([]);
                    let _ = store.update(kind, obj).await;
                }
                let _ = store.delete(kind, ns, &name).await;
            }
        }
    }
    // The suite's cluster-scoped Namespace: kube-apiserver deletes it in
    // the background (the namespace controller empties it first).
    let _ = store.delete(Kind::Namespace, "", "suite-lab").await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while store.get(Kind::Namespace, "", "suite-lab").await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "Namespace suite-lab not deleted in 60 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    (turn, cp, store)
}

mod kube_apiserver {
    async fn open() -> super::suite::Opened {
        let (turn, cp, store) = super::kube_apiserver_store().await;
        (Box::new((turn, cp)), store)
    }
    all_tests!(open);
}

/// The read cache `serve` puts in front of a remote store, over
/// kube-apiserver: the same suite, served partly from memory.
mod cached_on_kube_apiserver {
    async fn open() -> super::suite::Opened {
        let (turn, cp, store) = super::kube_apiserver_store().await;
        let cancel = tokio_util::sync::CancellationToken::new();
        let cached = metalherd::store::cache::CachingStore::new(store, cancel.clone());
        (
            Box::new((turn, cp, cancel.drop_guard())),
            std::sync::Arc::new(cached),
        )
    }
    all_tests!(open);
}

/// `serve --store kubernetes` stops at start, naming the cause, when the
/// API server does not answer; nothing else starts.
#[test]
fn serve_in_kubernetes_mode_fails_fast_without_an_api_server() {
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(common::metalherd_bin())
        .args(["serve", "--store", "kubernetes", "--kubeconfig"])
        .arg(&kc)
        .args(["--listen", &format!("127.0.0.1:{}", common::free_port())])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot open the Kubernetes store: store backend: the Kubernetes API server at https://127.0.0.1:{port}/: list machines"
        )),
        "{stderr}"
    );
    assert!(!dir.path().join("data/metalherd.redb").exists());
}
