//! Story: a Cluster API user creates a whole cluster, control plane
//! included, on metalherd's servers: a Cluster with a KubeadmControlPlane of
//! one machine and a MachineDeployment of two workers comes up on three lab
//! VMs (tests/common/lab_nodes.rs: UEFI QEMU VMs, Redfish BMCs from
//! sushy-tools' libvirt driver, the Debian node image with the control-plane
//! images preloaded), and the workload cluster's `kubectl get nodes` shows
//! three Ready nodes.
//!
//! The lab's kube-apiserver is Cluster API's management cluster. Cluster
//! API v1.14.2's core, kubeadm bootstrap (CABPK) and kubeadm control plane
//! (KCP) managers run as processes in the rack's namespace
//! (tests/common/cluster_api.rs), metalherd runs `serve --store kubernetes`
//! there with `controller.clusterApi: true` and no target cluster (the
//! workload cluster does not exist before its control plane does: each
//! server's `booted` call-home, sent once `kubeadm.service` ran, marks it
//! provisioned; Cluster API finds the Nodes in the workload cluster
//! itself, through the kubeconfig KCP made). CoreDNS's two replicas go
//! Ready and answer for the `kubernetes` Service's name.
//!
//! The three VMs are declared with no class (Available); vm1 carries
//! `role: control-plane`, vm2 and vm3 `role: worker`, and the two
//! MetalherdMachineTemplates select by that label, so the control-plane
//! endpoint is vm1's static address, 10.89.0.11:6443, known before the
//! Cluster is applied. KCP's bootstrap data (`format: ignition`) runs
//! `kubeadm init` on vm1 from the preloaded images (no registry; vm1 has
//! two vCPUs, the workers one; kubeadm waits up to 20 minutes for the
//! emulated control plane's components, the controller manager and the
//! scheduler hold their leases through slow answers); the workers' runs
//! `kubeadm join` against it. The time from applying
//! the Cluster to three Ready nodes is printed (BENCHMARKS.md).
//! Runs QEMU: take /tmp/metalherd-lab.lock around `cargo test`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::capi_lab::{
    apply, claim_of, cluster_initialized, declare_pool, emulated_kubeadm_config_spec, get, list,
    metalherd_without_target, node_ready, start_cluster_api, workload, workload_kubeconfig,
    workload_list,
};
use common::capi_objects::{INFRA, NS, condition, infra, kubeadm_machine_deployment};
use common::cluster_api::ClusterApi;
use common::lab::{LAB_LOCK, Lab};
use common::lab_nodes::NODE_READY_TIMEOUT;
use serde_json::{Value, json};

/// vm1's static address: the workload cluster's control-plane endpoint.
const ENDPOINT: &str = "10.89.0.11";
/// The Kubernetes version the cluster runs (the node image's images).
const VERSION: &str = "v1.34.4";
const NODES: [&str; 3] = ["vm1", "vm2", "vm3"];

fn wait<T>(
    what: &str,
    timeout: Duration,
    lab: &Lab,
    capi: &ClusterApi,
    f: impl FnMut() -> Option<T>,
) -> T {
    common::capi_lab::wait(what, timeout, lab, capi, NODES.len(), f)
}

/// The objects a Cluster API user applies: the cluster, its control plane
/// of one (KubeadmControlPlane) and its workers (a MachineDeployment of
/// two), each on a MetalherdMachineTemplate selecting by role.
fn cluster_objects() -> Vec<Value> {
    // The workers' join has the control plane's patience, without its
    // patches (those are the control plane's static pods').
    let mut join = emulated_kubeadm_config_spec()["joinConfiguration"].take();
    join.as_object_mut().unwrap().remove("patches");
    let server_template = |name: &str, role: &str| {
        json!({"apiVersion": format!("{INFRA}/v1alpha1"), "kind": "MetalherdMachineTemplate",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"template": {"spec": {
                "hostSelector": {"matchLabels": {"rack": "lab", "role": role}},
                "classRef": {"name": "lab-node"}}}}})
    };
    vec![
        json!({"apiVersion": format!("{INFRA}/v1alpha1"), "kind": "MetalherdCluster",
            "metadata": {"name": "c1", "namespace": NS},
            "spec": {"controlPlaneEndpoint": {"host": ENDPOINT, "port": 6443}}}),
        server_template("c1-cp", "control-plane"),
        server_template("c1-md", "worker"),
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": {"name": "c1-cp", "namespace": NS},
            "spec": {"replicas": 1, "version": VERSION,
                "machineTemplate": {"spec": {
                    "infrastructureRef": infra("MetalherdMachineTemplate", "c1-cp")}},
                "kubeadmConfigSpec": emulated_kubeadm_config_spec()}}),
        json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
            "metadata": {"name": "c1-md", "namespace": NS},
            "spec": {"template": {"spec": {"format": "ignition",
                "joinConfiguration": join}}}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": NS},
            "spec": {
                "clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]},
                    "services": {"cidrBlocks": ["10.96.0.0/24"]}, "serviceDomain": "cluster.local"},
                "infrastructureRef": infra("MetalherdCluster", "c1"),
                "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io",
                    "kind": "KubeadmControlPlane", "name": "c1-cp"}}}),
        kubeadm_machine_deployment("c1", 2, VERSION),
    ]
}

#[test]
fn create_a_cluster_with_cluster_api() {
    let _guard = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let t_lab = Instant::now();
    let mut lab = Lab::up_nodes_control_plane_first(NODES.len());
    let run = lab.run.clone();
    eprintln!(
        "lab: rack of {}, kube-apiserver and mirror up in {:?}",
        NODES.len(),
        t_lab.elapsed()
    );
    let capi = start_cluster_api(&lab, &[]);

    let _metalherd = metalherd_without_target(&mut lab);

    declare_pool(
        &lab,
        &[
            ("vm1", "role: control-plane"),
            ("vm2", "role: worker"),
            ("vm3", "role: worker"),
        ],
    );
    wait(
        "vm1, vm2 and vm3 Available",
        Duration::from_secs(300),
        &lab,
        &capi,
        || {
            NODES
                .iter()
                .all(|n| get(&lab, "machines.metalherd.dev", n)["status"]["phase"] == "Available")
                .then_some(())
        },
    );

    let applied = Instant::now();
    apply(&lab, &cluster_objects());
    wait(
        "Cluster c1's infrastructure provisioned",
        Duration::from_secs(120),
        &lab,
        &capi,
        || cluster_initialized(&lab, "c1", &["infrastructureProvisioned"]).then_some(()),
    );
    let cp = wait(
        "KCP's MetalherdMachine claims vm1",
        Duration::from_secs(300),
        &lab,
        &capi,
        || claim_of(&lab, "vm1"),
    );
    // KCP names its Machines (and their infrastructure) after itself.
    let owner = cp["metadata"]["ownerReferences"]
        .as_array()
        .and_then(|o| o.iter().find(|r| r["kind"] == "Machine"))
        .map(|r| r["name"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default();
    assert!(
        owner.starts_with("c1-cp-"),
        "vm1 went to a machine that is not the control plane's: {cp:#}"
    );

    // kubeadm init on vm1: the install, the first boot, the static pods
    // from the preloaded images, then KCP reaches the new API server.
    wait(
        "Cluster c1's control plane initialized (kubeadm init on vm1)",
        NODE_READY_TIMEOUT,
        &lab,
        &capi,
        || cluster_initialized(&lab, "c1", &["controlPlaneInitialized"]).then_some(()),
    );
    let kubeconfig_path = workload_kubeconfig(&lab, "c1", &format!("https://{ENDPOINT}:6443"));

    // The workers join the new control plane; three Ready nodes.
    let nodes = wait(
        "the workload cluster's three Nodes Ready",
        NODE_READY_TIMEOUT,
        &lab,
        &capi,
        || {
            let nodes = workload_list(&lab, &kubeconfig_path, &["nodes"]);
            (nodes.len() == NODES.len() && nodes.iter().all(node_ready)).then_some(nodes)
        },
    );
    let to_ready = applied.elapsed();
    let (_, table, _) = workload(&lab, &kubeconfig_path, &["get", "nodes", "-o", "wide"]);
    eprintln!("lab: the workload cluster's kubectl get nodes:\n{table}");
    for name in NODES {
        let node = nodes
            .iter()
            .find(|n| n["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no Node {name} in the workload cluster:\n{table}"));
        assert_eq!(
            node["spec"]["providerID"],
            format!("metalherd://{NS}/{name}").as_str(),
            "{node:#}"
        );
        let control_plane = node["metadata"]["labels"]
            .get("node-role.kubernetes.io/control-plane")
            .is_some();
        assert_eq!(control_plane, name == "vm1", "{name}'s roles:\n{table}");
    }
    // vm1 runs the control plane as kubeadm's static pods, from the images
    // the node image carries (no registry on the rack).
    let pods = workload_list(&lab, &kubeconfig_path, &["pods", "-n", "kube-system"]);
    for component in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ] {
        let pod = pods
            .iter()
            .find(|p| p["metadata"]["name"] == format!("{component}-vm1").as_str())
            .unwrap_or_else(|| {
                let names: Vec<&Value> = pods.iter().map(|p| &p["metadata"]["name"]).collect();
                panic!("no {component}-vm1 pod; kube-system has {names:?}")
            });
        assert_eq!(pod["status"]["phase"], "Running", "{pod:#}");
        assert_eq!(pod["spec"]["nodeName"], "vm1", "{pod:#}");
    }
    // The lab's own API server (the management cluster) has none of them.
    let (ok, lab_nodes, err) = lab.kubectl(&["get", "nodes", "-o", "name"]);
    assert!(ok, "{err}");
    for name in NODES {
        assert!(
            !lab_nodes.contains(&format!("node/{name}")),
            "{name} joined the management cluster: {lab_nodes}"
        );
    }

    // Cluster API sees the same: three Machines Running with nodeRefs, the
    // control plane and the MachineDeployment ready.
    let machines = wait(
        "Cluster API's three Machines Running with nodeRefs",
        Duration::from_secs(300),
        &lab,
        &capi,
        || {
            let ms = list(&lab, "machines.cluster.x-k8s.io");
            (ms.len() == NODES.len()
                && ms.iter().all(|m| {
                    m["status"]["phase"] == "Running" && m["status"]["nodeRef"]["name"].is_string()
                }))
            .then_some(ms)
        },
    );
    for m in &machines {
        let node = m["status"]["nodeRef"]["name"].as_str().unwrap();
        assert_eq!(
            m["spec"]["providerID"],
            format!("metalherd://{NS}/{node}").as_str(),
            "{m:#}"
        );
        let mm = get(
            &lab,
            "metalherdmachine",
            m["spec"]["infrastructureRef"]["name"].as_str().unwrap(),
        );
        assert_eq!(condition(&mm, "Ready").unwrap()["status"], "True", "{mm:#}");
    }
    wait(
        "KubeadmControlPlane c1-cp and MachineDeployment c1-md ready",
        Duration::from_secs(300),
        &lab,
        &capi,
        || {
            let kcp = get(&lab, "kubeadmcontrolplane", "c1-cp");
            let md = get(&lab, "machinedeployment", "c1-md");
            (kcp["status"]["readyReplicas"] == 1 && md["status"]["readyReplicas"] == 2)
                .then_some(())
        },
    );

    // The cluster's DNS works: CoreDNS's two replicas Ready (it forwards
    // to the rack's resolver, which the nodes have, and reaches the API
    // through its Service) and it answers for a Service's name.
    wait(
        "CoreDNS's two replicas Ready",
        Duration::from_secs(900),
        &lab,
        &capi,
        || {
            let (_, out, _) = workload(
                &lab,
                &kubeconfig_path,
                &[
                    "get",
                    "deployment",
                    "coredns",
                    "-n",
                    "kube-system",
                    "-o",
                    "json",
                ],
            );
            let d: Value = serde_json::from_str(&out).unwrap_or_default();
            (d["status"]["readyReplicas"] == 2).then_some(())
        },
    );
    let kubectl = common::control_plane::kube_bin("kubectl");
    let mut forward = std::process::Command::new("ip");
    forward
        .args(["netns", "exec", &lab.ns])
        .arg(&kubectl)
        .args([
            "--kubeconfig",
            kubeconfig_path.to_str().unwrap(),
            "-n",
            "kube-system",
            "port-forward",
            "svc/kube-dns",
            "15353:53",
        ]);
    let _forward = common::proc::ChildGuard::spawn(
        "kubectl port-forward",
        &mut forward,
        &run.join("port-forward.log"),
    );
    let name = "kubernetes.default.svc.cluster.local";
    let answer = wait(
        "CoreDNS answers for kubernetes.default (through a port-forward)",
        Duration::from_secs(120),
        &lab,
        &capi,
        || common::dns_tcp::resolve_a(&lab.ns, 15353, name).ok(),
    );
    let (_, svc, _) = workload(
        &lab,
        &kubeconfig_path,
        &[
            "get",
            "service",
            "kubernetes",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
    );
    let want: std::net::Ipv4Addr = svc.trim().parse().unwrap();
    assert_eq!(answer, [want], "{name}");

    eprintln!(
        "lab: Cluster applied to three Nodes Ready (claims, network boots, installs, kubeadm init on vm1, kubeadm join on vm2 and vm3) in {:.0} s; the whole story {:.0} s",
        to_ready.as_secs_f64(),
        t_lab.elapsed().as_secs_f64()
    );
    drop(capi);
}
