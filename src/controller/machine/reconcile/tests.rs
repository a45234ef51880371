//! The reconciler and executor against the embedded store and fake BMCs:
//! registration learns the MAC and closes every session, a step marker is
//! durable before the power action it guards (even when that action
//! fails), a refused boot override fails its boot without a power-on, and
//! the boot-storm limit makes the next machine wait.

use std::sync::Arc;
use std::time::Duration;

use super::MachineReconciler;
use crate::api::*;
use crate::bmc::{BmcError, BootDevice, FakeBmc, FakeConnector, FirmwareMode, PowerAction};
use crate::cluster::DrainOptions;
use crate::controller::feed::ObjectKey;
use crate::controller::machine::Limits;
use crate::controller::machine::plan::holds_boot_slot;
use crate::controller::runner::{Reconciler, Requeue};
use crate::controller::storm::BootSlots;
use crate::store::embedded::EmbeddedStore;
use crate::store::{Store, TypedStore};

struct Env {
    store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&dir.path().join("s.redb")).unwrap());
    Env { store, _dir: dir }
}

fn reconciler(e: &Env, connector: FakeConnector, limit: usize) -> MachineReconciler {
    MachineReconciler {
        store: e.store.clone(),
        connector: Arc::new(connector),
        cluster: None,
        slots: BootSlots::new(limit),
        limits: Limits::default(),
        drain: DrainOptions::default(),
        releaser: None,
        firmware: None,
    }
}

fn machine(name: &str, class: Option<&str>) -> Machine {
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
            class_ref: class.map(|c| LocalObjectReference { name: c.into() }),
            ..Default::default()
        },
    );
    m.metadata.namespace = Some("default".into());
    m
}

fn class() -> MachineClass {
    let art = |n: &str| Artifact {
        url: format!("http://images.example/{n}"),
        sha256: Some("ab".repeat(32)),
        sha512: None,
        checksums_url: None,
    };
    let mut c = MachineClass::new(
        "workers",
        MachineClassSpec {
            image: OsImage {
                os: "flatcar".into(),
                version: "4230.2.3".into(),
                kernel: art("vmlinuz"),
                initrd: art("initrd"),
                install: None,
                rootfs: None,
            },
            kubernetes: KubernetesSpec {
                version: "v1.33.2".into(),
                ..Default::default()
            },
            container_runtime: ContainerRuntime {
                name: "containerd".into(),
                version: "1.7.27".into(),
            },
            join: JoinSpec {
                api_server_endpoint: "10.0.0.10:6443".into(),
                ca_cert_hashes: vec![format!("sha256:{}", "ab".repeat(32))],
                token_secret_ref: SecretReference {
                    name: "join".into(),
                    key: None,
                },
            },
            ..Default::default()
        },
    );
    c.metadata.namespace = Some("default".into());
    c
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new("default", name)
}

async fn get(e: &Env, name: &str) -> Machine {
    e.store.get_obj("default", name).await.unwrap()
}

fn nic(mac: &str) -> NicInfo {
    NicInfo {
        mac: mac.into(),
        ..Default::default()
    }
}

/// Reconcile until the requeue is not immediate (at most `n` times).
async fn settle(r: &MachineReconciler, name: &str, n: usize) -> Requeue {
    for _ in 0..n {
        match r.reconcile(&key(name)).await.unwrap() {
            Requeue::After(d) if d.is_zero() => continue,
            other => return other,
        }
    }
    panic!("{name} did not settle in {n} reconciles");
}

#[tokio::test]
async fn registration_learns_the_mac_and_closes_every_session() {
    let e = env();
    e.store.create_obj(&machine("m1", None)).await.unwrap();
    let bmc = FakeBmc::new();
    let inv = Inventory {
        nics: vec![nic("52:54:00:AA:00:01"), nic("52:54:00:aa:00:02")],
        ..Default::default()
    };
    // One reconcile: finalizer, inventory, MAC, Available (the plans that
    // follow each other without a power action run together).
    bmc.expect_power_state(Ok(PowerState::Off))
        .expect_inventory(Ok(inv))
        .expect_close();
    let r = reconciler(&e, FakeConnector::new().with("m1", bmc.clone()), 0);
    let next = settle(&r, "m1", 5).await;
    assert_eq!(next, Requeue::After(Limits::default().resync));
    bmc.verify().unwrap();
    let m = get(&e, "m1").await;
    assert_eq!(
        m.spec.boot_mac_address.as_deref(),
        Some("52:54:00:aa:00:01")
    );
    let st = m.status.unwrap();
    assert_eq!(st.phase, Some(MachinePhase::Available));
    assert_eq!(st.inventory.unwrap().nics.len(), 2);
    assert_eq!(st.power_state, Some(PowerState::Off));
    assert!(
        m.metadata
            .finalizers
            .unwrap()
            .contains(&crate::controller::machine::plan::FINALIZER.to_string())
    );
    let evs = crate::store::events::list_for(e.store.as_ref(), Kind::Machine, "default", "m1")
        .await
        .unwrap();
    let reasons: Vec<&str> = evs.iter().map(|e| e.reason.as_str()).collect();
    for want in ["Available", "BootMacLearned"] {
        assert!(reasons.contains(&want), "{want} in {reasons:?}");
    }
    // Registering was passed through within the one status write: the
    // phase Event names it.
    let available = evs.iter().find(|e| e.reason == "Available").unwrap();
    assert_eq!(available.message, "(new) → Registering → Available");
}

#[tokio::test]
async fn unreachable_bmc_is_a_condition_and_a_bmc_error_not_a_failure() {
    let e = env();
    e.store.create_obj(&machine("m1", None)).await.unwrap();
    let bmc = FakeBmc::new();
    bmc.expect_power_state(Err(BmcError::BadCredentials {
        address: "127.0.0.1:8000".into(),
    }))
    .expect_close();
    let r = reconciler(&e, FakeConnector::new().with("m1", bmc.clone()), 0);
    let next = r.reconcile(&key("m1")).await.unwrap();
    assert_eq!(next, Requeue::After(Limits::default().bmc_retry));
    bmc.verify().unwrap();
    let st = get(&e, "m1").await.status.unwrap();
    assert_eq!(st.phase, Some(MachinePhase::Registering));
    assert_eq!(st.last_error.unwrap().reason, "BmcBadCredentials");
    let c = crate::api::condition::find_condition(&st.conditions, "BmcReachable").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "BmcBadCredentials")
    );
}

#[tokio::test]
async fn a_paused_machine_never_reaches_its_bmc_until_resumed() {
    let e = env();
    let mut m = machine("m1", Some("workers"));
    m.spec.online = true;
    m.metadata.annotations = Some([(PAUSED_ANNOTATION.to_string(), "true".to_string())].into());
    e.store.create_obj(&m).await.unwrap();
    let bmc = FakeBmc::new();
    let connector = FakeConnector::new().with("m1", bmc.clone());
    let r = reconciler(&e, connector, 0);
    let next = settle(&r, "m1", 3).await;
    assert_eq!(next, Requeue::After(Limits::default().resync));
    assert!(bmc.calls().is_empty(), "{:?}", bmc.calls());
    let got = get(&e, "m1").await;
    assert!(got.metadata.finalizers.is_none());
    let st = got.status.unwrap();
    let c = crate::api::condition::find_condition(&st.conditions, "Paused").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "Annotation")
    );
    assert!(crate::api::condition::find_condition(&st.conditions, "BmcReachable").is_none());
    assert!(st.last_error.is_none());

    // Resumed: the next reconcile talks to the BMC.
    let mut cur = get(&e, "m1").await;
    cur.metadata.annotations = None;
    e.store.update_obj(&cur).await.unwrap();
    bmc.expect_power_state(Ok(PowerState::Off))
        .expect_inventory(Ok(Inventory::default()))
        .expect_close();
    r.reconcile(&key("m1")).await.unwrap();
    bmc.verify().unwrap();
    let st = get(&e, "m1").await.status.unwrap();
    let c = crate::api::condition::find_condition(&st.conditions, "Paused").unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "Resumed"));
}

/// A machine with a class, registered and Available.
async fn available(e: &Env, name: &str) {
    let mut m = machine(name, Some("workers"));
    m.spec.boot_mac_address = Some("52:54:00:aa:00:01".into());
    m.metadata.finalizers = Some(vec![crate::controller::machine::plan::FINALIZER.into()]);
    let mut m: Machine = e.store.create_obj(&m).await.unwrap();
    m.status = Some(MachineStatus {
        phase: Some(MachinePhase::Available),
        inventory: Some(Inventory::default()),
        power_state: Some(PowerState::Off),
        ..Default::default()
    });
    e.store.update_status_obj(&m).await.unwrap();
}

#[tokio::test]
async fn the_power_cycle_marker_is_durable_before_a_failed_power_on() {
    let e = env();
    e.store.create_obj(&class()).await.unwrap();
    available(&e, "m1").await;
    let bmc = FakeBmc::new();
    // One reconcile: Provisioning, mint, boot override, marker (written),
    // power on fails.
    bmc.expect_power_state(Ok(PowerState::Off))
        .expect_boot_once(BootDevice::Network, FirmwareMode::Uefi, Ok(()))
        .expect_power(
            PowerAction::On,
            Err(BmcError::Timeout {
                address: "127.0.0.1:8000".into(),
                after: Duration::from_secs(20),
            }),
        )
        .expect_close();
    let r = reconciler(&e, FakeConnector::new().with("m1", bmc.clone()), 0);
    let next = settle(&r, "m1", 5).await;
    assert_eq!(next, Requeue::After(Limits::default().bmc_retry));
    bmc.verify().unwrap();
    let st = get(&e, "m1").await.status.unwrap();
    let boot = st.boot.clone().unwrap();
    assert_eq!(boot.purpose, crate::api::BootPurpose::Install);
    assert!(holds_boot_slot(&st));
    assert_eq!(
        st.progress.power_cycled_for.as_deref(),
        Some(boot.id.as_str()),
        "the marker was written before the power action"
    );
    assert_eq!(st.last_error.unwrap().reason, "BmcTimeout");
    assert!(r.slots.would_admit(&key("m1")));
    assert_eq!(r.slots.in_use(), 1);

    // Next look: the server is still off and nothing was heard: power on
    // again (repeatable), never a cycle, never a second boot.
    bmc.expect_power_state(Ok(PowerState::Off))
        .expect_power(PowerAction::On, Ok(()))
        .expect_close();
    r.reconcile(&key("m1")).await.unwrap();
    bmc.verify().unwrap();
    let st = get(&e, "m1").await.status.unwrap();
    assert_eq!(st.boot.unwrap().id, boot.id);
    assert!(st.last_error.is_none(), "the stale BMC error is cleared");
}

#[tokio::test]
async fn a_refused_boot_override_fails_the_boot_without_a_power_on_and_keeps_its_reason() {
    let e = env();
    e.store.create_obj(&class()).await.unwrap();
    available(&e, "m1").await;
    let bmc = FakeBmc::new();
    let refused = || BmcError::BootOverrideIgnored {
        address: "127.0.0.1:8000".into(),
        wanted: "Pxe/Once/UEFI".into(),
        got: "Pxe/Continuous/UEFI".into(),
        kept_continuous: true,
    };
    bmc.expect_power_state(Ok(PowerState::Off))
        .expect_boot_once(BootDevice::Network, FirmwareMode::Uefi, Err(refused()))
        .expect_close();
    let r = reconciler(&e, FakeConnector::new().with("m1", bmc.clone()), 0);
    let next = settle(&r, "m1", 5).await;
    assert_eq!(next, Requeue::After(Limits::default().bmc_retry));
    bmc.verify().unwrap();
    let st = get(&e, "m1").await.status.unwrap();
    assert!(st.progress.power_cycled_for.is_none(), "{st:?}");
    let err = st.last_error.clone().unwrap();
    assert_eq!(err.reason, "BmcBootOverrideIgnored");
    assert!(
        err.message.contains("reads back Pxe/Continuous/UEFI")
            && err.message.contains("onceKeptAsContinuous: true"),
        "{}",
        err.message
    );
    // The BMC answered: it is not called unreachable.
    assert!(
        crate::api::condition::find_condition(&st.conditions, "BmcReachable")
            .is_none_or(|c| c.status == crate::api::ConditionStatus::True),
        "{:?}",
        st.conditions
    );

    // Next look: reaching the BMC does not clear the refusal; the boot
    // fails with it and backs off, still without a power-on.
    bmc.expect_power_state(Ok(PowerState::Off)).expect_close();
    let next = r.reconcile(&key("m1")).await.unwrap();
    assert_eq!(next, Requeue::After(Limits::default().retry_after(1)));
    bmc.verify().unwrap();
    let st = get(&e, "m1").await.status.unwrap();
    assert_eq!(st.boot.unwrap().outcome, Some(BootOutcome::Abandoned));
    assert_eq!(st.progress.attempts, Some(1));
    assert_eq!(st.last_error.unwrap().message, err.message);
    assert!(!holds_boot_slot(&get(&e, "m1").await.status.unwrap()));
}

#[tokio::test]
async fn the_boot_storm_limit_makes_the_next_machine_wait_and_survives_restart() {
    let e = env();
    e.store.create_obj(&class()).await.unwrap();
    available(&e, "m1").await;
    available(&e, "m2").await;
    let b1 = FakeBmc::new();
    b1.expect_power_state(Ok(PowerState::Off))
        .expect_boot_once(BootDevice::Network, FirmwareMode::Uefi, Ok(()))
        .expect_power(PowerAction::On, Ok(()))
        .expect_close();
    let b2 = FakeBmc::new();
    b2.expect_power_state(Ok(PowerState::Off)).expect_close();
    let conn = FakeConnector::new()
        .with("m1", b1.clone())
        .with("m2", b2.clone());
    let r = reconciler(&e, conn, 1);
    settle(&r, "m1", 5).await;
    let next = settle(&r, "m2", 5).await;
    assert_eq!(next, Requeue::After(Limits::default().slot_wait));
    b1.verify().unwrap();
    b2.verify().unwrap();
    let st = get(&e, "m2").await.status.unwrap();
    assert_eq!(st.phase, Some(MachinePhase::Provisioning));
    assert!(st.boot.is_none());
    let c = crate::api::condition::find_condition(&st.conditions, "Waiting").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "BootStormLimit")
    );

    // A restarted controller counts m1's open boot against the limit.
    let fresh = reconciler(&e, FakeConnector::new(), 1);
    assert_eq!(fresh.restore_slots().await.unwrap(), 1);
    assert!(!fresh.slots.would_admit(&key("m2")));
    assert!(fresh.slots.would_admit(&key("m1")));
}

/// Edits the class once, on the first connect: as a class edit that
/// arrives after the reconcile read the class and before it acted.
struct EditsTheClass {
    inner: FakeConnector,
    store: Arc<dyn Store>,
    edited: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl crate::bmc::BmcConnector for EditsTheClass {
    async fn connect(&self, m: &Machine) -> Result<Box<dyn crate::bmc::Bmc>, BmcError> {
        if !self.edited.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let mut c: MachineClass = self.store.get_obj("default", "workers").await.unwrap();
            c.spec.kubernetes.version = "v1.34.4".into();
            self.store.update_obj(&c).await.unwrap();
        }
        self.inner.connect(m).await
    }
}

#[tokio::test]
async fn a_plan_made_from_a_class_that_changed_since_is_not_acted_on() {
    let e = env();
    e.store.create_obj(&class()).await.unwrap();
    available(&e, "m1").await;
    let before = get(&e, "m1").await.metadata.resource_version;
    let bmc = FakeBmc::new();
    // The first reconcile only asks for power: the class changed while it
    // did, so it installs nothing from the plan it made before.
    bmc.expect_power_state(Ok(PowerState::Off)).expect_close();
    let mut r = reconciler(&e, FakeConnector::new(), 0);
    r.connector = Arc::new(EditsTheClass {
        inner: FakeConnector::new().with("m1", bmc.clone()),
        store: e.store.clone(),
        edited: false.into(),
    });
    let first = r.reconcile(&key("m1")).await.unwrap();
    assert_eq!(first, Requeue::After(super::CONFLICT_RETRY));
    bmc.verify().unwrap();
    assert_eq!(
        get(&e, "m1").await.metadata.resource_version,
        before,
        "nothing written from the stale plan"
    );
    // Planned again from the edited class, it installs.
    bmc.expect_power_state(Ok(PowerState::Off))
        .expect_boot_once(BootDevice::Network, FirmwareMode::Uefi, Ok(()))
        .expect_power(PowerAction::On, Ok(()))
        .expect_close();
    r.reconcile(&key("m1")).await.unwrap();
    bmc.verify().unwrap();
    let st = get(&e, "m1").await.status.unwrap();
    assert_eq!(st.phase, Some(MachinePhase::Provisioning));
}

mod media;
