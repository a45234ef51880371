//! The runner fed from the real embedded store: every Machine is
//! reconciled after the initial list, a change is reconciled again, and the
//! reconciler reads current state itself (level-triggered).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::api::{BmcSpec, Kind, Machine, MachineSpec, SecretReference};
use crate::controller::feed::{ObjectKey, feed, own_key};
use crate::controller::runner::{Reconciler, Requeue, Runner, RunnerConfig};
use crate::store::embedded::EmbeddedStore;
use crate::store::{ListOptions, Store, StoreError, TypedStore};

/// Records the `spec.online` it read for each machine, last read wins.
struct Recorder {
    store: Arc<dyn Store>,
    seen: Mutex<BTreeMap<String, Vec<bool>>>,
}

impl Reconciler for Recorder {
    type Key = ObjectKey;
    type Error = StoreError;
    fn name(&self) -> &'static str {
        "recorder"
    }
    async fn reconcile(&self, key: &ObjectKey) -> Result<Requeue, StoreError> {
        let m: Machine = match self.store.get_obj(&key.namespace, &key.name).await {
            Ok(m) => m,
            Err(e) if e.is_not_found() => return Ok(Requeue::Forget),
            Err(e) => return Err(e),
        };
        self.seen
            .lock()
            .unwrap()
            .entry(key.to_string())
            .or_default()
            .push(m.spec.online);
        Ok(Requeue::Periodic)
    }
}

fn machine(name: &str, online: bool) -> Machine {
    let mut m = Machine::new(
        name,
        MachineSpec {
            bmc: BmcSpec {
                address: "ipmi://127.0.0.1:623".into(),
                credentials_secret_ref: SecretReference {
                    name: "bmc".into(),
                    key: None,
                },
                ..BmcSpec::default()
            },
            online,
            ..MachineSpec::default()
        },
    );
    m.metadata.namespace = Some("default".into());
    m
}

async fn until(what: &str, f: impl Fn() -> bool) {
    // A guard against hanging forever, not a performance threshold.
    for _ in 0..1000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what} never happened");
}

#[tokio::test]
async fn machines_in_the_store_are_reconciled_and_changes_again() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&dir.path().join("s.redb")).unwrap());
    for n in ["a", "b"] {
        store.create_obj(&machine(n, false)).await.unwrap();
    }
    let rec = Arc::new(Recorder {
        store: store.clone(),
        seen: Mutex::default(),
    });
    let runner = Runner::new(rec.clone(), RunnerConfig::default());
    let cancel = CancellationToken::new();
    let feeder = tokio::spawn(feed(
        store.clone(),
        Kind::Machine,
        ListOptions::default(),
        own_key(),
        runner.handle(),
        Duration::from_millis(100),
        cancel.clone(),
    ));
    let run = tokio::spawn(runner.run(cancel.clone()));

    let seen = |k: &str| rec.seen.lock().unwrap().get(k).cloned().unwrap_or_default();
    until("both listed machines reconciled", || {
        !seen("default/a").is_empty() && !seen("default/b").is_empty()
    })
    .await;

    let mut a: Machine = store.get_obj("default", "a").await.unwrap();
    a.spec.online = true;
    store.update_obj(&a).await.unwrap();
    store.create_obj(&machine("c", true)).await.unwrap();
    until("the change and the new machine reconciled", || {
        seen("default/a").last() == Some(&true) && seen("default/c") == [true]
    })
    .await;

    cancel.cancel();
    run.await.unwrap();
    feeder.await.unwrap();
}
