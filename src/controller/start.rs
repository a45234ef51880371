//! Starting the Machine controller inside `serve`: build the reconciler
//! (BMC connector over the store, target cluster from the kubeconfig when
//! one is configured), rebuild the boot-storm table from status (and let a
//! freed slot wake its next waiter through the runner's queue), feed the
//! runner from Machine watches and from MachineClass changes (each class
//! change asks for the Machines that use it), and run until cancelled.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::config::ControllerSettings;
use super::feed::{ObjectKey, feed, own_key};
use super::machine::MachineReconciler;
use super::runner::{QueueHandle, Runner, RunnerMetrics};
use super::storm::BootSlots;
use crate::api::Kind;
use crate::bmc::{BmcConnector, StoreConnector};
use crate::cluster::TargetCluster;
use crate::store::{ListOptions, Store};

/// Wait before listing again after a watch fails.
const RELIST: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("controller: target cluster: {0}")]
    Cluster(#[from] crate::cluster::ClusterError),
    #[error("controller: rebuilding boot slots: {0}")]
    Store(#[from] crate::store::StoreError),
}

/// Start the Machine controller's tasks in `tasks`.
// Each argument is one independent dependency of the controller; a struct
// would only rename them.
#[allow(clippy::too_many_arguments)]
pub async fn start_machine_controller(
    store: Arc<dyn Store>,
    settings: ControllerSettings,
    quirks: Arc<crate::bmc::quirks::QuirkTable>,
    metrics: RunnerMetrics,
    releaser: Option<Arc<dyn crate::controller::machine::execute::AddressReleaser>>,
    firmware: Option<Arc<dyn crate::controller::machine::execute::FirmwareImages>>,
    fence: Option<tokio::sync::watch::Receiver<bool>>,
    tasks: &mut JoinSet<()>,
    cancel: CancellationToken,
) -> Result<(), StartError> {
    let cluster: Option<Arc<dyn TargetCluster>> = match &settings.kubeconfig {
        Some(path) => Some(Arc::new(
            crate::cluster::kube::KubeCluster::from_kubeconfig(path).await?,
        )),
        None => None,
    };
    let mut connector: Arc<dyn BmcConnector> =
        Arc::new(StoreConnector::new(store.clone(), settings.bmc_timing).with_quirks(quirks));
    // With leader election, no BMC action once the Lease is lost.
    if let Some(leading) = fence {
        connector = Arc::new(crate::leader::FencedConnector::new(connector, leading));
    }
    let slots = BootSlots::new(settings.boot_storm_limit);
    let reconciler = MachineReconciler {
        store: store.clone(),
        connector,
        cluster,
        slots: slots.clone(),
        limits: settings.limits,
        drain: settings.drain,
        releaser,
        firmware,
    };
    let restored = reconciler.restore_slots().await?;
    tracing::info!(
        restored,
        limit = settings.boot_storm_limit,
        "machine controller starting"
    );
    let runner = Runner::new(Arc::new(reconciler), settings.runner).with_metrics(metrics);
    let queue = runner.handle();
    // A freed boot slot asks for its next waiter's reconcile at once.
    slots.set_waker(queue.clone());
    tasks.spawn(feed(
        store.clone(),
        Kind::Machine,
        ListOptions::default(),
        own_key(),
        queue.clone(),
        RELIST,
        cancel.clone(),
    ));
    tasks.spawn(follow_classes(store, queue, cancel.clone()));
    tasks.spawn(runner.run(cancel));
    Ok(())
}

/// Ask for every Machine that references a changed MachineClass.
async fn follow_classes(
    store: Arc<dyn Store>,
    machines: QueueHandle<ObjectKey>,
    cancel: CancellationToken,
) {
    let (classes, mut rx) = QueueHandle::channel();
    let watch = tokio::spawn(feed(
        store.clone(),
        Kind::MachineClass,
        ListOptions::default(),
        own_key(),
        classes,
        RELIST,
        cancel.clone(),
    ));
    loop {
        let class = tokio::select! {
            _ = cancel.cancelled() => break,
            k = rx.recv() => match k { Some(k) => k, None => break },
        };
        let opts = ListOptions::namespace(&class.namespace);
        let Ok(list) = store.list(Kind::Machine, &opts).await else {
            continue;
        };
        for m in &list.items {
            let uses = m.pointer("/spec/classRef/name").and_then(Value::as_str)
                == Some(class.name.as_str());
            if uses {
                machines.enqueue(ObjectKey::of(m));
            }
        }
    }
    watch.abort();
}
