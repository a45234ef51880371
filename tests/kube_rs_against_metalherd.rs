//! Story: a Rust operator author points kube-rs at metalherd. The
//! project's own CRD types through `kube::Api` and `kube::runtime::watcher`,
//! configured from the kubeconfig `metalherd kubeconfig` prints (TLS
//! verified against the data directory's CA, the token): create, list,
//! patch status, a watcher that sees the change and resumes across a
//! restart of the server, delete.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::server::{Server, text};
use futures::StreamExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::WatchStreamExt;
use metalherd::api::{Machine, MachinePhase};
use serde_json::json;

async fn client(s: &Server) -> kube::Client {
    let out = s.cli(&["kubeconfig"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "metalherd kubeconfig: {stderr}");
    let kc: Kubeconfig = serde_yaml::from_str(&stdout).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    assert_eq!(config.default_namespace, "default");
    kube::Client::try_from(config).unwrap()
}

/// Wait (up to 30 s) until the watcher reports a Machine in `want`.
async fn wait_phase(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Option<MachinePhase>>,
    want: MachinePhase,
) -> Result<(), tokio::time::error::Elapsed> {
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(p) = rx.recv().await {
            if p == Some(want) {
                return;
            }
        }
        panic!("watch ended");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_lists_creates_patches_status_and_watches_across_a_restart() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let s = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let client = client(&s).await;
    let machines: Api<Machine> = Api::default_namespaced(client.clone());

    let m: Machine = serde_json::from_value(json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": "rack1-u07"},
        "spec": {"bmc": {"address": "redfish+https://10.0.0.5/redfish/v1/Systems/1",
                         "credentialsSecretRef": {"name": "rack1-u07-bmc"}}}
    }))
    .unwrap();
    let created = machines.create(&PostParams::default(), &m).await.unwrap();
    assert!(created.metadata.uid.is_some());
    let list = machines.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].spec.bmc.address, m.spec.bmc.address);

    // A watcher (re-watching with backoff, as operators run it) sees the
    // status changes patches make, also across a restart of the server.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let api = machines.clone();
    let watch = tokio::spawn(async move {
        let mut stream = kube::runtime::watcher(api, kube::runtime::watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(ev) = stream.next().await {
            if let Ok(m) = ev {
                let _ = tx.send(m.status.and_then(|s| s.phase));
            }
        }
    });
    let patch_phase = |phase: &'static str| {
        let machines = machines.clone();
        async move {
            machines
                .patch_status(
                    "rack1-u07",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"phase": phase}})),
                )
                .await
        }
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let patched = patch_phase("Ready").await.unwrap();
    assert_eq!(patched.status.unwrap().phase, Some(MachinePhase::Ready));
    wait_phase(&mut rx, MachinePhase::Ready)
        .await
        .expect("the watcher saw the Ready patch");

    let s = tokio::task::spawn_blocking(move || {
        let mut s = s;
        s.kill_and_restart();
        s
    })
    .await
    .unwrap();
    patch_phase("Provisioning").await.unwrap();
    wait_phase(&mut rx, MachinePhase::Provisioning)
        .await
        .unwrap_or_else(|_| panic!("no change seen after the restart:\n{}", s.log()));
    watch.abort();

    machines
        .delete("rack1-u07", &DeleteParams::default())
        .await
        .unwrap();
    assert!(machines.get_opt("rack1-u07").await.unwrap().is_none());
    tokio::task::spawn_blocking(move || drop(s)).await.unwrap();
}
