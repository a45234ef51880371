//! Story: a Cluster API user creates a cluster from a ClusterClass whose
//! infrastructure is metalherd's, on the simulated rack
//! (tests/common/sim_rack.rs), with a real kube-apiserver and Cluster API's
//! real core (its topology controller on: `ClusterTopology=true`),
//! kubeadm bootstrap and kubeadm control plane managers.
//!
//! - The class `metal` names a `MetalherdClusterTemplate` (the endpoint's
//!   port), a KubeadmControlPlaneTemplate with a MetalherdMachineTemplate
//!   selecting the `cp` pool, and a worker class `default-worker` on a
//!   MetalherdMachineTemplate selecting the `workers` pool; a required
//!   variable `controlPlaneEndpointHost` is patched into the
//!   MetalherdCluster's `controlPlaneEndpoint.host`.
//! - A Cluster with only a `topology` (the class, a version, a control
//!   plane of one, one worker, the variable): Cluster API's topology
//!   controller stamps the MetalherdCluster from metalherd's template with
//!   the variable's host, metalherd provisions it, and the Cluster carries
//!   that endpoint; the control plane's MetalherdMachine claims the `cp`
//!   server, which installs, and its Machine reaches `Provisioned` with
//!   metalherd's providerID; the worker's MetalherdMachine, cloned from the
//!   class's template, waits for the control plane (no kubelet runs on a
//!   simulated server) and claims nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::capi_objects::{
    INFRA, NS, apply, condition, get, list, provider_metalherd, template, try_apply, wait as poll,
};
use common::cluster_api::ClusterApi;
use common::control_plane::ControlPlane;
use common::rack::put_secret;
use common::sim_rack::{SimRack, bmc_credentials};
use serde_json::{Value, json};

/// A `templateRef` to one of metalherd's kinds.
fn infra_ref(kind: &str, name: &str) -> Value {
    json!({"apiVersion": format!("{INFRA}/v1alpha1"), "kind": kind, "name": name})
}

/// The class and the templates it names.
fn cluster_class() -> Vec<Value> {
    vec![
        json!({"apiVersion": format!("{INFRA}/v1alpha1"), "kind": "MetalherdClusterTemplate",
            "metadata": {"name": "metal", "namespace": NS},
            "spec": {"template": {"spec": {"controlPlaneEndpoint": {"port": 6443}}}}}),
        template("metal-cp", "cp"),
        template("metal-workers", "workers"),
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlaneTemplate",
            "metadata": {"name": "metal-cp", "namespace": NS},
            "spec": {"template": {"spec": {"kubeadmConfigSpec": {"format": "ignition"}}}}}),
        json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
            "metadata": {"name": "metal-workers", "namespace": NS},
            "spec": {"template": {"spec": {"format": "ignition"}}}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass",
            "metadata": {"name": "metal", "namespace": NS},
            "spec": {
                "infrastructure": {"templateRef": infra_ref("MetalherdClusterTemplate", "metal")},
                "controlPlane": {
                    "templateRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
                        "kind": "KubeadmControlPlaneTemplate", "name": "metal-cp"},
                    "machineInfrastructure": {"templateRef": infra_ref("MetalherdMachineTemplate", "metal-cp")}},
                "workers": {"machineDeployments": [{
                    "class": "default-worker",
                    "bootstrap": {"templateRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
                        "kind": "KubeadmConfigTemplate", "name": "metal-workers"}},
                    "infrastructure": {"templateRef": infra_ref("MetalherdMachineTemplate", "metal-workers")}}]},
                "variables": [{"name": "controlPlaneEndpointHost", "required": true,
                    "schema": {"openAPIV3Schema": {"type": "string", "minLength": 1}}}],
                "patches": [{"name": "control-plane-endpoint", "definitions": [{
                    "selector": {"apiVersion": format!("{INFRA}/v1alpha1"), "kind": "MetalherdClusterTemplate",
                        "matchResources": {"infrastructureCluster": true}},
                    "jsonPatches": [{"op": "add", "path": "/spec/template/spec/controlPlaneEndpoint/host",
                        "valueFrom": {"variable": "controlPlaneEndpointHost"}}]}]}]}}),
    ]
}

/// A Cluster made only of a topology over the class.
fn cluster(endpoint: &str) -> Value {
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "c2", "namespace": NS},
        "spec": {
            "clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]}, "services": {"cidrBlocks": ["10.96.0.0/24"]}},
            "topology": {
                "classRef": {"name": "metal"},
                "version": "v1.34.4",
                "controlPlane": {"replicas": 1},
                "workers": {"machineDeployments": [{"class": "default-worker", "name": "md-0", "replicas": 1}]},
                "variables": [{"name": "controlPlaneEndpointHost", "value": endpoint}]}}})
}

#[test]
fn create_a_cluster_from_a_clusterclass() {
    let cp = common::control_plane::shared();
    let capi = ClusterApi::start_with_feature_gates(
        &cp,
        "KubeadmBootstrapFormatIgnition=true,ClusterTopology=true",
    );
    common::capi_objects::install_provider(&cp);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = common::rack::boot_files();
    let boot_port = common::free_port();
    let rack = rt.block_on(SimRack::start(
        "cc",
        2,
        67,
        &format!("http://127.0.0.1:{boot_port}"),
    ));
    let mh = provider_metalherd(&cp, boot_port, &dir.path().join("assets"));
    let logs = || {
        format!(
            "{}\n---- metalherd log tail:\n{}",
            capi.logs_tail(25),
            common::rack::tail(&mh.log(), 40)
        )
    };

    let (user, pw) = bmc_credentials();
    put_secret(&*cp, "bmc", &user, &pw);
    common::rack::put_join_secret(&*cp);
    let mut servers = vec![common::capi_objects::class_with_served_binaries(dir.path())];
    for (i, pool) in ["cp", "workers"].into_iter().enumerate() {
        servers.push(rack.manifest(i, "bmc", json!({"pool": pool})));
    }
    apply(&cp, &servers);
    apply(&cp, &cluster_class());

    // The class's webhook admits a Cluster once the class is reconciled
    // (its variables known): apply until it is admitted.
    let endpoint = rack.machines[0].ip.to_string();
    let applied = Instant::now();
    poll(
        "the Cluster admitted",
        Duration::from_secs(60),
        &logs,
        || {
            try_apply(&cp, &[cluster(&endpoint)])
                .inspect_err(|e| {
                    eprintln!("cluster class: apply refused (tried again): {}", e.trim())
                })
                .ok()
        },
    );

    // The topology controller stamps the MetalherdCluster from metalherd's
    // template, the variable patched in; metalherd provisions it.
    let mc = poll(
        "c2's MetalherdCluster provisioned",
        Duration::from_secs(120),
        &logs,
        || {
            list(&cp, "metalherdclusters", "cluster.x-k8s.io/cluster-name=c2")
                .into_iter()
                .find(|m| m["status"]["initialization"]["provisioned"] == true)
        },
    );
    assert_eq!(
        mc["spec"]["controlPlaneEndpoint"],
        json!({"host": endpoint, "port": 6443}),
        "{mc:#}"
    );
    assert!(
        mc["metadata"]["labels"]
            .get("topology.cluster.x-k8s.io/owned")
            .is_some(),
        "not the topology's: {mc:#}"
    );
    let c = poll(
        "Cluster c2's endpoint and infrastructure provisioned",
        Duration::from_secs(60),
        &logs,
        || {
            let c = get(&cp, "cluster.cluster.x-k8s.io", "c2");
            (c["status"]["initialization"]["infrastructureProvisioned"] == true).then_some(c)
        },
    );
    assert_eq!(
        c["spec"]["controlPlaneEndpoint"]["host"],
        endpoint.as_str(),
        "{c:#}"
    );

    control_plane_provisioned(&cp, &logs, &rack, applied);
    worker_waits(&cp, &logs);
    drop(mh);
    drop(rack);
}

/// The control plane's MetalherdMachine claims the `cp` server, which
/// installs; Cluster API's Machine is Provisioned with the providerID.
fn control_plane_provisioned(
    cp: &ControlPlane,
    logs: &dyn Fn() -> String,
    rack: &SimRack,
    applied: Instant,
) {
    let mm = poll(
        "the control plane's MetalherdMachine provisioned",
        Duration::from_secs(180),
        logs,
        || {
            list(
                cp,
                "metalherdmachines",
                "cluster.x-k8s.io/cluster-name=c2,cluster.x-k8s.io/control-plane",
            )
            .into_iter()
            .find(|m| m["status"]["initialization"]["provisioned"] == true)
        },
    );
    let server = mm["status"]["machineRef"]["name"].as_str().unwrap();
    assert_eq!(server, rack.machines[0].name, "{mm:#}");
    let provider_id = format!("metalherd://{NS}/{server}");
    assert_eq!(mm["spec"]["providerID"], provider_id.as_str(), "{mm:#}");
    assert_eq!(condition(&mm, "Ready").unwrap()["status"], "True", "{mm:#}");
    let owner = mm["metadata"]["ownerReferences"]
        .as_array()
        .and_then(|o| o.iter().find(|r| r["kind"] == "Machine"))
        .and_then(|r| r["name"].as_str())
        .unwrap()
        .to_string();
    let m = poll(
        "the control-plane Machine Provisioned",
        Duration::from_secs(60),
        logs,
        || {
            let m = get(cp, "machines.cluster.x-k8s.io", &owner);
            (m["status"]["phase"] == "Provisioned").then_some(m)
        },
    );
    assert_eq!(m["spec"]["providerID"], provider_id.as_str(), "{m:#}");
    eprintln!(
        "cluster class: kubectl apply of the Cluster to its control-plane Machine Provisioned: {:.1} s",
        applied.elapsed().as_secs_f64()
    );
    let s = get(cp, "machines.metalherd.dev", server);
    assert_eq!(s["status"]["phase"], "Ready", "{s:#}");
}

/// The worker's MetalherdMachine, cloned from the class's template for
/// this Cluster, waits for the control plane and claims nothing.
fn worker_waits(cp: &ControlPlane, logs: &dyn Fn() -> String) {
    let w = poll(
        "the worker's MetalherdMachine",
        Duration::from_secs(60),
        logs,
        || {
            list(
                cp,
                "metalherdmachines",
                "topology.cluster.x-k8s.io/deployment-name=md-0",
            )
            .into_iter()
            .find(|m| condition(m, "Ready").is_some())
        },
    );
    let reason = condition(&w, "Ready").unwrap()["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        ["WaitingForOwner", "WaitingForBootstrapData"].contains(&reason.as_str()),
        "{w:#}"
    );
    assert!(w["status"]["machineRef"].is_null(), "{w:#}");
    // Cloned from the class's template for this Cluster, not the class's own.
    let templates = list(
        cp,
        "metalherdmachinetemplates",
        "cluster.x-k8s.io/cluster-name=c2",
    );
    assert!(
        templates.iter().any(|t| {
            t["spec"]["template"]["spec"]["hostSelector"]["matchLabels"]["pool"] == "workers"
        }),
        "no MetalherdMachineTemplate cloned for c2's workers: {templates:#?}"
    );
    let worker = get(cp, "machines.metalherd.dev", "cc2");
    assert!(
        worker["metadata"]["labels"]
            .get("infrastructure.cluster.x-k8s.io/metalherdmachine")
            .is_none(),
        "{worker:#}"
    );
}
