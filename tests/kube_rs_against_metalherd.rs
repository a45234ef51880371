//! Story: a Rust operator author points kube-rs at metalherd. The
//! project's own CRD types through `kube::Api` and `kube::runtime::watcher`,
//! configured from the kubeconfig `metalherd kubeconfig` prints (TLS
//! verified against the data directory's CA, the token): create, list,
//! patch status, a watcher that sees the change and resumes across a
//! restart of the server, delete. And the Lease a leader election takes:
//! created, renewed with a precondition, raced for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::server::Server;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::WatchStreamExt;
use metalherd::api::{Machine, MachinePhase};
use serde_json::json;

async fn client(s: &Server) -> kube::Client {
    let kc: Kubeconfig = serde_yaml::from_str(&s.kubeconfig()).unwrap();
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

/// A Lease named `name` held by `holder`, renewed now.
fn lease(name: &str, holder: &str) -> Lease {
    let now = MicroTime(jiff::Timestamp::now());
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    }
}

fn holder(l: &Lease) -> Option<&str> {
    l.spec.as_ref()?.holder_identity.as_deref()
}

/// What leader election needs of the API: a Lease created, read, renewed
/// with a resourceVersion precondition, and two candidates racing from the
/// same version: exactly one wins, the other gets 409 Conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_elects_a_leader_through_a_lease() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let s = tokio::task::spawn_blocking(Server::start).await.unwrap();
    // Two candidates, each with its own client (own connections).
    let a: Api<Lease> = Api::default_namespaced(client(&s).await);
    let b: Api<Lease> = Api::default_namespaced(client(&s).await);
    let name = "metalherd-controller";
    assert!(a.get_opt(name).await.unwrap().is_none());
    let created = a
        .create(&PostParams::default(), &lease(name, "a"))
        .await
        .unwrap();
    assert_eq!(holder(&created), Some("a"));
    let read = b.get(name).await.unwrap();
    assert_eq!(
        read.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(
        read.spec, created.spec,
        "MicroTimes kept to the microsecond"
    );
    // Creating it again is AlreadyExists.
    match b.create(&PostParams::default(), &lease(name, "b")).await {
        Err(kube::Error::Api(e)) => assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists")),
        other => panic!("second create: {other:?}"),
    }

    // The holder renews with a precondition on what it read.
    let mut renew = read.clone();
    renew.spec.as_mut().unwrap().renew_time = Some(MicroTime(jiff::Timestamp::now()));
    let renewed = a
        .replace(name, &PostParams::default(), &renew)
        .await
        .unwrap();
    assert_ne!(
        renewed.metadata.resource_version,
        read.metadata.resource_version
    );

    // Rounds of two candidates taking over from the same version.
    let mut current = renewed;
    for round in 0..5 {
        let take = |who: &str| {
            let mut l = current.clone();
            let spec = l.spec.as_mut().unwrap();
            spec.holder_identity = Some(who.into());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            l
        };
        let (la, lb) = (take("a"), take("b"));
        let pp = PostParams::default();
        let (ra, rb) = tokio::join!(a.replace(name, &pp, &la), b.replace(name, &pp, &lb));
        let (won, lost) = match (ra, rb) {
            (Ok(w), Err(l)) | (Err(l), Ok(w)) => (w, l),
            (ra, rb) => panic!("round {round}: both {ra:?} and {rb:?}"),
        };
        match lost {
            kube::Error::Api(e) => {
                assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"), "{e:?}");
                assert!(
                    e.message.contains("the object has been modified"),
                    "{}",
                    e.message
                );
            }
            other => panic!("round {round}: the loser got {other:?}"),
        }
        let stored = a.get(name).await.unwrap();
        assert_eq!(holder(&stored), holder(&won), "round {round}");
        assert_eq!(
            stored.metadata.resource_version,
            won.metadata.resource_version
        );
        current = stored;
    }
    assert_eq!(current.spec.as_ref().unwrap().lease_transitions, Some(5));

    // A replace without a resourceVersion may not overwrite a Lease.
    let mut blind = current.clone();
    blind.metadata.resource_version = None;
    match b.replace(name, &PostParams::default(), &blind).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 422, "{e:?}"),
        other => panic!("unconditional replace: {other:?}"),
    }
    // Leases list, and go.
    let list = a.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    a.delete(name, &DeleteParams::default()).await.unwrap();
    assert!(b.get_opt(name).await.unwrap().is_none());
    tokio::task::spawn_blocking(move || drop(s)).await.unwrap();
}

/// Server-side apply from kube-rs (`Patch::Apply`): a Lease taken by one
/// elector, refused to another (409 naming the field's manager) until it
/// forces; a Machine's status applied through `/status` by its own
/// manager, the spec untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_server_side_apply_of_a_lease_and_a_status() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let s = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let client = client(&s).await;
    let leases: Api<Lease> = Api::default_namespaced(client.clone());
    let want = |holder: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "metalherd-controller"},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}})
    };
    let a = PatchParams::apply("elector-a");
    let l = leases
        .patch("metalherd-controller", &a, &Patch::Apply(want("a")))
        .await
        .unwrap();
    assert_eq!(holder(&l), Some("a"));
    let mf = l.metadata.managed_fields.unwrap();
    assert_eq!(
        (mf[0].manager.as_deref(), mf[0].operation.as_deref()),
        (Some("elector-a"), Some("Apply"))
    );
    let b = PatchParams::apply("elector-b");
    match leases
        .patch("metalherd-controller", &b, &Patch::Apply(want("b")))
        .await
    {
        Err(kube::Error::Api(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"), "{e:?}");
            assert_eq!(
                e.message,
                "Apply failed with 1 conflict: conflict with \"elector-a\": .spec.holderIdentity"
            );
        }
        other => panic!("b took the lease without forcing: {other:?}"),
    }
    let l = leases
        .patch(
            "metalherd-controller",
            &b.clone().force(),
            &Patch::Apply(want("b")),
        )
        .await
        .unwrap();
    assert_eq!(holder(&l), Some("b"));

    // A Machine's status, applied by its own manager through /status.
    let machines: Api<Machine> = Api::default_namespaced(client);
    let m: Machine = serde_json::from_value(json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": "rack1-u08"},
        "spec": {"bmc": {"address": "ipmi://10.0.0.8", "credentialsSecretRef": {"name": "bmc"}}}
    }))
    .unwrap();
    machines.create(&PostParams::default(), &m).await.unwrap();
    let status = |reason: &str| {
        json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
               "metadata": {"name": "rack1-u08"},
               "spec": {"online": true},
               "status": {"conditions": [{"type": "Ready", "status": "False", "reason": reason,
                          "message": "checked", "lastTransitionTime": "2026-11-22T03:00:00Z"}]}})
    };
    let checker = PatchParams::apply("health-checker");
    let got = machines
        .patch_status("rack1-u08", &checker, &Patch::Apply(status("Probing")))
        .await
        .unwrap();
    let st = got.status.unwrap();
    assert_eq!(st.conditions[0].reason, "Probing");
    assert!(!got.spec.online, "spec is not written through /status");
    let entry = got
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|e| e.manager.as_deref() == Some("health-checker"))
        .unwrap();
    assert_eq!(entry.subresource.as_deref(), Some("status"));
    // Another manager changing those conditions conflicts.
    match machines
        .patch_status(
            "rack1-u08",
            &PatchParams::apply("other"),
            &Patch::Apply(status("Other")),
        )
        .await
    {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 409, "{e:?}");
            assert!(e.message.contains("conflict with \"health-checker\" with subresource \"status\": .status.conditions"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
    tokio::task::spawn_blocking(move || drop(s)).await.unwrap();
}

/// Collect what the watcher reports into `seen` until `want` (30 s at most).
async fn until(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    want: &str,
    seen: &mut Vec<String>,
) {
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(e) = rx.recv().await {
            seen.push(e.clone());
            if e == want {
                return true;
            }
        }
        false
    })
    .await;
    let last = &seen[seen.len().saturating_sub(3)..];
    assert_eq!(
        found.ok(),
        Some(true),
        "no {want:?} in {} events, the last {last:?}",
        seen.len()
    );
}

/// A watcher that resumes from a version the server no longer keeps gets
/// `410 Gone` (as an ERROR event, as kube-apiserver sends it) and lists
/// again. The server keeps 5 changes (`store.watchHistory`); the watcher
/// sees only the labelled Machine, so its version stays behind while the
/// other Machine changes 20 times; its watches end every second and the
/// next one resumes from that version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_watcher_relists_after_410_gone() {
    use kube::runtime::watcher::{self, Event};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = "controller:\n  enabled: false\nstore:\n  watchHistory: 5\n";
    let s = tokio::task::spawn_blocking(move || Server::start_with_config(Some(config)))
        .await
        .unwrap();
    let machines: Api<Machine> = Api::default_namespaced(client(&s).await);
    let machine = |name: &str, labels: serde_json::Value| -> Machine {
        serde_json::from_value(json!({
            "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
            "metadata": {"name": name, "labels": labels},
            "spec": {"bmc": {"address": "ipmi://10.0.0.9", "credentialsSecretRef": {"name": "bmc"}}}
        }))
        .unwrap()
    };
    let pp = PostParams::default();
    machines
        .create(&pp, &machine("watched", json!({"watched": "yes"})))
        .await
        .unwrap();
    machines
        .create(&pp, &machine("busy", json!({})))
        .await
        .unwrap();

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let cfg = watcher::Config::default().labels("watched=yes").timeout(1);
    let watch = tokio::spawn(watcher::watcher(machines.clone(), cfg).for_each(move |ev| {
        let seen = match ev {
            Ok(Event::Init) => "init".to_string(),
            Ok(Event::InitApply(m)) => format!("list {}", m.metadata.name.unwrap_or_default()),
            Ok(Event::InitDone) => "listed".to_string(),
            Ok(Event::Apply(m)) => format!("apply {}", m.metadata.name.unwrap_or_default()),
            Ok(Event::Delete(m)) => format!("delete {}", m.metadata.name.unwrap_or_default()),
            Err(watcher::Error::WatchError(status)) => format!("error {}", status.code),
            Err(e) => format!("failed {e}"),
        };
        let _ = tx.send(seen);
        futures::future::ready(())
    }));
    let mut seen = Vec::new();
    until(&mut rx, "listed", &mut seen).await;
    assert_eq!(seen, ["init", "list watched", "listed"]);
    for i in 0..20 {
        machines
            .patch(
                "busy",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"n": i.to_string()}}})),
            )
            .await
            .unwrap();
    }
    seen.clear();
    until(&mut rx, "error 410", &mut seen).await;
    assert!(
        seen.iter()
            .all(|e| !e.starts_with("apply") && !e.starts_with("failed")),
        "{seen:?}"
    );
    seen.clear();
    until(&mut rx, "listed", &mut seen).await;
    assert_eq!(seen, ["init", "list watched", "listed"], "listed again");
    watch.abort();
    tokio::task::spawn_blocking(move || drop(s)).await.unwrap();
}
