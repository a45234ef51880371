//! The Machine cache: what the reflector brings in (list, changes,
//! deletions, a relist), the set's own writes kept against late watch
//! events, and the whole loop against the in-memory store with a failing
//! list and a broken watch.

use serde_json::json;

use super::*;
use crate::store::StoreError;
use crate::store::memory::{Faults, MemoryStore, Op};

fn machine(ns: &str, name: &str, rv: &str, class: &str) -> Value {
    json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
           "metadata": {"name": name, "namespace": ns, "resourceVersion": rv},
           "spec": {"bmc": {"address": "ipmi://10.0.0.5", "credentialsSecretRef": {"name": "bmc"}},
                    "classRef": {"name": class}}})
}

fn parsed(v: Value) -> Machine {
    serde_json::from_value(v).unwrap()
}

/// name → (resourceVersion, class) of a namespace's cached Machines.
fn view(c: &MachineCache, ns: &str) -> Vec<(String, String, String)> {
    c.machines(ns)
        .iter()
        .map(|m| {
            (
                m.metadata.name.clone().unwrap(),
                m.metadata.resource_version.clone().unwrap(),
                m.spec.class_ref.as_ref().unwrap().name.clone(),
            )
        })
        .collect()
}

fn row(name: &str, rv: &str, class: &str) -> (String, String, String) {
    (name.into(), rv.into(), class.into())
}

fn changed(ev: WatchEvent) -> Reflected {
    Reflected::Changed(ev)
}

#[test]
fn a_list_then_changes_build_the_view_per_namespace() {
    let c = MachineCache::new();
    assert!(!c.is_synced());
    c.apply(&Reflected::Listed(vec![
        machine("rack1", "m1", "3", "a"),
        machine("rack1", "m2", "4", "a"),
        machine("rack2", "m1", "5", "a"),
    ]));
    assert!(c.is_synced());
    assert_eq!(
        view(&c, "rack1"),
        [row("m1", "3", "a"), row("m2", "4", "a")]
    );
    assert_eq!(view(&c, "rack2"), [row("m1", "5", "a")]);
    assert!(view(&c, "rack3").is_empty());

    c.apply(&changed(WatchEvent::Modified(machine(
        "rack1", "m1", "6", "b",
    ))));
    c.apply(&changed(WatchEvent::Added(machine(
        "rack1", "m3", "7", "a",
    ))));
    c.apply(&changed(WatchEvent::Deleted(machine(
        "rack1", "m2", "8", "a",
    ))));
    assert_eq!(
        view(&c, "rack1"),
        [row("m1", "6", "b"), row("m3", "7", "a")]
    );
    assert_eq!(view(&c, "rack2"), [row("m1", "5", "a")]);
}

#[test]
fn an_own_write_is_not_undone_by_a_late_watch_event_or_a_relist() {
    let c = MachineCache::new();
    c.apply(&Reflected::Listed(vec![machine("rack1", "m1", "3", "a")]));
    // The set pinned m1 (the store answered with version 9) before the
    // watch brought the change that preceded it.
    c.put(parsed(machine("rack1", "m1", "9", "pinned")));
    c.apply(&changed(WatchEvent::Modified(machine(
        "rack1", "m1", "5", "a",
    ))));
    assert_eq!(view(&c, "rack1"), [row("m1", "9", "pinned")]);
    // A relist read before the write does not undo it either; a relist is
    // complete, so a machine it does not have is gone.
    c.put(parsed(machine("rack1", "m2", "10", "a")));
    c.apply(&Reflected::Listed(vec![machine("rack1", "m1", "5", "a")]));
    assert_eq!(view(&c, "rack1"), [row("m1", "9", "pinned")]);
    // The watch catches up, then moves past the write.
    c.apply(&changed(WatchEvent::Modified(machine(
        "rack1", "m1", "9", "pinned",
    ))));
    c.apply(&changed(WatchEvent::Modified(machine(
        "rack1", "m1", "12", "c",
    ))));
    assert_eq!(view(&c, "rack1"), [row("m1", "12", "c")]);
    // A stale deletion does not remove a machine created again since.
    c.apply(&changed(WatchEvent::Deleted(machine(
        "rack1", "m1", "11", "c",
    ))));
    assert_eq!(view(&c, "rack1"), [row("m1", "12", "c")]);
    c.apply(&changed(WatchEvent::Deleted(machine(
        "rack1", "m1", "12", "c",
    ))));
    assert!(view(&c, "rack1").is_empty());
    // The answer to a write made before the deletion, taken after it, does
    // not bring the machine back; a machine created again does come back.
    c.put(parsed(machine("rack1", "m1", "12", "c")));
    assert!(view(&c, "rack1").is_empty());
    c.apply(&changed(WatchEvent::Added(machine(
        "rack1", "m1", "13", "d",
    ))));
    assert_eq!(view(&c, "rack1"), [row("m1", "13", "d")]);
}

#[test]
fn versions_that_are_not_numbers_take_the_latest_arrival() {
    let c = MachineCache::new();
    c.apply(&Reflected::Listed(vec![machine("rack1", "m1", "x7", "a")]));
    c.put(parsed(machine("rack1", "m1", "x9", "b")));
    c.apply(&changed(WatchEvent::Modified(machine(
        "rack1", "m1", "x8", "c",
    ))));
    assert_eq!(view(&c, "rack1"), [row("m1", "x8", "c")]);
}

#[test]
fn an_unreadable_machine_is_left_out_not_fatal() {
    let c = MachineCache::new();
    let mut bad = machine("rack1", "m2", "4", "a");
    bad["spec"] = json!("not a spec");
    c.apply(&Reflected::Listed(vec![
        machine("rack1", "m1", "3", "a"),
        bad.clone(),
    ]));
    c.apply(&changed(WatchEvent::Modified(bad)));
    assert!(c.is_synced());
    assert_eq!(view(&c, "rack1"), [row("m1", "3", "a")]);
}

async fn until(c: &MachineCache, ns: &str, want: &[(String, String, String)]) {
    for _ in 0..600 {
        if view(c, ns) == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("cache never showed {want:?}: {:?}", view(c, ns));
}

#[tokio::test(start_paused = true)]
async fn follows_the_store_waits_for_its_first_list_and_relists_after_errors() {
    let memory = Arc::new(MemoryStore::new());
    let store = Arc::new(Faults::new(memory.clone()));
    // The store is not answering lists at first.
    store.fail_next(Op::List, StoreError::Backend("store starting".into()));
    let create = |name: &str| {
        let mut v = machine("rack1", name, "", "a");
        v["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        memory.create(Kind::Machine, v)
    };
    create("m1").await.unwrap();
    let c = MachineCache::new();
    let (tx, mut woken) = tokio::sync::mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(c.clone().run(
        store.clone(),
        Duration::from_secs(1),
        cancel.clone(),
        move |v| {
            let _ = tx.send(key_of(v).1);
        },
    ));
    assert!(!c.is_synced(), "synced before any list answered");
    c.synced().await;
    let rv = |name: &str| {
        let v = c.get("rack1", name).unwrap();
        v.metadata.resource_version.clone().unwrap()
    };
    assert_eq!(view(&c, "rack1"), [row("m1", &rv("m1"), "a")]);
    // Whoever is woken by a change finds it in the cache already.
    assert_eq!(woken.recv().await.as_deref(), Some("m1"));

    create("m2").await.unwrap();
    assert_eq!(woken.recv().await.as_deref(), Some("m2"));
    assert_eq!(view(&c, "rack1").len(), 2, "m2 not in the cache when woken");

    // The watch breaks and the next list fails: changes made meanwhile
    // arrive with the list after.
    store.fail_next(Op::List, StoreError::Backend("store restarting".into()));
    store.break_watches(|| StoreError::Gone {
        requested: "1".into(),
        oldest: "5".into(),
    });
    memory.delete(Kind::Machine, "rack1", "m1").await.unwrap();
    create("m3").await.unwrap();
    until(
        &c,
        "rack1",
        &[row("m2", &rv("m2"), "a"), {
            let m3 = memory.get(Kind::Machine, "rack1", "m3").await.unwrap();
            row("m3", resource_version_of(&m3).unwrap(), "a")
        }],
    )
    .await;
    assert_eq!(store.watched_from().len(), 2, "one relist");
    cancel.cancel();
    task.await.unwrap();
}
