//! The feed against a scripted store: list, watch from the list's version,
//! relist after a watch error.

use std::collections::VecDeque;
use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::json;

use super::*;
use crate::store::{Deleted, ObjectList, WatchEvent, WatchStream};

type WatchScript = Result<Vec<Result<WatchEvent, StoreError>>, StoreError>;

/// Answers lists and watches from scripts; any other call is a failure.
#[derive(Default)]
struct ScriptedStore {
    lists: Mutex<VecDeque<Result<ObjectList, StoreError>>>,
    watches: Mutex<VecDeque<WatchScript>>,
    watched_from: Mutex<Vec<Option<u64>>>,
}

fn machine(name: &str) -> Value {
    json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
           "metadata": {"name": name, "namespace": "rack1"}})
}

fn unexpected() -> StoreError {
    StoreError::Backend("unexpected call".into())
}

#[async_trait]
impl Store for ScriptedStore {
    async fn get(&self, _: Kind, _: &str, _: &str) -> Result<Value, StoreError> {
        Err(unexpected())
    }
    async fn list(&self, kind: Kind, _: &ListOptions) -> Result<ObjectList, StoreError> {
        assert_eq!(kind, Kind::Machine);
        self.lists
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Err(unexpected()))
    }
    async fn create(&self, _: Kind, _: Value) -> Result<Value, StoreError> {
        Err(unexpected())
    }
    async fn update(&self, _: Kind, _: Value) -> Result<Value, StoreError> {
        Err(unexpected())
    }
    async fn update_status(&self, _: Kind, _: Value) -> Result<Value, StoreError> {
        Err(unexpected())
    }
    async fn delete(&self, _: Kind, _: &str, _: &str) -> Result<Deleted, StoreError> {
        Err(unexpected())
    }
    async fn watch(
        &self,
        _: Kind,
        _: &ListOptions,
        from: Option<u64>,
    ) -> Result<WatchStream, StoreError> {
        self.watched_from.lock().unwrap().push(from);
        let script = self.watches.lock().unwrap().pop_front();
        match script {
            Some(Ok(events)) => Ok(Box::pin(futures::stream::iter(events))),
            Some(Err(e)) => Err(e),
            // No more scripts: a watch that stays open with nothing to say.
            None => Ok(Box::pin(futures::stream::pending())),
        }
    }
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
    let store = Arc::new(ScriptedStore::default());
    store.lists.lock().unwrap().extend([
        Ok(ObjectList {
            items: vec![machine("m1"), machine("m2")],
            resource_version: 10,
        }),
        Err(StoreError::Backend("store restarting".into())),
        Ok(ObjectList {
            items: vec![machine("m1"), machine("m3")],
            resource_version: 20,
        }),
    ]);
    store.watches.lock().unwrap().extend([Ok(vec![
        Ok(WatchEvent::Modified(machine("m1"))),
        Ok(WatchEvent::Added(machine("m3"))),
        Ok(WatchEvent::Deleted(machine("m2"))),
        Err(StoreError::Gone {
            requested: 10,
            oldest: 15,
        }),
    ])]);
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
    let keys = keys_within(&mut rx, 7).await;
    assert_eq!(
        keys,
        [
            "rack1/m1", "rack1/m2", "rack1/m1", "rack1/m3", "rack1/m2", "rack1/m1", "rack1/m3"
        ]
    );
    assert_eq!(*store.watched_from.lock().unwrap(), [Some(10), Some(20)]);
    assert!(keys_within(&mut rx, 1).await.is_empty(), "nothing more");
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_mapping_can_fan_one_object_out_to_several_keys() {
    let store = Arc::new(ScriptedStore::default());
    store.lists.lock().unwrap().push_back(Ok(ObjectList {
        items: vec![json!({"metadata": {"name": "workers"}})],
        resource_version: 1,
    }));
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
