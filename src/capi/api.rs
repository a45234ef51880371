//! The Cluster API infrastructure provider's objects, group
//! `infrastructure.cluster.x-k8s.io`, version `v1alpha1`, implementing the
//! v1beta2 provider contract: `MetalherdCluster` (the InfraCluster),
//! `MetalherdMachine` (the InfraMachine), `MetalherdMachineTemplate` and
//! `MetalherdClusterTemplate` (the InfraClusterTemplate, for ClusterClass).
//! Pure data: no I/O here.

// kube-derive's repeated `printcolumn(type_ = ...)` trips this lint by design.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::{LocalObjectReference, MachineOverrides};

/// API group of the provider's objects.
pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// Version of the provider's objects.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of the provider's objects.
pub const API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
/// The contract label Cluster API reads on each CRD: contract v1beta2 is
/// served by our `v1alpha1`.
pub const CONTRACT_LABEL: (&str, &str) = ("cluster.x-k8s.io/v1beta2", "v1alpha1");
/// Cluster API's annotation pausing one object.
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
/// Finalizer a MetalherdMachine carries until its server is released.
pub const FINALIZER: &str = "metalherdmachine.infrastructure.cluster.x-k8s.io";
/// Finalizer a MetalherdCluster carries until its Cluster is gone.
pub const CLUSTER_FINALIZER: &str = "metalherdcluster.infrastructure.cluster.x-k8s.io";
/// Label on a metalherd Machine naming the MetalherdMachine that claimed
/// it (the name; a name longer than a label value is hashed, see
/// [`claim_label_value`]).
pub const CLAIM_LABEL: &str = "infrastructure.cluster.x-k8s.io/metalherdmachine";
/// Label on a released metalherd Machine: the Cluster API owner (the
/// KubeadmControlPlane or MachineDeployment) whose machine ran on it last.
/// A new machine of the same owner picks such a server first and reinstalls
/// it in place (see the README's reuse rule).
pub const RELEASED_FROM_LABEL: &str = "infrastructure.cluster.x-k8s.io/released-from";
/// Prefix of the provider IDs: `metalherd://<namespace>/<machine>`.
pub const PROVIDER_ID_PREFIX: &str = "metalherd://";

/// The provider ID of a metalherd Machine.
pub fn provider_id(namespace: &str, machine: &str) -> String {
    format!("{PROVIDER_ID_PREFIX}{namespace}/{machine}")
}

/// The metalherd Machine a provider ID names: `(namespace, name)`.
pub fn parse_provider_id(id: &str) -> Option<(&str, &str)> {
    let rest = id.strip_prefix(PROVIDER_ID_PREFIX)?;
    let (ns, name) = rest.split_once('/')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains('/')).then_some((ns, name))
}

/// The [`CLAIM_LABEL`] value for a MetalherdMachine name: the name itself
/// when it fits a label value (63 characters), else `h-` and a sha256
/// prefix of it (the full name is in the Machine's claim annotation).
pub fn claim_label_value(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_string();
    }
    use sha2::Digest;
    let d = sha2::Sha256::digest(name.as_bytes());
    let hex: String = d.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("h-{hex}")
}

/// Where the workload cluster's API server answers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub port: i32,
}

impl ApiEndpoint {
    pub fn is_set(&self) -> bool {
        !self.host.is_empty() && self.port > 0
    }
}

/// `status.initialization` of the contract.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Initialization {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

/// The cluster's infrastructure: on bare metal only the control-plane
/// endpoint (a virtual IP or load balancer the site provides, or the first
/// control-plane server's address).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "MetalherdCluster",
    namespaced,
    status = "MetalherdClusterStatus",
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
    ),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned"
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.controlPlaneEndpoint.host"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MetalherdClusterSpec {
    /// `host` and `port` of the workload cluster's API server. Required:
    /// metalherd runs no load balancer.
    #[serde(default)]
    pub control_plane_endpoint: ApiEndpoint,
}

/// The template a ClusterClass stamps MetalherdClusters from (its
/// `spec.infrastructure.templateRef`). metalherd does not reconcile it:
/// Cluster API's topology controller copies `spec.template.spec` into each
/// Cluster's MetalherdCluster, after the class's patches (the endpoint,
/// typically, from a variable).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "MetalherdClusterTemplate",
    namespaced,
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MetalherdClusterTemplateSpec {
    pub template: MetalherdClusterTemplateResource,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetalherdClusterTemplateResource {
    /// Labels and annotations copied onto each MetalherdCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMeta>,
    #[serde(default)]
    pub spec: MetalherdClusterSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetalherdClusterStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Which server a MetalherdMachine runs on and what it installs there.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetalherdMachineSpecFields {
    /// Which metalherd Machines (in the same namespace) may be claimed:
    /// a label selector, as a MachineSet's. Empty selects every Machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_selector: Option<LabelSelector>,
    /// The MachineClass installed on the claimed server (OS image,
    /// containerd, kubelet, files). Its `join` is not used: Cluster API's
    /// bootstrap data joins the node.
    pub class_ref: LocalObjectReference,
    /// Per-machine overrides of the class's versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<MachineOverrides>,
}

/// One server of a Cluster API cluster.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "MetalherdMachine",
    namespaced,
    status = "MetalherdMachineStatus",
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
    ),
    printcolumn(
        name = "Server",
        type_ = "string",
        json_path = ".status.machineRef.name"
    ),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned"
    ),
    printcolumn(name = "ProviderID", type_ = "string", json_path = ".spec.providerID"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MetalherdMachineSpec {
    /// `metalherd://<namespace>/<machine>`: set once a server is claimed,
    /// and how the claim survives `clusterctl move` (status does not).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "providerID"
    )]
    pub provider_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
    #[serde(flatten)]
    pub fields: MetalherdMachineSpecFields,
}

/// One address of the node, as the contract spells it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MachineAddress {
    /// `InternalIP`, `ExternalIP`, `Hostname`, `InternalDNS` or `ExternalDNS`.
    #[serde(rename = "type")]
    pub type_: String,
    pub address: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetalherdMachineStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<MachineAddress>,
    /// The metalherd Machine (server) claimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_ref: Option<LocalObjectReference>,
    /// Whether the claim reused a server released by the same owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The template a KubeadmControlPlane or MachineDeployment stamps
/// MetalherdMachines from.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "MetalherdMachineTemplate",
    namespaced,
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(
        name = "Class",
        type_ = "string",
        json_path = ".spec.template.spec.classRef.name"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MetalherdMachineTemplateSpec {
    pub template: MetalherdMachineTemplateResource,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetalherdMachineTemplateResource {
    /// Labels and annotations copied onto each MetalherdMachine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMeta>,
    pub spec: MetalherdMachineSpecFields,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMeta {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The provider's CRDs with the contract label (and clusterctl's move
/// label), generated once.
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use kube::CustomResourceExt;
    let mut out = vec![
        MetalherdCluster::crd(),
        MetalherdMachine::crd(),
        MetalherdMachineTemplate::crd(),
        MetalherdClusterTemplate::crd(),
    ];
    for crd in &mut out {
        let labels = crd.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.insert(CONTRACT_LABEL.0.into(), CONTRACT_LABEL.1.into());
        labels.insert("clusterctl.cluster.x-k8s.io".into(), String::new());
    }
    out
}

/// [`crds`] as one YAML stream (what `metalherd crds --cluster-api`
/// prints and deploy/cluster-api/crds.yaml holds).
pub fn crds_yaml() -> anyhow::Result<String> {
    crate::api::yaml_documents(&crds())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_round_trip() {
        let id = provider_id("rack1", "u07");
        assert_eq!(id, "metalherd://rack1/u07");
        assert_eq!(parse_provider_id(&id), Some(("rack1", "u07")));
        assert_eq!(parse_provider_id("metal3://rack1/u07"), None);
        assert_eq!(parse_provider_id("metalherd://rack1"), None);
        assert_eq!(parse_provider_id("metalherd:///u07"), None);
        assert_eq!(parse_provider_id("metalherd://a/b/c"), None);
    }

    #[test]
    fn long_names_are_hashed_into_a_label_value() {
        assert_eq!(claim_label_value("cp-abcde"), "cp-abcde");
        let long = "x".repeat(80);
        let v = claim_label_value(&long);
        assert!(v.len() <= 63 && v.starts_with("h-"), "{v}");
        assert_ne!(v, claim_label_value(&"y".repeat(80)));
    }

    #[test]
    fn crds_carry_the_contract_label_and_the_spec_shape() {
        let crds = crds();
        assert_eq!(crds.len(), 4);
        for crd in &crds {
            let labels = crd.metadata.labels.clone().unwrap_or_default();
            assert_eq!(
                labels.get("cluster.x-k8s.io/v1beta2").map(String::as_str),
                Some("v1alpha1")
            );
        }
        let m = serde_json::to_value(&crds[1]).unwrap_or_default();
        let spec = &m["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        for field in [
            "providerID",
            "hostSelector",
            "classRef",
            "overrides",
            "failureDomain",
        ] {
            assert!(spec.get(field).is_some(), "{field} missing: {spec}");
        }
    }
}
