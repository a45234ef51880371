//! The feed against the in-memory store, with scripted failures: list,
//! watch from the list's version, relist after a watch error.

use serde_json::json;

use super::*;
use crate::store::StoreError;
use crate::store::memory::{Faults, MemoryStore, Op};

fn machine(name: &str) -> Value {
    json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
           "metadata": {"name": name, "namespace": "rack1"},
           "spec": {"bmc": {"address": "ipmi://10.0.0.5", "credentialsSecretRef": {"name": "bmc"}}}})
}

async fn keys_within(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<ObjectKey>,
    n: usize,
) -> Vec<String> {
    let mut out = vec![];
    while out.len() < n {
        match tokio::time::timeout(Duration::from_secs(60), rx.recv()).await {
            Ok(Some(k)) => out.push(k.to_string()),
            _ => break,
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn lists_then_watches_from_the_lists_version_and_relists_on_error() {
    let memory = Arc::new(MemoryStore::new());
    memory.create(Kind::Machine, machine("m1")).await.unwrap();
    memory.create(Kind::Machine, machine("m2")).await.unwrap();
    let first = memory
        .list(Kind::Machine, &ListOptions::default())
        .await
        .unwrap()
        .resource_version;
    let store = Arc::new(Faults::new(memory.clone()));
    let (queue, mut rx) = QueueHandle::channel();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(feed(
        store.clone(),
        Kind::Machine,
        ListOptions::default(),
        own_key(),
        queue,
        Duration::from_secs(1),
        cancel.clone(),
    ));
    let mut keys = keys_within(&mut rx, 2).await;
    let mut m1 = memory.get(Kind::Machine, "rack1", "m1").await.unwrap();
    m1["metadata"]["labels"] = json!({"rack": "r1"});
    memory.update(Kind::Machine, m1).await.unwrap();
    memory.create(Kind::Machine, machine("m3")).await.unwrap();
    memory.delete(Kind::Machine, "rack1", "m2").await.unwrap();
    keys.extend(keys_within(&mut rx, 3).await);
    // The store restarts: the watch is cut off and the first list fails.
    store.fail_next(Op::List, StoreError::Backend("store restarting".into()));
    store.break_watches(|| StoreError::Gone {
        requested: "1".into(),
        oldest: "5".into(),
    });
    keys.extend(keys_within(&mut rx, 2).await);
    assert_eq!(
        keys,
        [
            "rack1/m1", "rack1/m2", "rack1/m1", "rack1/m3", "rack1/m2", "rack1/m1", "rack1/m3"
        ]
    );
    let second = memory
        .list(Kind::Machine, &ListOptions::default())
        .await
        .unwrap()
        .resource_version;
    assert_eq!(store.watched_from(), [Some(first), Some(second)]);
    assert!(keys_within(&mut rx, 1).await.is_empty(), "nothing more");
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_mapping_can_fan_one_object_out_to_several_keys() {
    let store = Arc::new(MemoryStore::new());
    store
        .create(Kind::Machine, machine("workers"))
        .await
        .unwrap();
    let map: KeyMap<ObjectKey> = Arc::new(|v| {
        let class = v
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        vec![
            ObjectKey::new("default", format!("{class}-a")),
            ObjectKey::new("default", format!("{class}-b")),
        ]
    });
    let (queue, mut rx) = QueueHandle::channel();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(feed(
        store,
        Kind::Machine,
        ListOptions::default(),
        map,
        queue,
        Duration::from_secs(1),
        cancel.clone(),
    ));
    assert_eq!(
        keys_within(&mut rx, 2).await,
        ["default/workers-a", "default/workers-b"]
    );
    cancel.cancel();
    task.await.unwrap();
}

#[test]
fn object_key_fills_the_default_namespace() {
    let k = ObjectKey::of(&json!({"metadata": {"name": "m"}}));
    assert_eq!(k.to_string(), "default/m");
}
