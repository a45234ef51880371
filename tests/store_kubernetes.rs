//! The store's shared test suite (src/store/suite.rs) against the
//! Kubernetes backend: each test starts its own `metalherd serve` (the
//! stand-in API server, controller off, a separate process) and points a
//! `KubernetesStore` at it through the kubeconfig `metalherd kubeconfig`
//! prints, TLS verified and with the token, as any kube-rs client would.
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

mod kubernetes {
    async fn open() -> super::suite::Opened {
        let (server, store) = super::stand_in_store().await;
        (Box::new(server), store)
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
