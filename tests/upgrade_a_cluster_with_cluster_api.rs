//! Story: a Cluster API user upgrades a cluster on metalherd's servers:
//! changing the Kubernetes version of the control plane, then of the
//! workers, rolls every machine, the control plane first and one machine
//! at a time, while a Deployment of two replicas stays available; the
//! worker's server is reinstalled in place (its preserved partition kept),
//! as metalherd's reuse rule says for a MachineDeployment with
//! `maxSurge: 0`.
//!
//! The rack is create_a_cluster_with_cluster_api's (the lab's
//! kube-apiserver as management cluster, Cluster API v1.14.2's managers
//! and metalherd with no target cluster in the rack's namespace) with
//! three VMs of 2 GiB: vm1 and vm2 selected by the control plane's
//! template (`role: control-plane`; vm2 is the one spare server a control
//! plane of one needs to roll, KCP's surge), vm3 by the workers'
//! (`role: worker`). The control-plane endpoint is the TCP balancer on the
//! rack's host (tests/common/balancer.rs), 10.89.0.1:7443, in front of
//! vm1's and vm2's port 6443: the endpoint outlives the first server.
//!
//! The cluster starts at v1.34.3, the release before the pinned one: its
//! class, `lab-node-v1.34.3`, installs kubelet and kubeadm v1.34.3 from
//! the rack's mirror and lays that release's kube-apiserver,
//! kube-controller-manager and kube-scheduler images (built from source by
//! `scripts/kubernetes-build-previous --control-plane`) beside the node
//! image's own, which the node imports into containerd before kubeadm
//! runs (no registry). The upgrade names new MetalherdMachineTemplates
//! on class `lab-node` (v1.34.4, the node image's) and v1.34.4 in the
//! KubeadmControlPlane, then, once the control plane has rolled, in the
//! MachineDeployment (Cluster API's order for clusters without a
//! ClusterClass). No kube-proxy or CoreDNS (KCP skips both): every
//! emulated cycle goes to the control plane. The Deployment runs the pause
//! image (on every node; no registry) with a PodDisruptionBudget of
//! `minAvailable: 1`, and tolerates the control-plane taint.
//!
//! The time from applying the Cluster to its nodes Ready and of each
//! half of the upgrade is printed (BENCHMARKS.md).
//!
//! It has not passed on 2 emulated cores: in three runs the surge control
//! plane's `kubeadm join` (v1.34.4) failed (README, "Cluster API");
//! scripts/test runs it only with METALHERD_TEST_CLUSTER_UPGRADE=1.
//! Runs QEMU: take /tmp/metalherd-lab.lock around `cargo test`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::capi_lab::{
    apply, cluster_initialized, declare_pool, emulated_kubeadm_config_spec,
    emulated_stacked_control_plane_spec, get, list, metalherd_without_target, no_failed_kubeadm,
    node_ready, start_cluster_api, with_serving_members_first, workload, workload_kubeconfig,
};
use common::capi_objects::{INFRA, NS, infra, kubeadm_machine_deployment};
use common::cluster_api::ClusterApi;
use common::lab::{LAB_LOCK, Lab};
use common::lab_disk;
use common::lab_nodes::{NODE_DATA_MARKER, NODE_READY_TIMEOUT};
use serde_json::{Value, json};

const ENDPOINT: &str = "10.89.0.1";
const ENDPOINT_PORT: u16 = 7443;
const FROM: &str = common::control_plane::PREVIOUS_KUBE_VERSION;
const TO: &str = "v1.34.4";
const NODES: [&str; 3] = ["vm1", "vm2", "vm3"];
/// The label Cluster API puts on a control plane's Machines.
const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";

fn wait<T>(
    what: &str,
    timeout: Duration,
    lab: &Lab,
    capi: &ClusterApi,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    common::capi_lab::wait(what, timeout, lab, capi, NODES.len(), || {
        no_failed_kubeadm(lab, &NODES);
        f()
    })
}

/// The class the cluster starts from: the lab's class at [`FROM`]
/// (`LAB_NODE_KUBE_VERSION`: kubelet and kubeadm of that release from the
/// mirror), named `lab-node-<FROM>`, laying that release's control-plane
/// images from the mirror into the directory the node image imports from.
fn previous_class(lab: &Lab) -> Value {
    let images = common::control_plane::previous_control_plane_images();
    let served = lab.run.join(format!("mirror/images-{FROM}"));
    std::fs::create_dir_all(&served).unwrap();
    lab.write_pool(&[("LAB_NODE_KUBE_VERSION", FROM)], &[]);
    let yaml = std::fs::read_to_string(lab.run.join("class.yaml")).unwrap();
    let mut class = serde_yaml::Deserializer::from_str(&yaml)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .find(|d| d["kind"] == "MachineClass")
        .expect("a MachineClass in class.yaml");
    assert_eq!(class["spec"]["kubernetes"]["version"], FROM, "{class:#}");
    class["metadata"]["name"] = json!(format!("lab-node-{FROM}"));
    let files = class["spec"]["files"].as_array_mut().unwrap();
    for image in [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ] {
        let tar = images.join(format!("{image}.tar"));
        let link = served.join(format!("{image}.tar"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&tar, &link).unwrap();
        let names = std::fs::read_to_string(images.join(format!("{image}.names"))).unwrap();
        let dest = format!("/usr/lib/metalherd/images/{image}-{FROM}");
        files.push(json!({"path": format!("{dest}.tar"), "mode": 420,
            "source": {"url": format!("http://10.89.0.1:8081/images-{FROM}/{image}.tar"),
                "sha256": sha256(&tar)}}));
        files.push(json!({"path": format!("{dest}.names"), "mode": 420, "contents": names}));
    }
    class
}

fn sha256(path: &Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "sha256sum {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

fn server_template(name: &str, role: &str, class: &str) -> Value {
    json!({"apiVersion": format!("{INFRA}/v1alpha1"), "kind": "MetalherdMachineTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"template": {"spec": {
            "hostSelector": {"matchLabels": {"rack": "lab", "role": role}},
            "classRef": {"name": class}}}}})
}

/// The cluster at [`FROM`]: a control plane of one and a
/// MachineDeployment of one (`maxSurge: 0`).
fn cluster_objects() -> Vec<Value> {
    let class = format!("lab-node-{FROM}");
    let mut join = emulated_kubeadm_config_spec()["joinConfiguration"].take();
    join.as_object_mut().unwrap().remove("patches");
    let mut md = kubeadm_machine_deployment("c1", 1, FROM);
    md["spec"]["template"]["spec"]["infrastructureRef"]["name"] = json!(format!("c1-md-{FROM}"));
    md["spec"]["rollout"] = json!({"strategy": {"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}});
    vec![
        json!({"apiVersion": format!("{INFRA}/v1alpha1"), "kind": "MetalherdCluster",
            "metadata": {"name": "c1", "namespace": NS},
            "spec": {"controlPlaneEndpoint": {"host": ENDPOINT, "port": ENDPOINT_PORT}}}),
        server_template(&format!("c1-cp-{FROM}"), "control-plane", &class),
        server_template(&format!("c1-md-{FROM}"), "worker", &class),
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": {"name": "c1-cp", "namespace": NS, "annotations": {
                "controlplane.cluster.x-k8s.io/skip-coredns": "",
                "controlplane.cluster.x-k8s.io/skip-kube-proxy": ""}},
            "spec": {"replicas": 1, "version": FROM,
                "machineTemplate": {"spec": {
                    "infrastructureRef": infra("MetalherdMachineTemplate", &format!("c1-cp-{FROM}"))}},
                "kubeadmConfigSpec": emulated_stacked_control_plane_spec()}}),
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
        md,
    ]
}

/// The workload: two replicas of the pause image (every node has it) that
/// tolerate the control-plane taint, spread over nodes where they can,
/// and a budget that keeps one up through drains.
fn workload_objects() -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "keep", "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "keep"}},
                "template": {"metadata": {"labels": {"app": "keep"}}, "spec": {
                    "tolerations": [{"key": "node-role.kubernetes.io/control-plane",
                        "operator": "Exists", "effect": "NoSchedule"}],
                    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app": "keep"}}}}]}},
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1",
                        "imagePullPolicy": "Never"}]}}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "keep"}}}}]})
}

/// The Deployment's Ready pods not being deleted, as the workload
/// cluster's API tells (None when it does not answer).
fn ready_pods(lab: &Lab, kubeconfig: &Path) -> Option<usize> {
    let (ok, out, _) = workload(
        lab,
        kubeconfig,
        &[
            "get",
            "pods",
            "-n",
            "default",
            "-l",
            "app=keep",
            "-o",
            "json",
            "--request-timeout=20s",
        ],
    );
    let v: Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
    Some(
        v["items"]
            .as_array()?
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null() && node_ready(p))
            .count(),
    )
}

/// What [`watch_workload`] saw.
#[derive(Debug, Default)]
struct Availability {
    samples: usize,
    unanswered: usize,
    fewest_ready: Option<usize>,
}

/// Samples the Deployment's Ready pods every 5 s until `stop`.
fn watch_workload(lab: &Lab, kubeconfig: &Path, stop: &AtomicBool) -> Availability {
    let mut seen = Availability::default();
    while !stop.load(Ordering::SeqCst) {
        match ready_pods(lab, kubeconfig) {
            Some(n) => {
                seen.samples += 1;
                seen.fewest_ready = Some(seen.fewest_ready.map_or(n, |f| f.min(n)));
            }
            None => seen.unanswered += 1,
        }
        for _ in 0..50 {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    seen
}

fn is_control_plane(m: &Value) -> bool {
    m["metadata"]["labels"].get(CONTROL_PLANE_LABEL).is_some()
}

/// Cluster API's Machines of the control plane (`true`) or the workers.
fn machines(lab: &Lab, control_plane: bool) -> Vec<Value> {
    list(lab, "machines.cluster.x-k8s.io")
        .into_iter()
        .filter(|m| is_control_plane(m) == control_plane)
        .collect()
}

/// The one Machine of `machines` when it runs `version` with a Ready Node
/// that reports that kubelet: its Node's name.
fn rolled_to(lab: &Lab, kubeconfig: &Path, machines: &[Value], version: &str) -> Option<String> {
    let [m] = machines else { return None };
    if m["spec"]["version"] != version || m["status"]["phase"] != "Running" {
        return None;
    }
    let node = m["status"]["nodeRef"]["name"].as_str()?;
    let (ok, out, _) = workload(
        lab,
        kubeconfig,
        &["get", "node", node, "-o", "json", "--request-timeout=20s"],
    );
    let n: Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
    (node_ready(&n) && n["status"]["nodeInfo"]["kubeletVersion"] == version)
        .then(|| node.to_string())
}

/// `obj` as read, without what the server owns (status, resourceVersion,
/// uid, managed fields), to apply again with a change: a stale
/// resourceVersion would make the apply a conflict.
fn for_apply(mut obj: Value) -> Value {
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
    if let Some(m) = obj["metadata"].as_object_mut() {
        for field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
            "managedFields",
        ] {
            m.remove(field);
        }
    }
    obj
}

/// Machine `server`'s release label (`infrastructure.cluster.x-k8s.io/
/// released-from`), if metalherd released it.
fn released_from(lab: &Lab, server: &str) -> Option<String> {
    get(lab, "machines.metalherd.dev", server)["metadata"]["labels"]
        ["infrastructure.cluster.x-k8s.io/released-from"]
        .as_str()
        .map(String::from)
}

#[test]
fn upgrade_a_cluster_with_cluster_api() {
    let _guard = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let t_lab = Instant::now();
    let mut lab = Lab::up_nodes_control_plane_first(NODES.len());
    let backends = ["10.89.0.11:6443".to_string(), "10.89.0.12:6443".to_string()];
    let _balancer = common::balancer::start(
        &lab.ns,
        &lab.run.join("balancer"),
        &format!("{ENDPOINT}:{ENDPOINT_PORT}"),
        &backends,
    );
    let capi = start_cluster_api(&lab, &[]);
    let _metalherd = metalherd_without_target(&mut lab);
    let old_class = previous_class(&lab);
    declare_pool(
        &lab,
        &[
            ("vm1", "role: control-plane"),
            ("vm2", "role: control-plane"),
            ("vm3", "role: worker"),
        ],
    );
    apply(&lab, &[old_class]);
    eprintln!(
        "lab: rack of {}, kube-apiserver, mirror, balancer, Cluster API and metalherd up, classes lab-node-{FROM} and lab-node declared in {:?}",
        NODES.len(),
        t_lab.elapsed()
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
    with_serving_members_first(&lab, &NODES, || the_upgrade(&lab, &capi, t_lab));
    drop(capi);
}

/// The story from the Cluster's apply on.
fn the_upgrade(lab: &Lab, capi: &ClusterApi, t_lab: Instant) {
    let applied = Instant::now();
    apply(lab, &cluster_objects());
    wait(
        "Cluster c1's control plane initialized (kubeadm init at v1.34.3 on vm1)",
        NODE_READY_TIMEOUT,
        lab,
        capi,
        || cluster_initialized(lab, "c1", &["controlPlaneInitialized"]).then_some(()),
    );
    let kubeconfig = workload_kubeconfig(lab, "c1", &format!("https://{ENDPOINT}:{ENDPOINT_PORT}"));
    let cp_node = wait(
        "the control plane's Machine Running at v1.34.3",
        NODE_READY_TIMEOUT,
        lab,
        capi,
        || rolled_to(lab, &kubeconfig, &machines(lab, true), FROM),
    );
    let worker_node = wait(
        "the worker's Machine Running at v1.34.3",
        NODE_READY_TIMEOUT,
        lab,
        capi,
        || rolled_to(lab, &kubeconfig, &machines(lab, false), FROM),
    );
    let created = applied.elapsed();
    assert_eq!(
        (cp_node.as_str(), worker_node.as_str()),
        ("vm1", "vm3"),
        "the first servers by the reuse rule (never installed, by name)"
    );
    let (_, table, _) = workload(lab, &kubeconfig, &["get", "nodes", "-o", "wide"]);
    eprintln!(
        "lab: cluster at {FROM} in {:.0} s:\n{table}",
        created.as_secs_f64()
    );

    let objects = lab.run.join("workload.json");
    std::fs::write(&objects, workload_objects().to_string()).unwrap();
    let (ok, out, err) = workload(
        lab,
        &kubeconfig,
        &["apply", "-f", objects.to_str().unwrap()],
    );
    assert!(ok, "the workload: {out}{err}");
    wait(
        "the Deployment's two replicas Ready",
        Duration::from_secs(600),
        lab,
        capi,
        || (ready_pods(lab, &kubeconfig) == Some(2)).then_some(()),
    );

    let stop = AtomicBool::new(false);
    let (cp_rolled, md_rolled, seen) = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| watch_workload(lab, &kubeconfig, &stop));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            roll(lab, capi, &kubeconfig)
        }));
        stop.store(true, Ordering::SeqCst);
        let seen = watcher.join().unwrap();
        let (cp, md) = result.unwrap_or_else(|e| {
            eprintln!("lab: the workload while rolling: {seen:?}");
            std::panic::resume_unwind(e)
        });
        (cp, md, seen)
    });
    eprintln!("lab: the workload while rolling: {seen:?}");
    assert!(seen.samples > 0, "{seen:?}");
    assert!(
        seen.fewest_ready.is_some_and(|n| n >= 1),
        "the Deployment had no Ready replica at some point of the upgrade: {seen:?}"
    );
    wait(
        "the Deployment's two replicas Ready after the upgrade",
        Duration::from_secs(600),
        lab,
        capi,
        || (ready_pods(lab, &kubeconfig) == Some(2)).then_some(()),
    );
    let (_, table, _) = workload(lab, &kubeconfig, &["get", "nodes", "-o", "wide"]);
    eprintln!("lab: the workload cluster after the upgrade:\n{table}");
    eprintln!(
        "lab: Cluster applied to its nodes Ready at {FROM} in {:.0} s; control plane rolled to {TO} in {:.0} s; workers in {:.0} s; the whole story {:.0} s",
        created.as_secs_f64(),
        cp_rolled.as_secs_f64(),
        md_rolled.as_secs_f64(),
        t_lab.elapsed().as_secs_f64()
    );
}

/// The upgrade: the control plane, then the workers. Returns how long
/// each took.
fn roll(lab: &Lab, capi: &ClusterApi, kubeconfig: &Path) -> (Duration, Duration) {
    // The control plane: a new template on the new class, the new version.
    let t_cp = Instant::now();
    apply(
        lab,
        &[server_template(
            &format!("c1-cp-{TO}"),
            "control-plane",
            "lab-node",
        )],
    );
    let mut kcp = for_apply(get(lab, "kubeadmcontrolplane", "c1-cp"));
    kcp["spec"]["version"] = json!(TO);
    kcp["spec"]["machineTemplate"]["spec"]["infrastructureRef"]["name"] =
        json!(format!("c1-cp-{TO}"));
    apply(lab, &[kcp]);
    let worker_before = machines(lab, false);
    let mut most_cp = 0;
    let cp_node = wait(
        "the control plane rolled to v1.34.4 (one new machine, the old one gone)",
        NODE_READY_TIMEOUT + NODE_READY_TIMEOUT / 2,
        lab,
        capi,
        || {
            let cps = machines(lab, true);
            most_cp = most_cp.max(cps.len());
            // The workers wait for the control plane.
            let workers = machines(lab, false);
            assert_eq!(
                workers
                    .iter()
                    .map(|m| &m["metadata"]["name"])
                    .collect::<Vec<_>>(),
                worker_before
                    .iter()
                    .map(|m| &m["metadata"]["name"])
                    .collect::<Vec<_>>(),
                "a worker rolled before the control plane"
            );
            rolled_to(lab, kubeconfig, &cps, TO)
        },
    );
    let cp_rolled = t_cp.elapsed();
    assert!(
        most_cp <= 2,
        "KCP had {most_cp} control-plane machines at once"
    );
    // KCP's surge took the spare control-plane server (never installed
    // comes before installed ones); the old one is released, off, its disk
    // kept for the next machine of that control plane.
    assert_eq!(cp_node, "vm2", "the new control plane's server");
    assert_eq!(
        released_from(lab, "vm1").as_deref(),
        Some("KubeadmControlPlane.c1-cp")
    );
    wait(
        "vm1 powered off",
        Duration::from_secs(300),
        lab,
        capi,
        || (!lab.vm_running(1)).then_some(()),
    );

    // The workers: the same server, reinstalled in place.
    let t_md = Instant::now();
    apply(
        lab,
        &[server_template(
            &format!("c1-md-{TO}"),
            "worker",
            "lab-node",
        )],
    );
    let mut md = for_apply(get(lab, "machinedeployment", "c1-md"));
    md["spec"]["template"]["spec"]["version"] = json!(TO);
    md["spec"]["template"]["spec"]["infrastructureRef"]["name"] = json!(format!("c1-md-{TO}"));
    apply(lab, &[md]);
    let old_worker = worker_before[0]["metadata"]["name"].clone();
    let worker_node = wait(
        "the worker rolled to v1.34.4",
        NODE_READY_TIMEOUT,
        lab,
        capi,
        || {
            let workers = machines(lab, false);
            assert!(workers.len() <= 1, "a worker surged: {workers:#?}");
            if workers.iter().any(|m| m["metadata"]["name"] == old_worker) {
                return None;
            }
            rolled_to(lab, kubeconfig, &workers, TO)
        },
    );
    let md_rolled = t_md.elapsed();
    assert_eq!(
        worker_node, "vm3",
        "the worker's server was not reused in place"
    );
    let vm3 = get(lab, "machines.metalherd.dev", "vm3");
    let disk = lab.disk(3);
    let data = lab_disk::partition(&disk, "data").expect("vm3's data partition");
    assert_eq!(
        lab_disk::first_line(&disk, data.start),
        NODE_DATA_MARKER,
        "vm3's preserved partition after its reinstall: {vm3:#}"
    );
    (cp_rolled, md_rolled)
}
