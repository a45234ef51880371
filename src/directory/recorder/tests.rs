//! The boot recorder: steps recorded in a burst for several machines all
//! land, each machine's in the order they were recorded, none dropped; a
//! boot's steps within the hold share one write, or ride along with the
//! boot record's write; a flood cannot drop a call-home.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::api::BootStep;
use crate::store::embedded::EmbeddedStore;
use crate::store::{Store, TypedStore};

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
    let (store, rec, cancel, _writes) = counted().await;
    // More script requests than a machine's held steps keep, before the
    // writer runs (this runtime has one thread): the excess is dropped
    // and counted...
    for _ in 0..5000 {
        rec.record("default", "m1", step("Script"));
    }
    assert!(rec.dropped() > 0);
    // ...but the machine's own call-home still gets through.
    rec.record("default", "m1", step("Installed"));
    let mut got = vec![];
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        got = history(&store).await;
        if got.iter().any(|s| s == "Installed") {
            break;
        }
    }
    assert!(got.iter().any(|s| s == "Installed"), "{got:?}");
    assert!(got.len() <= BOOT_HISTORY_LIMIT);
    cancel.cancel();
}

/// A memory store with Machine `m1`.
async fn store_with_m1() -> Arc<dyn Store> {
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
    store
}

/// A memory store with Machine `m1`, a recorder on it, and a counter of
/// the writes to `m1` (from a watch).
async fn counted() -> (
    Arc<dyn Store>,
    BootRecorder,
    CancellationToken,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    use futures::StreamExt;
    let store = store_with_m1().await;
    let mut w = store
        .watch(
            Kind::Machine,
            &crate::store::ListOptions::namespace("default"),
            None,
        )
        .await
        .unwrap();
    let writes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let n = writes.clone();
    tokio::spawn(async move {
        while let Some(Ok(_)) = w.next().await {
            n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let cancel = CancellationToken::new();
    let rec = BootRecorder::spawn(store.clone(), cancel.clone());
    (store, rec, cancel, writes)
}

async fn history(store: &Arc<dyn Store>) -> Vec<String> {
    let m: Machine = store.get_obj("default", "m1").await.unwrap();
    m.status
        .map(|s| {
            s.boot_history
                .into_iter()
                .map(|e| e.step.to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn a_boots_steps_within_the_hold_go_out_in_one_write() {
    let (store, rec, cancel, writes) = counted().await;
    let start = tokio::time::Instant::now();
    rec.record("default", "m1", step("DHCPAck"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    rec.record("default", "m1", step("TFTP"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    rec.record("default", "m1", step("Script"));
    // Held, not written yet.
    tokio::time::sleep_until(start + HOLD - Duration::from_millis(100)).await;
    assert!(history(&store).await.is_empty());
    tokio::time::sleep_until(start + HOLD + Duration::from_millis(100)).await;
    assert_eq!(history(&store).await, ["DHCPAck", "TFTP", "Script"]);
    assert_eq!(writes.load(std::sync::atomic::Ordering::SeqCst), 1);
    // A step after the write starts a new hold.
    rec.record("default", "m1", step("Script"));
    tokio::time::sleep(HOLD + Duration::from_millis(100)).await;
    assert_eq!(history(&store).await.len(), 4);
    assert_eq!(writes.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(rec.dropped(), 0);
    cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_write_that_takes_the_held_steps_leaves_the_recorder_nothing_to_write() {
    let (store, rec, cancel, writes) = counted().await;
    rec.record("default", "m1", step("DHCPAck"));
    rec.record("default", "m1", step("Script"));
    let taken = rec.take("default", "m1");
    let steps: Vec<String> = taken.iter().map(|e| e.step.to_string()).collect();
    assert_eq!(steps, ["DHCPAck", "Script"]);
    tokio::time::sleep(HOLD * 2).await;
    assert!(history(&store).await.is_empty());
    assert_eq!(writes.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Given back (the caller's write did not happen): written after a hold.
    rec.give_back("default", "m1", taken);
    assert!(rec.take("default", "x").is_empty());
    tokio::time::sleep(HOLD + Duration::from_millis(100)).await;
    assert_eq!(history(&store).await, ["DHCPAck", "Script"]);
    assert_eq!(writes.load(std::sync::atomic::Ordering::SeqCst), 1);
    cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn an_authenticated_step_goes_out_at_once_with_what_is_held() {
    let (store, rec, cancel, writes) = counted().await;
    let start = tokio::time::Instant::now();
    rec.record("default", "m1", step("Script"));
    rec.record("default", "m1", step("Installed"));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(tokio::time::Instant::now() < start + HOLD);
    assert_eq!(history(&store).await, ["Script", "Installed"]);
    // The hold the script step started finds nothing left to write.
    tokio::time::sleep(HOLD * 2).await;
    assert_eq!(writes.load(std::sync::atomic::Ordering::SeqCst), 1);
    cancel.cancel();
}

#[tokio::test]
async fn dropping_every_recorder_writes_what_is_held() {
    let (store, rec, _cancel, _writes) = counted().await;
    rec.record("default", "m1", step("Script"));
    drop(rec);
    let mut got = vec![];
    for _ in 0..200 {
        got = history(&store).await;
        if !got.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(got, ["Script"]);
}

#[tokio::test]
async fn a_shutdown_that_waits_for_the_writer_gets_what_is_held_written() {
    let store = store_with_m1().await;
    let cancel = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    let rec = BootRecorder::spawn_in(store.clone(), cancel.clone(), &mut tasks);
    rec.record("default", "m1", step("Script"));
    // Shutdown begins well within the hold; the app waits for its tasks.
    cancel.cancel();
    while tasks.join_next().await.is_some() {}
    assert_eq!(history(&store).await, ["Script"]);
}
