//! The boot recorder: steps recorded in a burst for several machines all
//! land, each machine's in the order they were recorded, none dropped.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::api::{BootStep, Kind, Machine};
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
