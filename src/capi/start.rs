//! The provider's loop: a pass over every MetalherdCluster and
//! MetalherdMachine when one of them, a metalherd Machine or a Cluster API
//! Machine changes (watches), and at least every `resync`. One span per
//! object per pass.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::api::Machine;

use super::api::{MetalherdCluster, MetalherdMachine};
use super::reconcile::{self, CapiError};

/// A client for the API server the store uses: the kubeconfig file, or
/// the Pod's in-cluster configuration.
pub async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<Client> {
    crate::cluster::kube::install_crypto_provider();
    let config = match kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::incluster()?,
    };
    Ok(Client::try_from(config)?)
}

fn api<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Wake `notify` on every change of `api`'s objects.
fn watch<K>(api: Api<K>, notify: Arc<Notify>, cancel: CancellationToken)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                ev = stream.next() => match ev {
                    Some(Ok(_)) => notify.notify_one(),
                    // The watcher retries on its own; a pass still runs on resync.
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "cluster-api watch");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    None => return,
                }
            }
        }
    });
}

/// Run the provider until `cancel`.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    resync: Duration,
    cancel: CancellationToken,
) {
    let ns = namespace.as_deref();
    let notify = Arc::new(Notify::new());
    watch(
        api::<MetalherdMachine>(&client, ns),
        notify.clone(),
        cancel.clone(),
    );
    watch(
        api::<MetalherdCluster>(&client, ns),
        notify.clone(),
        cancel.clone(),
    );
    watch(api::<Machine>(&client, ns), notify.clone(), cancel.clone());
    let capi_machines: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &capi_machine()),
        None => Api::all_with(client.clone(), &capi_machine()),
    };
    watch(capi_machines, notify.clone(), cancel.clone());
    tracing::info!(namespace = ?namespace, "cluster-api provider running");
    loop {
        let again = match pass(&client, ns).await {
            Ok(again) => again,
            Err(e) => {
                tracing::warn!(error = %e, "cluster-api pass");
                false
            }
        };
        let wait = if again {
            Duration::from_millis(200)
        } else {
            resync
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = notify.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

fn capi_machine() -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        "v1beta2",
        "Machine",
    ))
}

/// One pass; true when a write lost a race and the pass should run again.
async fn pass(client: &Client, ns: Option<&str>) -> Result<bool, CapiError> {
    let lp = ListParams::default();
    let list_err = |what: &'static str| {
        move |source| CapiError::Api {
            op: "list",
            target: what.into(),
            source,
        }
    };
    let clusters = api::<MetalherdCluster>(client, ns)
        .list(&lp)
        .await
        .map_err(list_err("MetalherdClusters"))?;
    for mc in &clusters.items {
        let span = tracing::info_span!("metalherdcluster", namespace = mc.namespace().unwrap_or_default(), name = %mc.name_any());
        let _g = span.enter();
        if let Err(e) = reconcile::cluster(client, mc).await {
            tracing::warn!(error = %e, "reconcile");
        }
    }
    let machines = api::<MetalherdMachine>(client, ns)
        .list(&lp)
        .await
        .map_err(list_err("MetalherdMachines"))?;
    if machines.items.is_empty() {
        return Ok(false);
    }
    let mut again = false;
    let servers = api::<Machine>(client, ns)
        .list(&lp)
        .await
        .map_err(list_err("Machines"))?;
    for mm in &machines.items {
        let mm_ns = mm.namespace().unwrap_or_else(|| "default".into());
        let span =
            tracing::info_span!("metalherdmachine", namespace = %mm_ns, name = %mm.name_any());
        let _g = span.enter();
        let in_ns: Vec<Machine> = servers
            .items
            .iter()
            .filter(|s| s.namespace().as_deref() == Some(mm_ns.as_str()))
            .cloned()
            .collect();
        match reconcile::machine(client, mm, &in_ns).await {
            Ok(()) => {}
            Err(e) if e.is_conflict() => {
                tracing::debug!(error = %e, "lost a race; again");
                again = true;
                // The servers read are stale now: the next pass reads them again.
                break;
            }
            Err(e) => tracing::warn!(error = %e, "reconcile"),
        }
    }
    Ok(again)
}
