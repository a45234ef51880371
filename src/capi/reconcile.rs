//! One pass over a MetalherdMachine or a MetalherdCluster: read what it
//! needs (its Cluster API owner and Cluster, the bootstrap Secret's name,
//! the namespace's metalherd Machines), claim or release a server through
//! [`super::claim`], and write the contract's status. Writes happen only
//! when something changed; a claim is a replace with the server's
//! resourceVersion, so a lost race is a conflict, never a double claim.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::api::Machine;
use crate::store::selector::Selector;

use super::api::{
    CLUSTER_FINALIZER, FINALIZER, Initialization, MachineAddress, MetalherdCluster,
    MetalherdClusterStatus, MetalherdMachine, MetalherdMachineStatus, PAUSED_ANNOTATION,
    provider_id,
};
use super::claim;

/// What went wrong in one pass; the object is tried again later.
#[derive(Debug, thiserror::Error)]
pub enum CapiError {
    #[error("{op} {target}: {source}")]
    Api {
        op: &'static str,
        target: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

impl CapiError {
    fn api(op: &'static str, target: impl Into<String>) -> impl FnOnce(kube::Error) -> CapiError {
        let target = target.into();
        move |source| CapiError::Api { op, target, source }
    }

    /// A write lost to a concurrent one (409): try again at once.
    pub fn is_conflict(&self) -> bool {
        matches!(self, CapiError::Api { source: kube::Error::Api(e), .. } if e.code == 409)
    }
}

fn capi(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind))
}

async fn get_opt<K>(api: &Api<K>, name: &str) -> Result<Option<K>, CapiError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name)
        .await
        .map_err(CapiError::api("get", name.to_string()))
}

/// A condition as the contract wants it (metav1.Condition), keeping the
/// transition time of an unchanged status.
fn condition(
    old: &[Condition],
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let since = old
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(jiff::Timestamp::now()));
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time: since,
    }
}

/// Whether the object or its Cluster is paused.
async fn paused(
    client: &Client,
    ns: &str,
    meta: &kube::core::ObjectMeta,
) -> Result<bool, CapiError> {
    if meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(PAUSED_ANNOTATION))
    {
        return Ok(true);
    }
    let Some(cluster) = meta
        .labels
        .as_ref()
        .and_then(|l| l.get("cluster.x-k8s.io/cluster-name"))
    else {
        return Ok(false);
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &capi("Cluster"));
    Ok(get_opt(&api, cluster)
        .await?
        .is_some_and(|c| c.data["spec"]["paused"].as_bool() == Some(true)))
}

async fn remove_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<(), CapiError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let kept: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| f.as_str() != finalizer)
        .cloned()
        .collect();
    let patch =
        json!({"metadata": {"finalizers": kept, "resourceVersion": obj.resource_version()}});
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(CapiError::api("remove the finalizer of", obj.name_any()))?;
    Ok(())
}

async fn add_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<(), CapiError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if obj.finalizers().iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let mut all = obj.finalizers().to_vec();
    all.push(finalizer.into());
    let patch = json!({"metadata": {"finalizers": all, "resourceVersion": obj.resource_version()}});
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(CapiError::api("add a finalizer to", obj.name_any()))?;
    Ok(())
}

/// Reconcile one MetalherdCluster: provisioned once it names its
/// control-plane endpoint.
pub async fn cluster(client: &Client, mc: &MetalherdCluster) -> Result<(), CapiError> {
    let ns = mc.namespace().unwrap_or_else(|| "default".into());
    let api: Api<MetalherdCluster> = Api::namespaced(client.clone(), &ns);
    if mc.metadata.deletion_timestamp.is_some() {
        return remove_finalizer(&api, mc, CLUSTER_FINALIZER).await;
    }
    let old = mc.status.clone().unwrap_or_default();
    let is_paused = paused(client, &ns, &mc.metadata).await?;
    let generation = mc.metadata.generation;
    let mut conditions = vec![condition(
        &old.conditions,
        "Paused",
        is_paused,
        if is_paused { "Paused" } else { "NotPaused" },
        String::new(),
        generation,
    )];
    if is_paused {
        conditions.extend(
            old.conditions
                .iter()
                .filter(|c| c.type_ != "Paused")
                .cloned(),
        );
        return write_status(
            &api,
            mc,
            mc.status.as_ref(),
            MetalherdClusterStatus { conditions, ..old },
        )
        .await;
    }
    add_finalizer(&api, mc, CLUSTER_FINALIZER).await?;
    let ep = &mc.spec.control_plane_endpoint;
    let ok = ep.is_set();
    conditions.push(condition(
        &old.conditions,
        "Ready",
        ok,
        if ok {
            "Provisioned"
        } else {
            "ControlPlaneEndpointMissing"
        },
        if ok {
            String::new()
        } else {
            "set spec.controlPlaneEndpoint (host and port): metalherd runs no load balancer".into()
        },
        generation,
    ));
    let status = MetalherdClusterStatus {
        initialization: Some(Initialization {
            provisioned: Some(ok),
        }),
        conditions,
    };
    write_status(&api, mc, mc.status.as_ref(), status).await
}

/// The Cluster API owner of a Machine, as the reuse rule names it.
fn owner_of(capi_machine: &DynamicObject) -> Option<String> {
    let labels = capi_machine.metadata.labels.as_ref()?;
    [
        ("cluster.x-k8s.io/control-plane-name", "KubeadmControlPlane"),
        ("cluster.x-k8s.io/deployment-name", "MachineDeployment"),
        ("cluster.x-k8s.io/set-name", "MachineSet"),
    ]
    .iter()
    .find_map(|(label, kind)| labels.get(*label).map(|v| claim::owner_label(kind, v)))
}

/// Reconcile one MetalherdMachine. `servers` are the metalherd Machines of
/// its namespace, read once per pass.
pub async fn machine(
    client: &Client,
    mm: &MetalherdMachine,
    servers: &[Machine],
) -> Result<(), CapiError> {
    let ns = mm.namespace().unwrap_or_else(|| "default".into());
    let name = mm.name_any();
    let api: Api<MetalherdMachine> = Api::namespaced(client.clone(), &ns);
    let server_api: Api<Machine> = Api::namespaced(client.clone(), &ns);
    let owner_ref = mm
        .owner_references()
        .iter()
        .find(|o| o.kind == "Machine" && o.api_version.starts_with("cluster.x-k8s.io/"))
        .cloned();
    let capi_machine = match &owner_ref {
        Some(o) => {
            let a: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &capi("Machine"));
            get_opt(&a, &o.name).await?
        }
        None => None,
    };
    let owner = capi_machine.as_ref().and_then(owner_of);
    let claimed = claim::claimed_by(servers, &name).cloned();

    if mm.metadata.deletion_timestamp.is_some() {
        if let Some(mut server) = claimed {
            let server_name = server.name_any();
            claim::release(&mut server, owner.as_deref());
            server_api
                .replace(&server_name, &PostParams::default(), &server)
                .await
                .map_err(CapiError::api("release server", server_name.clone()))?;
            tracing::info!(server = %server_name, owner = ?owner, "released");
        }
        return remove_finalizer(&api, mm, FINALIZER).await;
    }

    let old = mm.status.clone().unwrap_or_default();
    let generation = mm.metadata.generation;
    let is_paused = paused(client, &ns, &mm.metadata).await?;
    let paused_cond = condition(
        &old.conditions,
        "Paused",
        is_paused,
        if is_paused { "Paused" } else { "NotPaused" },
        String::new(),
        generation,
    );
    if is_paused {
        let mut conditions = vec![paused_cond];
        conditions.extend(
            old.conditions
                .iter()
                .filter(|c| c.type_ != "Paused")
                .cloned(),
        );
        return write_status(
            &api,
            mm,
            mm.status.as_ref(),
            MetalherdMachineStatus { conditions, ..old },
        )
        .await;
    }
    add_finalizer(&api, mm, FINALIZER).await?;

    let not_ready = |reason: &str, message: String| MetalherdMachineStatus {
        initialization: Some(Initialization {
            provisioned: Some(false),
        }),
        conditions: vec![
            paused_cond.clone(),
            condition(&old.conditions, "Ready", false, reason, message, generation),
        ],
        ..old.clone()
    };

    let server = match claimed {
        Some(s) => s,
        None => {
            let Some(cm) = capi_machine.as_ref() else {
                let status = not_ready(
                    "WaitingForOwner",
                    "no Cluster API Machine owns this MetalherdMachine yet".into(),
                );
                return write_status(&api, mm, mm.status.as_ref(), status).await;
            };
            if !cluster_infrastructure_ready(client, &ns, cm).await? {
                let status = not_ready(
                    "WaitingForClusterInfrastructure",
                    "the Cluster's infrastructure is not provisioned yet".into(),
                );
                return write_status(&api, mm, mm.status.as_ref(), status).await;
            }
            let Some(secret) = cm.data["spec"]["bootstrap"]["dataSecretName"].as_str() else {
                let status = not_ready(
                    "WaitingForBootstrapData",
                    "the bootstrap provider has not written the bootstrap Secret yet".into(),
                );
                return write_status(&api, mm, mm.status.as_ref(), status).await;
            };
            let selector = match &mm.spec.fields.host_selector {
                Some(ls) => Selector::from_label_selector(ls)
                    .map_err(|e| CapiError::Invalid(format!("spec.hostSelector: {e}")))?,
                None => Selector::default(),
            };
            let picked = match claim::pick(servers, &selector, owner.as_deref()) {
                Ok(p) => p.clone(),
                Err(short) => {
                    tracing::info!(%short, "waiting for a server");
                    let status = not_ready("NoServerAvailable", short.to_string());
                    return write_status(&api, mm, mm.status.as_ref(), status).await;
                }
            };
            let mut server = picked;
            let server_name = server.name_any();
            let reused = claim::claim(
                &mut server,
                &name,
                &mm.spec.fields,
                secret,
                owner.as_deref(),
            );
            // The resourceVersion read is the precondition: a server claimed
            // by someone else since is a conflict.
            let server = server_api
                .replace(&server_name, &PostParams::default(), &server)
                .await
                .map_err(CapiError::api("claim server", server_name.clone()))?;
            tracing::info!(server = %server_name, reused, "claimed");
            let patch = json!({"spec": {"providerID": provider_id(&ns, &server_name)}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(CapiError::api("set the providerID of", name.clone()))?;
            let status = MetalherdMachineStatus {
                machine_ref: Some(crate::api::LocalObjectReference {
                    name: server_name.clone(),
                }),
                reused: Some(reused),
                addresses: addresses(&server),
                ..not_ready("Provisioning", format!("installing server {server_name}"))
            };
            return write_status(&api, mm, mm.status.as_ref(), status).await;
        }
    };

    let server_name = server.name_any();
    if mm.spec.provider_id.is_none() {
        // Claimed, but the providerID write was lost: write it again.
        let patch = json!({"spec": {"providerID": provider_id(&ns, &server_name)}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(CapiError::api("set the providerID of", name.clone()))?;
    }
    let done = claim::provisioned(&server);
    let phase = server
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .map_or("Registering", |p| p.as_str());
    let mut status = if done {
        MetalherdMachineStatus {
            initialization: Some(Initialization {
                provisioned: Some(true),
            }),
            conditions: vec![
                paused_cond,
                condition(
                    &old.conditions,
                    "Ready",
                    true,
                    "Provisioned",
                    String::new(),
                    generation,
                ),
            ],
            ..old.clone()
        }
    } else {
        let last_error = server
            .status
            .as_ref()
            .and_then(|s| s.last_error.as_ref())
            .map(|e| format!(": {}: {}", e.reason, e.message))
            .unwrap_or_default();
        not_ready(
            "Provisioning",
            format!("server {server_name} is {phase}{last_error}"),
        )
    };
    status.machine_ref = Some(crate::api::LocalObjectReference {
        name: server_name.clone(),
    });
    status.addresses = addresses(&server);
    write_status(&api, mm, mm.status.as_ref(), status).await
}

async fn cluster_infrastructure_ready(
    client: &Client,
    ns: &str,
    cm: &DynamicObject,
) -> Result<bool, CapiError> {
    let Some(cluster) = cm.data["spec"]["clusterName"].as_str() else {
        return Ok(false);
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &capi("Cluster"));
    Ok(get_opt(&api, cluster).await?.is_some_and(|c| {
        c.data["status"]["initialization"]["infrastructureProvisioned"] == Value::Bool(true)
    }))
}

/// The node's addresses: its static address and its name.
fn addresses(server: &Machine) -> Vec<MachineAddress> {
    let mut out = Vec::new();
    if let Some(a) = server
        .spec
        .network
        .as_ref()
        .and_then(|n| n.address.as_deref())
    {
        let ip = a.split_once('/').map_or(a, |(ip, _)| ip);
        out.push(MachineAddress {
            type_: "InternalIP".into(),
            address: ip.into(),
        });
    }
    for a in server.status.iter().flat_map(|s| s.addresses.iter()) {
        if a.type_ == "InternalIP" && !out.iter().any(|o| o.address == a.address) {
            out.push(MachineAddress {
                type_: "InternalIP".into(),
                address: a.address.clone(),
            });
        }
    }
    out.push(MachineAddress {
        type_: "Hostname".into(),
        address: server.name_any(),
    });
    out
}

/// Write `status` through the status subresource, unless it is what the
/// object already has.
async fn write_status<K, S>(
    api: &Api<K>,
    obj: &K,
    old: Option<&S>,
    status: S,
) -> Result<(), CapiError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: PartialEq + serde::Serialize,
{
    if old == Some(&status) {
        return Ok(());
    }
    let patch = json!({"status": status});
    api.patch_status(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(CapiError::api("write the status of", obj.name_any()))?;
    Ok(())
}
