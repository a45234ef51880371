//! The set reconciler against the embedded store: scaling claims and
//! releases Machines and reports a short pool; two sets reconciled at once
//! over one pool never share a Machine, checked from the Machine watch
//! stream (a claim label, once set, never changes to another set); a
//! claimed machine renders from its revision's snapshot, not the live class.
//! Each reconciler reads its Machines from its own watch-fed cache, as in
//! `serve`; the racing sets reconcile without waiting for their caches to
//! catch up, so stale views meet in the store.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;

use super::cache::MachineCache;
use super::plan::cond;
use super::plan::tests::class;
use super::probe::{ProbeError, Prober};
use super::reconcile::MachineSetReconciler;
use crate::api::machine_set::{MachineSetSpec, MachineTemplate, SET_LABEL};
use crate::api::*;
use crate::controller::feed::ObjectKey;
use crate::controller::runner::Reconciler;
use crate::store::embedded::EmbeddedStore;
use crate::store::{ListOptions, Store, TypedStore};

struct NoProbe;

#[async_trait]
impl Prober for NoProbe {
    async fn status(&self, url: &str) -> Result<u16, ProbeError> {
        Err(ProbeError::Unexpected {
            url: url.to_string(),
        })
    }
}

struct Env {
    store: Arc<dyn Store>,
    cancel: tokio_util::sync::CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&dir.path().join("s.redb")).unwrap());
    Env {
        store,
        cancel: tokio_util::sync::CancellationToken::new(),
        _dir: dir,
    }
}

/// A reconciler with its own Machine cache, fed by the store's watch.
fn reconciler(e: &Env) -> MachineSetReconciler {
    let machines = MachineCache::new();
    tokio::spawn(machines.clone().run(
        e.store.clone(),
        std::time::Duration::from_millis(50),
        e.cancel.clone(),
        |_| {},
    ));
    MachineSetReconciler {
        store: e.store.clone(),
        machines,
        prober: Arc::new(NoProbe),
        cluster_configured: false,
    }
}

/// Wait until the reconciler's cache holds every Machine at the version
/// the store has now.
async fn caught_up(r: &MachineSetReconciler) {
    for _ in 0..3000 {
        let ms: Vec<Machine> = r.store.list_obj(&ListOptions::default()).await.unwrap();
        let cached = r.machines.machines("default");
        let same = r.machines.is_synced()
            && cached.len() == ms.len()
            && ms.iter().all(|m| {
                let name = m.metadata.name.as_deref().unwrap_or_default();
                r.machines
                    .get("default", name)
                    .map(|c| c.metadata.resource_version.clone())
                    == Some(m.metadata.resource_version.clone())
            });
        if same {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the Machine cache did not catch up with the store");
}

async fn available(e: &Env, name: &str) {
    let mut m = Machine::new(
        name,
        MachineSpec {
            bmc: BmcSpec {
                address: "redfish+http://127.0.0.1:8000/redfish/v1/Systems/1".into(),
                credentials_secret_ref: SecretReference {
                    name: "bmc".into(),
                    key: None,
                },
                ..Default::default()
            },
            ..Default::default()
        },
    );
    m.metadata.namespace = Some("default".into());
    m.metadata.labels = Some([("role".to_string(), "worker".to_string())].into());
    let mut m = e.store.create_obj(&m).await.unwrap();
    m.status = Some(MachineStatus {
        phase: Some(MachinePhase::Available),
        ..Default::default()
    });
    e.store.update_status_obj(&m).await.unwrap();
}

async fn class_obj(e: &Env, version: &str) {
    let mut c = MachineClass::new("flatcar", class(version));
    c.metadata.namespace = Some("default".into());
    match e.store.get_obj::<MachineClass>("default", "flatcar").await {
        Ok(old) => {
            c.metadata.resource_version = old.metadata.resource_version;
            e.store.update_obj(&c).await.unwrap();
        }
        Err(_) => {
            e.store.create_obj(&c).await.unwrap();
        }
    }
}

async fn set(e: &Env, name: &str, replicas: i32) {
    let mut s = MachineSet::new(
        name,
        MachineSetSpec {
            replicas,
            selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some([("role".to_string(), "worker".to_string())].into()),
                ..Default::default()
            },
            template: MachineTemplate {
                labels: [("pool".to_string(), name.to_string())].into(),
                class_ref: LocalObjectReference {
                    name: "flatcar".into(),
                },
                overrides: None,
            },
            ..Default::default()
        },
    );
    s.metadata.namespace = Some("default".into());
    match e.store.get_obj::<MachineSet>("default", name).await {
        Ok(old) => {
            s.metadata.resource_version = old.metadata.resource_version;
            e.store.update_obj(&s).await.unwrap();
        }
        Err(_) => {
            e.store.create_obj(&s).await.unwrap();
        }
    }
}

async fn claims(e: &Env) -> BTreeMap<String, String> {
    let ms: Vec<Machine> = e.store.list_obj(&ListOptions::default()).await.unwrap();
    ms.into_iter()
        .filter_map(|m| {
            let owner = m.metadata.labels.as_ref()?.get(SET_LABEL)?.clone();
            Some((m.metadata.name.clone()?, owner))
        })
        .collect()
}

/// Reconcile a set once its reconciler's cache has seen every write so far.
async fn reconcile(r: &MachineSetReconciler, name: &str) {
    caught_up(r).await;
    reconcile_now(r, name).await;
}

/// Reconcile from whatever the cache holds now.
async fn reconcile_now(r: &MachineSetReconciler, name: &str) {
    r.reconcile(&ObjectKey::new("default", name)).await.unwrap();
}

#[tokio::test]
async fn scale_up_claims_down_releases_short_pool_is_reported() {
    let e = env();
    for n in ["m1", "m2", "m3"] {
        available(&e, n).await;
    }
    class_obj(&e, "1.0").await;
    set(&e, "workers", 2).await;
    let r = reconciler(&e);
    reconcile(&r, "workers").await;
    let c = claims(&e).await;
    assert_eq!(c.keys().collect::<Vec<_>>(), ["m1", "m2"]);
    let m1: Machine = e.store.get_obj("default", "m1").await.unwrap();
    assert_eq!(m1.spec.class_ref.unwrap().name, "flatcar");
    let l = m1.metadata.labels.unwrap();
    assert_eq!(l.get("pool").map(String::as_str), Some("workers"));
    // The claim pins the machine to revision 1's snapshot.
    let (snap, hash) = crate::store::pinned::pinned_class(e.store.as_ref(), &{
        e.store.get_obj::<Machine>("default", "m1").await.unwrap()
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(snap.spec.image.version, "1.0");
    // A live class edit does not reach it: still revision 1's snapshot.
    class_obj(&e, "9.9").await;
    let m1: Machine = e.store.get_obj("default", "m1").await.unwrap();
    let (snap2, hash2) = crate::store::pinned::pinned_class(e.store.as_ref(), &m1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((snap2.spec.image.version.as_str(), &hash2), ("1.0", &hash));
    assert_eq!(snap, snap2);
    class_obj(&e, "1.0").await;

    // Down: one released, back to no class and no claim.
    set(&e, "workers", 1).await;
    reconcile(&r, "workers").await;
    let c = claims(&e).await;
    assert_eq!(c.len(), 1, "{c:?}");
    let gone = if c.contains_key("m1") { "m2" } else { "m1" };
    let g: Machine = e.store.get_obj("default", gone).await.unwrap();
    assert!(g.spec.class_ref.is_none());
    assert!(!g.metadata.labels.unwrap_or_default().contains_key("pool"));

    // Up past the pool: claims what there is and says so.
    set(&e, "workers", 5).await;
    reconcile(&r, "workers").await;
    let s: MachineSet = e.store.get_obj("default", "workers").await.unwrap();
    let pool = s
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == cond::POOL)
        .unwrap();
    assert_eq!(
        (pool.status.as_str(), pool.reason.as_str()),
        ("False", "PoolShort")
    );
    // No Machine controller runs here, so the released machine is still
    // Available: 1 claimed + 2 candidates.
    assert_eq!(pool.message, "wanted 5, claimable 3");
}

#[tokio::test]
async fn two_sets_racing_for_one_pool_never_share_a_machine() {
    let e = env();
    let names: Vec<String> = (0..12).map(|i| format!("m{i:02}")).collect();
    for n in &names {
        available(&e, n).await;
    }
    class_obj(&e, "1.0").await;
    set(&e, "a", 8).await;
    set(&e, "b", 8).await;
    let watch = e
        .store
        .watch(Kind::Machine, &ListOptions::default(), None)
        .await
        .unwrap();
    // Two reconcilers (two controller replicas), both sets each, at once.
    let (r1, r2) = (reconciler(&e), reconciler(&e));
    for _ in 0..4 {
        tokio::join!(
            reconcile_now(&r1, "a"),
            reconcile_now(&r2, "b"),
            reconcile_now(&r2, "a"),
            reconcile_now(&r1, "b"),
        );
    }
    let c = claims(&e).await;
    assert!(c.len() >= 8, "{c:?}");
    assert!(
        c.values().any(|s| s == "a") && c.values().any(|s| s == "b"),
        "{c:?}"
    );
    // From the watch: a claim never passes from one set to another without
    // being released in between (a lost update would show as exactly that).
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    let events: Vec<_> = watch
        .take_until(tokio::time::sleep(std::time::Duration::from_millis(300)))
        .collect()
        .await;
    assert!(!events.is_empty());
    for ev in events {
        let v = ev.unwrap().object().clone();
        let name = v
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap()
            .to_string();
        match v.pointer(&format!(
            "/metadata/labels/{}",
            SET_LABEL.replace('/', "~1")
        )) {
            Some(set) => {
                let set = set.as_str().unwrap().to_string();
                let first = owner.entry(name.clone()).or_insert_with(|| set.clone());
                assert_eq!(*first, set, "{name} passed from one set to another");
            }
            None => {
                owner.remove(&name);
            }
        }
    }
}

#[tokio::test]
async fn a_paused_machine_is_not_claimed_until_unpaused() {
    let e = env();
    for n in ["m1", "m2"] {
        available(&e, n).await;
    }
    let pause = |paused: bool| {
        let store = e.store.clone();
        async move {
            let mut m: Machine = store.get_obj("default", "m1").await.unwrap();
            let a = m.metadata.annotations.get_or_insert_default();
            if paused {
                a.insert(PAUSED_ANNOTATION.to_string(), "true".to_string());
            } else {
                a.remove(PAUSED_ANNOTATION);
            }
            store.update_obj(&m).await.unwrap();
        }
    };
    pause(true).await;
    class_obj(&e, "1.0").await;
    set(&e, "workers", 2).await;
    let r = reconciler(&e);
    reconcile(&r, "workers").await;
    let c = claims(&e).await;
    assert_eq!(c.keys().collect::<Vec<_>>(), ["m2"], "{c:?}");
    let m1: Machine = e.store.get_obj("default", "m1").await.unwrap();
    assert!(m1.spec.class_ref.is_none(), "a paused machine got a class");
    let s: MachineSet = e.store.get_obj("default", "workers").await.unwrap();
    let pool = s
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == cond::POOL)
        .unwrap();
    assert_eq!(
        pool.message,
        "wanted 2, claimable 1; not claimable: m1: paused (metalherd.dev/paused)"
    );
    pause(false).await;
    reconcile(&r, "workers").await;
    let c = claims(&e).await;
    assert_eq!(c.keys().collect::<Vec<_>>(), ["m1", "m2"], "{c:?}");
}

/// With a target cluster configured, the gate waits for the Node: a
/// machine Ready on the batch's revision whose `NodeReady` condition is not
/// True is out of service, and the batch passes once it is.
#[tokio::test]
async fn with_a_cluster_the_gate_waits_for_node_ready() {
    let e = env();
    available(&e, "m1").await;
    class_obj(&e, "1.0").await;
    set(&e, "workers", 1).await;
    let r = MachineSetReconciler {
        cluster_configured: true,
        ..reconciler(&e)
    };
    // As the Machine controller would: installed, Ready, Node as given.
    let installed = |rev: usize, node_ready: bool| {
        let store = e.store.clone();
        async move {
            let s: MachineSet = store.get_obj("default", "workers").await.unwrap();
            let hash = s.status.unwrap().revisions[rev - 1].hash.clone();
            let mut m: Machine = store.get_obj("default", "m1").await.unwrap();
            let st = m.status.get_or_insert_default();
            st.phase = Some(MachinePhase::Ready);
            st.provisioned_revision = Some(hash);
            st.conditions = vec![Condition {
                type_: "NodeReady".into(),
                status: crate::api::ConditionStatus::of(node_ready),
                observed_generation: None,
                last_transition_time: jiff::Timestamp::now(),
                reason: "KubeletReady".into(),
                message: String::new(),
            }];
            store.update_status_obj(&m).await.unwrap();
        }
    };
    let status = || {
        let store = e.store.clone();
        async move {
            let s: MachineSet = store.get_obj("default", "workers").await.unwrap();
            s.status.unwrap()
        }
    };
    reconcile(&r, "workers").await;
    installed(1, false).await;
    reconcile(&r, "workers").await;
    let st = status().await;
    assert_eq!(st.available_replicas, 0);
    assert_eq!(st.rollout_state, Some(RolloutState::Progressing));
    installed(1, true).await;
    reconcile(&r, "workers").await;
    let st = status().await;
    assert_eq!(
        (st.available_replicas, st.rollout_state),
        (1, Some(RolloutState::Complete))
    );

    // A new class version: the batch holds while the Node is not Ready.
    class_obj(&e, "2.0").await;
    reconcile(&r, "workers").await;
    let st = status().await;
    assert_eq!(st.current_batch.as_ref().unwrap().revision, 2);
    installed(2, false).await;
    reconcile(&r, "workers").await;
    let b = status().await.current_batch.unwrap();
    assert!(!b.machines[0].passed && b.machines[0].healthy_since.is_none());
    installed(2, true).await;
    reconcile(&r, "workers").await;
    reconcile(&r, "workers").await;
    let st = status().await;
    assert_eq!(st.rollout_state, Some(RolloutState::Complete), "{st:?}");
    assert_eq!(st.current_revision, Some(2));
}
