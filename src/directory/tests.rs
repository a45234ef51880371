//! What a boot gets (the intent a Machine's status calls for), and the boot
//! recorder: steps recorded in a burst for several machines all land, each
//! machine's in the order they were recorded, none dropped.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::api::{BootStep, Kind, Machine};
use crate::store::embedded::EmbeddedStore;
use crate::store::{Store, TypedStore};

/// A Machine in `phase` with `boot` as its current boot.
fn booting(phase: &str, boot: serde_json::Value) -> Machine {
    serde_json::from_value(json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": "m1", "namespace": "default", "uid": "u1"},
        "spec": {"bmc": {"address": "ipmi://10.0.0.1", "credentialsSecretRef": {"name": "b"}}, "bootMACAddress": "52:54:00:00:00:01"},
        "status": {"phase": phase, "boot": boot}
    }))
    .unwrap()
}

#[test]
fn an_open_deprovisioning_boot_gets_the_live_os_and_a_closed_one_does_not() {
    let open = json!({"id": "b9", "purpose": "deprovision", "mintedAt": "2026-01-01T00:00:00Z"});
    let e = MachineEntry::from_machine(&booting("Deprovisioning", open.clone())).unwrap();
    assert_eq!(
        e.intent,
        BootIntent::Install {
            boot_id: "b9".into(),
            purpose: BootPurpose::Deprovision
        },
        "a wipe boot is a live-OS boot (its config is the wipe config)"
    );
    let mut wiped = open;
    wiped["completedAt"] = json!("2026-01-01T00:05:00Z");
    wiped["outcome"] = json!("wiped");
    let e = MachineEntry::from_machine(&booting("Deprovisioning", wiped)).unwrap();
    assert_eq!(e.intent, BootIntent::Idle, "once wiped, nothing is served");
    // Install and reimage boots are live-OS boots as before.
    for (phase, purpose) in [
        ("Provisioning", BootPurpose::Install),
        ("Reimaging", BootPurpose::Reimage),
    ] {
        let b = json!({"id": "b1", "purpose": purpose, "mintedAt": "2026-01-01T00:00:00Z"});
        let e = MachineEntry::from_machine(&booting(phase, b)).unwrap();
        assert_eq!(
            e.intent,
            BootIntent::Install {
                boot_id: "b1".into(),
                purpose
            }
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_steps_lands_in_order_per_machine() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&dir.path().join("s.redb")).unwrap());
    let names = ["m1", "m2", "m3"];
    for n in names {
        store
            .create(
                Kind::Machine,
                json!({
                    "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
                    "metadata": {"name": n},
                    "spec": {"bmc": {"address": "ipmi://10.0.0.5", "credentialsSecretRef": {"name": "bmc"}}}
                }),
            )
            .await
            .unwrap();
    }
    let cancel = CancellationToken::new();
    let rec = BootRecorder::spawn(store.clone(), cancel.clone());
    let steps = 20.min(BOOT_HISTORY_LIMIT);
    for i in 0..steps {
        for n in names {
            rec.record(
                "default",
                n,
                BootEvent {
                    time: jiff::Timestamp::now(),
                    step: format!("S{i}").as_str().into(),
                    detail: String::new(),
                    bytes: None,
                    boot_id: None,
                },
            );
        }
    }
    let want: Vec<BootStep> = (0..steps)
        .map(|i| format!("S{i}").as_str().into())
        .collect();
    for n in names {
        let mut got = vec![];
        for _ in 0..200 {
            let m: Machine = store.get_obj("default", n).await.unwrap();
            got = m
                .status
                .map(|s| s.boot_history.into_iter().map(|e| e.step).collect())
                .unwrap_or_default();
            if got.len() >= steps {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(got, want, "{n}");
    }
    assert_eq!(rec.dropped(), 0);
    cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn warnings_become_events_at_most_once_a_minute_per_machine_and_reason() {
    let store: Arc<dyn Store> = Arc::new(crate::store::memory::MemoryStore::new());
    let cancel = CancellationToken::new();
    let rec = BootRecorder::spawn(store.clone(), cancel.clone());
    let events = || async {
        store
            .list_obj::<crate::api::Event>(&crate::store::ListOptions::default())
            .await
            .unwrap()
    };
    let settle = || tokio::time::sleep(Duration::from_millis(50));
    rec.warn("default", "m1", "NoBootFile", "no boot file for arm64");
    settle().await;
    let evs = events().await;
    assert_eq!(evs.len(), 1, "{evs:?}");
    assert_eq!(evs[0].type_, "Warning");
    assert_eq!(evs[0].reason, "NoBootFile");
    assert_eq!(evs[0].involved_object.name, "m1");
    // A client repeating its request within the minute writes nothing more.
    for _ in 0..100 {
        rec.warn("default", "m1", "NoBootFile", "no boot file for arm64");
    }
    settle().await;
    let evs = events().await;
    assert_eq!((evs.len(), evs[0].count), (1, 1), "{evs:?}");
    // Another Machine, or another reason, is its own warning.
    rec.warn("default", "m2", "NoBootFile", "no boot file for arm64");
    rec.warn("default", "m1", "OtherReason", "something else");
    settle().await;
    assert_eq!(events().await.len(), 3);
    // After the minute the repeat is recorded, folded into the first.
    tokio::time::advance(WARN_EVERY).await;
    rec.warn("default", "m1", "NoBootFile", "no boot file for arm64");
    settle().await;
    let evs = events().await;
    let first = evs
        .iter()
        .find(|e| e.reason == "NoBootFile" && e.involved_object.name == "m1")
        .unwrap();
    assert_eq!((evs.len(), first.count), (3, 2), "{evs:?}");
    cancel.cancel();
}

fn step(s: &str) -> BootEvent {
    BootEvent {
        time: jiff::Timestamp::now(),
        step: s.into(),
        detail: String::new(),
        bytes: None,
        boot_id: None,
    }
}

#[test]
fn unauthenticated_steps_never_push_authenticated_ones_out_of_the_history() {
    let mut h = vec![step("Script"), step("Ignition"), step("Installed")];
    h.extend((0..100).map(|_| step("Script")));
    trim_history(&mut h, BOOT_HISTORY_LIMIT);
    assert_eq!(h.len(), BOOT_HISTORY_LIMIT);
    let kept: Vec<String> = h.iter().take(2).map(|e| e.step.to_string()).collect();
    assert_eq!(kept, ["Ignition", "Installed"]);
    // Authenticated steps alone over the limit: the oldest of them go.
    let mut h: Vec<BootEvent> = (0..BOOT_HISTORY_LIMIT + 3)
        .map(|_| step("Booted"))
        .collect();
    h.push(step("Script"));
    trim_history(&mut h, BOOT_HISTORY_LIMIT);
    assert_eq!(h.len(), BOOT_HISTORY_LIMIT);
    assert!(h.iter().all(|e| e.step.as_str() == "Booted"));
}

#[test]
fn steps_written_late_take_their_place_in_time() {
    let at = |s: &str, secs: i64| BootEvent {
        time: jiff::Timestamp::from_second(1_700_000_000 + secs).unwrap(),
        ..step(s)
    };
    // `Ignition` was noted with its boot record while the script step that
    // came before it was still in the recorder's queue.
    let mut h = vec![at("DHCPAck", 0)];
    insert_boot_events(&mut h, &[at("Ignition", 5)]);
    insert_boot_events(&mut h, &[at("Script", 3), at("Installed", 9)]);
    let order: Vec<String> = h.iter().map(|e| e.step.to_string()).collect();
    assert_eq!(order, ["DHCPAck", "Script", "Ignition", "Installed"]);
}

#[tokio::test]
async fn a_flood_of_unauthenticated_steps_cannot_drop_a_call_home() {
    let store: Arc<dyn Store> = Arc::new(crate::store::memory::MemoryStore::new());
    store
        .create(
            Kind::Machine,
            json!({
                "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
                "metadata": {"name": "m1"},
                "spec": {"bmc": {"address": "ipmi://10.0.0.5", "credentialsSecretRef": {"name": "bmc"}}}
            }),
        )
        .await
        .unwrap();
    let cancel = CancellationToken::new();
    let rec = BootRecorder::spawn(store.clone(), cancel.clone());
    // More script requests than the queue holds, before the writer runs
    // (this runtime has one thread): the excess is dropped and counted...
    for _ in 0..5000 {
        rec.record("default", "m1", step("Script"));
    }
    assert!(rec.dropped() > 0);
    // ...but the machine's own call-home still gets through.
    rec.record("default", "m1", step("Installed"));
    let mut got = vec![];
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let m: Machine = store.get_obj("default", "m1").await.unwrap();
        got = m
            .status
            .map(|s| {
                s.boot_history
                    .into_iter()
                    .map(|e| e.step.to_string())
                    .collect()
            })
            .unwrap_or_default();
        if got.iter().any(|s| s == "Installed") {
            break;
        }
    }
    assert!(got.iter().any(|s| s == "Installed"), "{got:?}");
    assert!(got.len() <= BOOT_HISTORY_LIMIT);
    cancel.cancel();
}
