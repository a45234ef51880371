//! Starting the MachineSet controller inside `serve`: a runner fed by
//! MachineSet watches, by Machine changes (a Machine concerns the set that
//! claimed it, and every set while it is unclaimed, since it may join a
//! pool; the same reflector keeps the reconciler's [`MachineCache`], and
//! takes each change into it before it wakes a set), and by MachineClass
//! changes (a class concerns the sets whose template names it: a new class
//! version is a new revision of each).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::cache::MachineCache;
use super::probe::HttpProber;
use super::reconcile::MachineSetReconciler;
use crate::api::Kind;
use crate::api::machine_set::SET_LABEL;
use crate::controller::feed::{KeyMap, ObjectKey, feed, own_key};
use crate::controller::runner::{QueueHandle, Runner, RunnerConfig, RunnerMetrics};
use crate::store::{ListOptions, Store};

const RELIST: Duration = Duration::from_secs(1);

/// Start the MachineSet controller's tasks in `tasks`.
pub fn start_machine_set_controller(
    store: Arc<dyn Store>,
    cluster_configured: bool,
    metrics: RunnerMetrics,
    tasks: &mut JoinSet<()>,
    cancel: CancellationToken,
) {
    let machines = MachineCache::new();
    let reconciler = MachineSetReconciler {
        store: store.clone(),
        machines: machines.clone(),
        prober: Arc::new(HttpProber::new(Duration::from_secs(5))),
        cluster_configured,
    };
    let config = RunnerConfig {
        resync: Duration::from_secs(30),
        ..RunnerConfig::default()
    };
    let runner = Runner::new(Arc::new(reconciler), config).with_metrics(metrics);
    let queue = runner.handle();
    tasks.spawn(feed(
        store.clone(),
        Kind::MachineSet,
        ListOptions::default(),
        own_key(),
        queue.clone(),
        RELIST,
        cancel.clone(),
    ));
    let (related, rx) = QueueHandle::channel();
    let machine_keys = related_key(Kind::Machine);
    let wake = related.clone();
    tasks.spawn(
        machines.run(store.clone(), RELIST, cancel.clone(), move |v| {
            machine_keys(v).into_iter().for_each(|k| wake.enqueue(k))
        }),
    );
    tasks.spawn(feed(
        store.clone(),
        Kind::MachineClass,
        ListOptions::default(),
        related_key(Kind::MachineClass),
        related,
        RELIST,
        cancel.clone(),
    ));
    tasks.spawn(fan_out(store, rx, queue, cancel.clone()));
    tasks.spawn(runner.run(cancel));
}

/// What a changed Machine or MachineClass concerns: `(kind, key)` encoded
/// in the key's name so one channel carries both.
fn related_key(kind: Kind) -> KeyMap<ObjectKey> {
    Arc::new(move |v: &Value| {
        let k = ObjectKey::of(v);
        let claimed = v
            .pointer("/metadata/labels")
            .and_then(|l| l.get(SET_LABEL))
            .and_then(Value::as_str);
        match (kind, claimed) {
            (Kind::Machine, Some(set)) => vec![ObjectKey::new(k.namespace, format!("set/{set}"))],
            (Kind::Machine, None) => vec![ObjectKey::new(k.namespace, "any".to_string())],
            (_, _) => vec![ObjectKey::new(k.namespace, format!("class/{}", k.name))],
        }
    })
}

/// Turn related changes into set keys.
async fn fan_out(
    store: Arc<dyn Store>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<ObjectKey>,
    sets: QueueHandle<ObjectKey>,
    cancel: CancellationToken,
) {
    loop {
        let k = tokio::select! {
            _ = cancel.cancelled() => break,
            k = rx.recv() => match k { Some(k) => k, None => break },
        };
        if let Some(set) = k.name.strip_prefix("set/") {
            sets.enqueue(ObjectKey::new(k.namespace.clone(), set));
            continue;
        }
        let class = k.name.strip_prefix("class/");
        let Ok(list) = store
            .list(Kind::MachineSet, &ListOptions::namespace(&k.namespace))
            .await
        else {
            continue;
        };
        for s in &list.items {
            let uses = s
                .pointer("/spec/template/classRef/name")
                .and_then(Value::as_str);
            if class.is_none() || uses == class {
                sets.enqueue(ObjectKey::of(s));
            }
        }
    }
}
