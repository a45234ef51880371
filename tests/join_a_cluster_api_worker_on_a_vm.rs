//! Story: a real node joins a real cluster through Cluster API, on the
//! virtual rack (tests/common/lab_nodes.rs: a UEFI QEMU VM, its Redfish BMC
//! from sushy-tools' libvirt driver, the Debian node image, the lab's
//! kubeadm-made kube-apiserver on 10.89.0.1:6443).
//!
//! One API server is both Cluster API's management cluster and the
//! workload cluster the node joins (self-hosted). Cluster API v1.14.2's
//! core, kubeadm bootstrap (CABPK) and kubeadm control plane managers run
//! as processes in the rack's namespace (tests/common/cluster_api.rs),
//! metalherd runs `serve --store kubernetes` there with
//! `controller.clusterApi: true`. The control plane already exists, so it
//! is externally managed: the Cluster's `controlPlaneRef` names a stand-in
//! (`LabControlPlane`, a CRD this test installs under the v1beta2 contract
//! label) whose status the test sets to initialized and externally
//! managed; the Secrets Cluster API keeps for a cluster it made
//! (`<cluster>-ca` from the lab's kubeadm PKI, `<cluster>-kubeconfig` for
//! https://10.89.0.1:6443) are created by hand.
//!
//! A MachineDeployment of one with a `format: ignition` KubeadmConfigTemplate
//! and a MetalherdMachineTemplate for the lab's class: the MetalherdMachine
//! claims the VM (declared with no class, Available), metalherd network-
//! boots and installs it with CABPK's bootstrap data in place of its own
//! join; the node's `kubeadm.service` runs `kubeadm join` with the token
//! CABPK made, the kubelet registers with `--provider-id
//! metalherd://default/vm1`, the Node goes Ready and Cluster API's Machine
//! reaches `Running` with its `nodeRef`. kube-apiserver's audit log shows
//! the node joined with CABPK's bootstrap token, not the lab's; after a
//! clean shutdown the node's disk shows that CABPK's `kubeadm.sh` ran to
//! its end (it writes `/run/cluster-api/bootstrap-success.complete`, a
//! tmpfs, then moves `/etc/kubeadm.yml` away). The time from applying the
//! Cluster to the Node Ready is printed (BENCHMARKS.md).
//! Runs QEMU: take /tmp/metalherd-lab.lock around `cargo test`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::capi_lab::{
    apply, claim_of, cluster_initialized, declare_pool, get, list, node_ready, start_cluster_api,
};
use common::capi_objects::{INFRA, NS, condition, infra, kubeadm_machine_deployment};
use common::lab::{LAB_LOCK, Lab, tail};
use common::lab_nodes::NODE_READY_TIMEOUT;
use serde_json::{Value, json};

/// [`common::capi_lab::wait`] with vm1's console on a timeout.
fn wait<T>(
    what: &str,
    timeout: Duration,
    lab: &Lab,
    capi: &common::cluster_api::ClusterApi,
    f: impl FnMut() -> Option<T>,
) -> T {
    common::capi_lab::wait(what, timeout, lab, capi, 1, f)
}

/// The stand-in control plane's API group.
const LAB_CP: &str = "controlplane.lab.metalherd.dev";
/// The lab's API server, as the node and the managers reach it.
const ENDPOINT: &str = "10.89.0.1";

/// The stand-in for a control plane provider: a namespaced kind with a
/// status subresource, labelled for Cluster API's v1beta2 contract so core
/// resolves a `controlPlaneRef` to it.
fn control_plane_crd() -> Value {
    let any = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("labcontrolplanes.{LAB_CP}"),
            "labels": {"cluster.x-k8s.io/v1beta2": "v1alpha1"}},
        "spec": {"group": LAB_CP, "scope": "Namespaced",
            "names": {"kind": "LabControlPlane", "listKind": "LabControlPlaneList",
                "plural": "labcontrolplanes", "singular": "labcontrolplane"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": any, "status": any}}}}]}})
}

/// A Secret of Cluster API's type for cluster `c1`.
fn cluster_secret(name: &str, data: &[(&str, &[u8])]) -> Value {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| (k.to_string(), json!(b64(v))))
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
        "metadata": {"name": name, "namespace": NS,
            "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "data": data})
}

#[test]
fn join_a_cluster_api_worker_on_a_vm() {
    let _guard = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let t_lab = Instant::now();
    // A real node and the lab's kubeadm-made cluster; the lab's standalone
    // metalherd stops (the objects live in kube-apiserver).
    let mut lab = Lab::up_nodes(1);
    lab.kill_metalherd();
    let run = lab.run.clone();
    eprintln!(
        "lab: rack, kube-apiserver and mirror up in {:?}",
        t_lab.elapsed()
    );

    apply(&lab, &[control_plane_crd()]);
    let capi = start_cluster_api(&lab, &[&format!("crd/labcontrolplanes.{LAB_CP}")]);

    // metalherd with the provider on: the lab's config (its controller
    // section names the lab's cluster for Node lookups) plus clusterApi.
    lab.merge_config("controller: {clusterApi: true}");
    let config = run.join("config.yaml");
    assert!(
        std::fs::read_to_string(&config)
            .unwrap()
            .contains("clusterApi: true"),
        "config"
    );
    let mut metalherd = common::capi_lab::metalherd(&lab, &config);

    // The lab's class and the VM without a class: Available, a pool the
    // MetalherdMachineTemplate selects (`rack: lab`). The class's own
    // `join` stays; the bootstrap data replaces it on the node.
    declare_pool(&lab, &[]);
    wait(
        "vm1 Available",
        Duration::from_secs(300),
        &lab,
        &capi,
        || {
            let m = get(&lab, "machines.metalherd.dev", "vm1");
            (m["status"]["phase"] == "Available").then_some(())
        },
    );

    // The existing cluster's Secrets, as Cluster API keeps them for one it
    // made: its CA and an admin kubeconfig for the endpoint.
    let pki = run.join("kube/pki");
    let (crt, key) = (
        std::fs::read(pki.join("ca.crt")).unwrap(),
        std::fs::read(pki.join("ca.key")).unwrap(),
    );
    let kubeconfig = std::fs::read_to_string(run.join("kube/admin.kubeconfig"))
        .unwrap()
        .replace(
            "https://127.0.0.1:6443",
            &format!("https://{ENDPOINT}:6443"),
        );
    assert!(kubeconfig.contains(ENDPOINT), "{kubeconfig}");
    // The stand-in control plane, initialized and externally managed.
    apply(
        &lab,
        &[
            cluster_secret("c1-ca", &[("tls.crt", &crt), ("tls.key", &key)]),
            cluster_secret("c1-kubeconfig", &[("value", kubeconfig.as_bytes())]),
            json!({"apiVersion": format!("{LAB_CP}/v1alpha1"), "kind": "LabControlPlane",
                "metadata": {"name": "c1-cp", "namespace": NS},
                "spec": {"controlPlaneEndpoint": {"host": ENDPOINT, "port": 6443}}}),
        ],
    );
    let status = json!({"status": {
        "initialization": {"controlPlaneInitialized": true},
        "externalManagedControlPlane": true}});
    let (ok, out, err) = lab.kubectl(&[
        "patch",
        "labcontrolplane",
        "c1-cp",
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]);
    assert!(ok, "LabControlPlane status: {out}{err}");

    // The workers: a MachineDeployment of one.
    let applied = Instant::now();
    apply(
        &lab,
        &[
            json!({"apiVersion": format!("{INFRA}/v1alpha1"), "kind": "MetalherdCluster",
                "metadata": {"name": "c1", "namespace": NS},
                "spec": {"controlPlaneEndpoint": {"host": ENDPOINT, "port": 6443}}}),
            json!({"apiVersion": format!("{INFRA}/v1alpha1"), "kind": "MetalherdMachineTemplate",
                "metadata": {"name": "c1-md", "namespace": NS},
                "spec": {"template": {"spec": {
                    "hostSelector": {"matchLabels": {"rack": "lab"}},
                    "classRef": {"name": "lab-node"}}}}}),
            // The kubelet's configuration (cgroup driver, healthz address)
            // is the cluster's kubelet-config ConfigMap, which kubeadm join
            // reads; the node registers with containerd's socket.
            json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
                "metadata": {"name": "c1-md", "namespace": NS},
                "spec": {"template": {"spec": {"format": "ignition",
                    "joinConfiguration": {"nodeRegistration": {
                        "criSocket": "unix:///run/containerd/containerd.sock"}}}}}}),
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": "c1", "namespace": NS},
                "spec": {
                    "clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]},
                        "services": {"cidrBlocks": ["10.96.0.0/24"]}, "serviceDomain": "cluster.local"},
                    "infrastructureRef": infra("MetalherdCluster", "c1"),
                    "controlPlaneRef": {"apiGroup": LAB_CP, "kind": "LabControlPlane", "name": "c1-cp"}}}),
            kubeadm_machine_deployment("c1", 1, "v1.34.4"),
        ],
    );

    wait(
        "Cluster c1 initialized (infrastructure and control plane)",
        Duration::from_secs(120),
        &lab,
        &capi,
        || {
            cluster_initialized(
                &lab,
                "c1",
                &["infrastructureProvisioned", "controlPlaneInitialized"],
            )
            .then_some(())
        },
    );
    let mm = wait(
        "the MetalherdMachine claims vm1",
        Duration::from_secs(180),
        &lab,
        &capi,
        || claim_of(&lab, "vm1"),
    );
    let provider_id = format!("metalherd://{NS}/vm1");
    assert_eq!(mm["spec"]["providerID"], provider_id.as_str(), "{mm:#}");

    // The install, the first boot and kubeadm join from CABPK's data.
    let node = wait("Node vm1 Ready", NODE_READY_TIMEOUT, &lab, &capi, || {
        let n = get(&lab, "node", "vm1");
        node_ready(&n).then_some(n)
    });
    let to_ready = applied.elapsed();
    assert_eq!(node["spec"]["providerID"], provider_id.as_str(), "{node:#}");
    // The installed node imported the images it carries (no registry):
    // metalherd-images-import.service writes to the serial console, one
    // line naming them by archive (coredns, etcd, kube-apiserver, ...,
    // pause last), which the console cuts after about 380 characters: the
    // names checked are those before the cut.
    let console = lab.console(1);
    let imported = console
        .lines()
        .find(|l| l.contains("images-import: imported"))
        .unwrap_or_else(|| {
            panic!(
                "no images-import on vm1's console:\n{}",
                tail(&console, 4000)
            )
        });
    for image in [
        "registry.k8s.io/coredns/coredns:v1.12.1",
        "registry.k8s.io/etcd:3.6.5-0",
        "registry.k8s.io/kube-apiserver:v1.34.4",
        "registry.k8s.io/kube-proxy:v1.34.4",
        "registry.k8s.io/pause:3.6",
    ] {
        assert!(imported.contains(image), "{image} not imported: {imported}");
    }

    let machine = wait(
        "Cluster API's Machine Running with its nodeRef",
        Duration::from_secs(180),
        &lab,
        &capi,
        || {
            list(&lab, "machines.cluster.x-k8s.io")
                .into_iter()
                .find(|m| {
                    m["status"]["phase"] == "Running" && m["status"]["nodeRef"]["name"] == "vm1"
                })
        },
    );
    assert_eq!(
        machine["spec"]["providerID"],
        provider_id.as_str(),
        "{machine:#}"
    );
    let mm = get(
        &lab,
        "metalherdmachine",
        machine["spec"]["infrastructureRef"]["name"]
            .as_str()
            .unwrap(),
    );
    assert_eq!(
        mm["status"]["initialization"]["provisioned"], true,
        "{mm:#}"
    );
    assert_eq!(condition(&mm, "Ready").unwrap()["status"], "True", "{mm:#}");
    let server = get(&lab, "machines.metalherd.dev", "vm1");
    assert!(
        server["spec"]["bootstrapDataSecretRef"]["name"].is_string(),
        "{server:#}"
    );

    // The node joined with CABPK's bootstrap token, never with the lab's
    // own (`abcdef`, the class's `join`, which the bootstrap data replaces).
    let joined_as: std::collections::BTreeSet<String> =
        std::fs::read_to_string(run.join("kube/audit.log"))
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|e| e["user"]["username"].as_str().map(str::to_string))
            .filter(|u| u.starts_with("system:bootstrap:"))
            .collect();
    assert!(
        !joined_as.is_empty() && !joined_as.contains("system:bootstrap:abcdef"),
        "bootstrap token users in the audit log: {joined_as:?}"
    );
    eprintln!("lab: the node joined as {joined_as:?}");

    // What kubeadm.sh (CABPK's script) left on the node's disk: it creates
    // /run/cluster-api/bootstrap-success.complete right after `kubeadm
    // join` succeeds (`set -e`), then moves /etc/kubeadm.yml to /tmp. The
    // VM shuts down cleanly (ACPI) so its root filesystem is consistent;
    // metalherd stops first so that nothing powers it on again.
    metalherd.kill9();
    lab.virsh(&["shutdown", &format!("{}-vm1", lab.ns)]);
    wait(
        "vm1 shut down",
        Duration::from_secs(300),
        &lab,
        &capi,
        || (!lab.vm_running(1)).then_some(()),
    );
    let disk = lab.disk(1);
    let root = common::lab_disk::partition(&disk, "root").unwrap_or_else(|| {
        panic!(
            "no root partition: {:?}",
            common::lab_disk::partitions(&disk)
        )
    });
    let debugfs = |cmd: &str| {
        let out = Command::new(common::require_tool("debugfs"))
            .args(["-R", cmd])
            .arg(format!("{}?offset={}", disk.display(), root.start * 512))
            .output()
            .expect("debugfs");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let script = debugfs("cat /etc/kubeadm.sh");
    assert!(
        script.contains("kubeadm join") && script.contains("bootstrap-success.complete"),
        "CABPK's /etc/kubeadm.sh on the node:\n{script}"
    );
    let config = debugfs("stat /etc/kubeadm.yml");
    assert!(
        config.contains("File not found"),
        "/etc/kubeadm.yml is still there: kubeadm.sh did not finish:\n{config}"
    );
    eprintln!(
        "lab: kubeadm.sh ran to its end (/etc/kubeadm.yml moved away; in /tmp: {})",
        !debugfs("stat /tmp/kubeadm.yml").contains("File not found")
    );

    eprintln!(
        "lab: Cluster applied to Node vm1 Ready (claim, network boot, install, kubeadm join from Cluster API's bootstrap data) in {:.0} s; the whole story {:.0} s",
        to_ready.as_secs_f64(),
        t_lab.elapsed().as_secs_f64()
    );
    drop(capi);
}
