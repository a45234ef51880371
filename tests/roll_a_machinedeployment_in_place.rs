//! Story: a MachineDeployment rolled to a new MetalherdMachineTemplate
//! with `maxSurge: 0` reinstalls the same servers in place, one at a time,
//! on a pool with no spare server. On the simulated rack, a real
//! kube-apiserver and Cluster API v1.14.2's real managers.
//!
//! The cluster's control plane is externally managed (a stand-in
//! control-plane object marked initialized) and its workload cluster is the
//! same API server. A simulated server runs no kubelet, so the test
//! registers a Ready Node with metalherd's provider ID for every
//! provisioned MetalherdMachine, as the server's kubelet would: that is
//! what lets Cluster API count a machine available and go on.
//!
//! The rollout (a new template naming a new class) deletes one old
//! Machine, metalherd releases its server (powered off, disk kept,
//! remembered for the MachineDeployment), the new Machine's
//! MetalherdMachine takes that same server back under the reuse rule and
//! metalherd reimages it; then the second. The pool never had a third
//! server; the spare one beside it is never touched.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::capi_objects::{apply_in, get_in, list_in, metalherd_cluster_in, wait};
use common::cluster_api::ClusterApi;
use common::control_plane::ControlPlane;
use common::sim_rack::{SimRack, bmc_credentials};
use serde_json::{Value, json};

const NS: &str = "roll";

fn template(name: &str, class: &str) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MetalherdMachineTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"template": {"spec": {
            "hostSelector": {"matchLabels": {"pool": "roll"}},
            "classRef": {"name": class}}}}})
}

fn deployment(template: &str) -> Value {
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
        "metadata": {"name": "roll-md", "namespace": NS,
            "annotations": {"machineset.cluster.x-k8s.io/skip-preflight-checks": "All"}},
        "spec": {"clusterName": "roll", "replicas": 2,
            "rollout": {"strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}},
            "selector": {"matchLabels": {"md": "roll-md"}},
            "template": {"metadata": {"labels": {"md": "roll-md"}}, "spec": {
                "clusterName": "roll", "version": "v1.34.4",
                "bootstrap": {"dataSecretName": "roll-bootstrap"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                    "kind": "MetalherdMachineTemplate", "name": template}}}}})
}

/// The servers' kubelets, as far as Cluster API can tell: a Ready Node
/// with metalherd's provider ID for every provisioned MetalherdMachine.
fn kubelets(cp: Arc<ControlPlane>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            for mm in list_in(&cp, NS, "metalherdmachines", "") {
                let (Some(server), Some(id)) = (
                    mm["status"]["machineRef"]["name"].as_str(),
                    mm["spec"]["providerID"].as_str(),
                ) else {
                    continue;
                };
                if mm["status"]["initialization"]["provisioned"] != true {
                    continue;
                }
                let (code, _) = cp.req("GET", &format!("/api/v1/nodes/{server}"), None);
                if code != 200 {
                    let node = json!({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": server}, "spec": {"providerID": id}});
                    let (code, body) = cp.req("POST", "/api/v1/nodes", Some(&node));
                    assert!(code < 300 || code == 409, "{code} {body}");
                }
                // Ready, with a fresh heartbeat each round.
                let now = jiff::Timestamp::now().to_string();
                let condition = |type_: &str, status: &str| {
                    json!({"type": type_, "status": status, "reason": "StandIn",
                        "message": "stand-in kubelet",
                        "lastHeartbeatTime": now, "lastTransitionTime": now})
                };
                let status = json!({"status": {"conditions": [
                    condition("Ready", "True"),
                    condition("MemoryPressure", "False"),
                    condition("DiskPressure", "False"),
                    condition("PIDPressure", "False"),
                ]}});
                let (code, body) = cp.raw(
                    "PATCH",
                    &format!("/api/v1/nodes/{server}/status"),
                    Some(&cp.token),
                    Some(&status),
                    "application/merge-patch+json",
                );
                assert!(code < 300, "{code} {body}");
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    })
}

#[test]
fn roll_a_machinedeployment_in_place() {
    let cp = common::control_plane::shared();
    cp.namespace(NS);
    let capi = ClusterApi::start_with_feature_gates(&cp, "KubeadmBootstrapFormatIgnition=true");
    common::capi_objects::install_provider(&cp);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = common::rack::boot_files();
    let boot_port = common::free_port();
    let rack = rt.block_on(SimRack::start(
        "roll",
        3,
        65,
        &format!("http://127.0.0.1:{boot_port}"),
    ));
    let mh = common::capi_objects::provider_metalherd(&cp, boot_port, &dir.path().join("assets"));
    let logs = || {
        let (_, nodes, _) = cp.kubectl(&["get", "nodes", "-o", "wide"]);
        let machines: Vec<String> = list_in(&cp, NS, "machines.cluster.x-k8s.io", "")
            .iter()
            .map(|m| {
                format!(
                    "{} {} {}",
                    m["metadata"]["name"], m["status"]["phase"], m["status"]["conditions"]
                )
            })
            .collect();
        format!(
            "---- nodes:\n{nodes}\n---- machines:\n{}\n{}\n---- metalherd log tail:\n{}",
            machines.join("\n"),
            capi.logs_tail(20),
            common::rack::tail(&mh.log(), 30)
        )
    };

    // Two servers in the pool, a spare beside it; two classes.
    let (user, pw) = bmc_credentials();
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "bmc", "namespace": NS},
            "stringData": {"username": user, "password": pw}}),
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "join", "namespace": NS},
            "stringData": {"token": "abcdef.0123456789abcdef"}}),
    ];
    for name in ["node-a", "node-b"] {
        let mut class = common::rack::flatcar_class(dir.path());
        class["metadata"]["namespace"] = json!(NS);
        class["metadata"]["name"] = json!(name);
        objects.push(class);
    }
    for i in 0..3 {
        let pool = if i < 2 { "roll" } else { "spare" };
        let mut m = rack.manifest(i, "bmc", json!({"pool": pool}));
        m["metadata"]["namespace"] = json!(NS);
        objects.push(m);
    }
    let workload_kc = std::fs::read_to_string(cp.admin_kubeconfig()).unwrap();
    let label = json!({"cluster.x-k8s.io/cluster-name": "roll"});
    objects.extend([
        json!({"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
            "metadata": {"name": "roll-kubeconfig", "namespace": NS, "labels": label},
            "stringData": {"value": workload_kc}}),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
            "metadata": {"name": "roll-bootstrap", "namespace": NS, "labels": label},
            "stringData": {"format": "ignition", "value": json!({"ignition": {"version": "3.3.0"}}).to_string()}}),
        metalherd_cluster_in(NS, "roll", "127.0.65.99"),
        template("roll-a", "node-a"),
        template("roll-b", "node-b"),
        common::capi_objects::external_control_plane(NS, "roll-cp", "127.0.65.99"),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "roll", "namespace": NS},
            "spec": {
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalherdCluster", "name": "roll"},
                "controlPlaneRef": common::capi_objects::external_control_plane_ref("roll-cp")}}),
        deployment("roll-a"),
    ]);
    apply_in(&cp, &objects);
    common::capi_objects::initialize_external_control_plane(&cp, NS, "roll-cp");
    let stop = Arc::new(AtomicBool::new(false));
    let kubelets = kubelets(cp.clone(), stop.clone());

    // Both machines from `template`, Running, and the MachineDeployment
    // up to date and available.
    let running = |template: &'static str| {
        let cp = cp.clone();
        move || {
            let mms = list_in(&cp, NS, "metalherdmachines", "");
            let ms = list_in(&cp, NS, "machines.cluster.x-k8s.io", "");
            let md = get_in(&cp, NS, "machinedeployments.cluster.x-k8s.io", "roll-md");
            (mms.len() == 2
                && mms.iter().all(|m| {
                    m["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"] == template
                        && m["status"]["initialization"]["provisioned"] == true
                })
                && ms.len() == 2
                && ms.iter().all(|m| m["status"]["phase"] == "Running")
                && md["status"]["observedGeneration"] == md["metadata"]["generation"]
                && md["status"]["upToDateReplicas"] == 2
                && md["status"]["availableReplicas"] == 2)
                .then_some(ms)
        }
    };
    wait(
        "two Machines Running on roll-a",
        Duration::from_secs(120),
        &logs,
        running("roll-a"),
    );
    let servers_of = || -> BTreeSet<String> {
        list_in(&cp, NS, "metalherdmachines", "")
            .iter()
            .filter_map(|m| m["status"]["machineRef"]["name"].as_str().map(String::from))
            .collect()
    };
    let before = servers_of();
    let pool: BTreeSet<String> = rack.machines[..2].iter().map(|m| m.name.clone()).collect();
    assert_eq!(before, pool);

    // The rollout: a new template, a new class.
    let t0 = Instant::now();
    apply_in(&cp, &[deployment("roll-b")]);
    let mut most_out = 0;
    wait(
        "both Machines rolled to roll-b and Running",
        Duration::from_secs(240),
        &logs,
        || {
            // Never more than one server out of service at once.
            let claimed = servers_of().len();
            most_out = most_out.max(2usize.saturating_sub(claimed));
            running("roll-b")()
        },
    );
    eprintln!(
        "cluster api: a MachineDeployment of two rolled in place in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(most_out <= 1, "{most_out} servers out at once");
    let mms = list_in(&cp, NS, "metalherdmachines", "");
    assert_eq!(mms.len(), 2);
    for mm in &mms {
        assert_eq!(mm["status"]["reused"], true, "{mm:#}");
        let server = mm["status"]["machineRef"]["name"].as_str().unwrap();
        let s = get_in(&cp, NS, "machines.metalherd.dev", server);
        assert_eq!(s["spec"]["classRef"]["name"], "node-b", "{s:#}");
        let asked = s["metadata"]["annotations"]["metalherd.dev/reimage"].clone();
        assert!(
            asked
                .as_str()
                .is_some_and(|v| v.starts_with("cluster-api:")),
            "{s:#}"
        );
        assert_eq!(s["status"]["progress"]["reimageRequest"], asked, "{s:#}");
        assert_eq!(s["status"]["phase"], "Ready");
    }
    assert_eq!(servers_of(), pool, "the same two servers");
    // Each pool server installed twice (first install, the reimage); the
    // spare never booted.
    let boots = rack.boots();
    assert_eq!(&boots[..2], &[2, 2], "{boots:?}");
    assert_eq!(boots[2], 0, "{boots:?}");
    stop.store(true, Ordering::SeqCst);
    kubelets.join().unwrap();
    drop(mh);
    drop(rack);
}
