//! Story: `clusterctl move` of a cluster whose servers metalherd runs
//! reprovisions nothing. On the simulated rack (tests/common/sim_rack.rs),
//! between two real kube-apiservers (tests/common/control_plane.rs), each
//! with Cluster API v1.14.2's real managers (tests/common/cluster_api.rs)
//! and metalherd's provider CRDs, with the real `clusterctl`.
//!
//! The source management cluster runs metalherd in Kubernetes mode with
//! the provider on. A Cluster with an externally managed control plane
//! (a stand-in control-plane object the test marks initialized, as a
//! hosted control plane would be) and a MachineDeployment of two: two
//! servers are claimed and installed, and their Nodes (registered in the
//! workload cluster by the test, standing in for the kubelets a simulated
//! server does not run) carry metalherd's provider IDs, so Cluster API's
//! Machines are Running, as `clusterctl move` requires.
//!
//! The move, as a site does it: metalherd stops on the source; `metalherd
//! export` / `metalherd import` carry its own objects (servers, class,
//! Secrets, with their status) to the target; `clusterctl move` carries
//! Cluster API's objects (and the MetalherdCluster, MetalherdMachines and
//! templates, which arrive without status); metalherd starts on the
//! target. There the MetalherdMachines find their servers by the claim and
//! report them provisioned again, Cluster API's Machines are Running
//! again, and no server was powered on, booted or asked to reimage.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::capi_objects::{
    apply_in, condition, get_in, list_in, metalherd_cluster_in, template_in, wait,
};
use common::cluster_api::ClusterApi;
use common::control_plane::{ControlPlane, Options};
use common::server::Server;
use common::sim_rack::{SimRack, bmc_credentials};
use serde_json::{Value, json};

const NS: &str = "moved";

/// The metalherd CLI: (success, stdout, stderr).
fn run_metalherd(data_dir: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(common::metalherd_bin())
        .arg("--data-dir")
        .arg(data_dir.join("cli"))
        .args(args)
        .output()
        .unwrap();
    let (o, e) = common::server::text(&out);
    (out.status.success(), o, e)
}

fn metalherd(cp: &ControlPlane, boot_port: u16, assets: &std::path::Path) -> Server {
    common::capi_objects::provider_metalherd(cp, boot_port, assets)
}

fn install_provider(cp: &ControlPlane) {
    common::capi_objects::install_provider(cp);
    // What `clusterctl init` marks on the CRDs it installs: the kinds
    // `clusterctl move` discovers.
    let (ok, out, err) = cp.kubectl(&["get", "crd", "-o", "name"]);
    assert!(ok, "{err}");
    for crd in out
        .lines()
        .filter(|c| c.ends_with(".cluster.x-k8s.io") || c.ends_with("cluster.x-k8s.io"))
    {
        let (ok, _, err) =
            cp.kubectl(&["label", "--overwrite", crd, "clusterctl.cluster.x-k8s.io="]);
        assert!(ok, "{err}");
    }
}

#[test]
fn clusterctl_move_reprovisions_nothing() {
    let source = common::control_plane::shared();
    let target = ControlPlane::start(Options::default());
    target.install_crds();
    source.namespace(NS);
    target.namespace(NS);
    let capi_source =
        ClusterApi::start_with_feature_gates(&source, "KubeadmBootstrapFormatIgnition=true");
    let capi_target =
        ClusterApi::start_with_feature_gates(&target, "KubeadmBootstrapFormatIgnition=true");
    install_provider(&source);
    install_provider(&target);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = common::rack::boot_files();
    let assets = dir.path().join("assets");
    let boot_port = common::free_port();
    let rack = rt.block_on(SimRack::start(
        "mv",
        2,
        64,
        &format!("http://127.0.0.1:{boot_port}"),
    ));
    let mut mh = metalherd(&source, boot_port, &assets);
    let mh_log = mh.dir.path().join("serve.log");
    let logs = || {
        format!(
            "{}\n---- metalherd (source) log tail:\n{}",
            capi_source.logs_tail(20),
            common::rack::tail(&std::fs::read_to_string(&mh_log).unwrap_or_default(), 30)
        )
    };

    // The servers and the class, in their own namespace.
    let (user, pw) = bmc_credentials();
    let mut objects = vec![json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "bmc", "namespace": NS},
        "stringData": {"username": user, "password": pw}})];
    let mut join = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "join", "namespace": NS},
        "stringData": {"token": "abcdef.0123456789abcdef"}});
    objects.push(join.take());
    let mut class = common::rack::flatcar_class(dir.path());
    class["metadata"]["namespace"] = json!(NS);
    objects.push(class);
    for i in 0..2 {
        let mut m = rack.manifest(i, "bmc", json!({"pool": "mv"}));
        m["metadata"]["namespace"] = json!(NS);
        objects.push(m);
    }
    // The cluster: an externally managed control plane, its workload
    // cluster reached through the source API server itself.
    let workload_kc = std::fs::read_to_string(source.admin_kubeconfig()).unwrap();
    let label = json!({"cluster.x-k8s.io/cluster-name": "mv"});
    objects.extend([
        json!({"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
            "metadata": {"name": "mv-kubeconfig", "namespace": NS, "labels": label},
            "stringData": {"value": workload_kc}}),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
            "metadata": {"name": "mv-bootstrap", "namespace": NS, "labels": label},
            "stringData": {"format": "ignition", "value": json!({"ignition": {"version": "3.3.0"}}).to_string()}}),
        metalherd_cluster_in(NS, "mv", "127.0.64.99"),
        template_in(NS, "mv", "mv"),
        common::capi_objects::external_control_plane(NS, "mv-cp", "127.0.64.99"),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "mv", "namespace": NS},
            "spec": {
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalherdCluster", "name": "mv"},
                "controlPlaneRef": common::capi_objects::external_control_plane_ref("mv-cp")}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": "mv-md", "namespace": NS,
                "annotations": {"machineset.cluster.x-k8s.io/skip-preflight-checks": "All"}},
            "spec": {"clusterName": "mv", "replicas": 2,
                "selector": {"matchLabels": {"md": "mv-md"}},
                "template": {"metadata": {"labels": {"md": "mv-md"}}, "spec": {"clusterName": "mv", "version": "v1.34.4",
                    "bootstrap": {"dataSecretName": "mv-bootstrap"},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalherdMachineTemplate", "name": "mv"}}}}}),
    ]);
    apply_in(&source, &objects);
    common::capi_objects::initialize_external_control_plane(&source, NS, "mv-cp");

    // Both servers claimed and installed.
    let mms = wait(
        "two MetalherdMachines provisioned",
        Duration::from_secs(120),
        &logs,
        || {
            let mms = list_in(&source, NS, "metalherdmachines", "");
            (mms.len() == 2
                && mms
                    .iter()
                    .all(|m| m["status"]["initialization"]["provisioned"] == true))
            .then_some(mms)
        },
    );
    // The kubelets' registration, standing in for the servers' own: a
    // Node per server with metalherd's provider ID.
    for mm in &mms {
        let server = mm["status"]["machineRef"]["name"].as_str().unwrap();
        let node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": server},
            "spec": {"providerID": mm["spec"]["providerID"]}});
        let (code, body) = source.req("POST", "/api/v1/nodes", Some(&node));
        assert!(code < 300, "{code} {body}");
    }
    let machines_running = |cp: &ControlPlane| {
        let ms = list_in(cp, NS, "machines.cluster.x-k8s.io", "");
        (ms.len() == 2
            && ms.iter().all(|m| {
                m["status"]["phase"] == "Running" && m["status"]["nodeRef"]["name"].is_string()
            }))
        .then_some(ms)
    };
    wait(
        "Cluster API's Machines Running on the source",
        Duration::from_secs(120),
        &logs,
        || machines_running(&source),
    );
    let boots_before: Vec<usize> = rack
        .machines
        .iter()
        .map(|m| m.boots.load(Ordering::SeqCst))
        .collect();
    let power_ons_before: Vec<u64> = rack
        .machines
        .iter()
        .map(|m| u64::from(m.bmc.counters().power_ons))
        .collect();
    let servers_before: Vec<Value> = (0..2)
        .map(|i| {
            get_in(
                &source,
                NS,
                "machines.metalherd.dev",
                &rack.machines[i].name,
            )
        })
        .collect();

    // The move: metalherd stops on the source, its objects go by export
    // and import, Cluster API's by clusterctl move.
    mh.guard.kill9();
    let backup = tempfile::tempdir().unwrap();
    let file = backup.path().join("metalherd.yaml");
    let (src_kc, dst_kc) = (source.admin_kubeconfig(), target.admin_kubeconfig());
    let out = run_metalherd(
        backup.path(),
        &[
            "export",
            "--kubeconfig",
            src_kc.to_str().unwrap(),
            "-o",
            file.to_str().unwrap(),
        ],
    );
    assert!(out.0, "metalherd export: {}{}", out.1, out.2);
    let out = run_metalherd(
        backup.path(),
        &[
            "import",
            "-f",
            file.to_str().unwrap(),
            "--kubeconfig",
            dst_kc.to_str().unwrap(),
        ],
    );
    assert!(out.0, "metalherd import: {}{}", out.1, out.2);
    let t0 = Instant::now();
    let clusterctl = common::cluster_api::bin("clusterctl");
    let moved = source
        .command(&clusterctl)
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
        .env("HOME", backup.path())
        .args(["move", "--namespace", NS, "--kubeconfig"])
        .arg(&src_kc)
        .arg("--to-kubeconfig")
        .arg(&dst_kc)
        .output()
        .unwrap();
    let (o, e) = common::server::text(&moved);
    assert!(
        moved.status.success(),
        "clusterctl move:\n{o}{e}\n{}",
        logs()
    );
    eprintln!("clusterctl move: {:.1} s\n{o}", t0.elapsed().as_secs_f64());
    assert!(
        list_in(&source, NS, "metalherdmachines", "").is_empty(),
        "left on the source"
    );

    // metalherd starts on the target.
    let mh2 = metalherd(&target, boot_port, &assets);
    let logs2 = || {
        format!(
            "{}\n---- metalherd (target) log tail:\n{}",
            capi_target.logs_tail(20),
            common::rack::tail(&mh2.log(), 30)
        )
    };
    let mms2 = wait(
        "the moved MetalherdMachines provisioned on the target",
        Duration::from_secs(120),
        &logs2,
        || {
            let mms = list_in(&target, NS, "metalherdmachines", "");
            (mms.len() == 2
                && mms.iter().all(|m| {
                    m["status"]["initialization"]["provisioned"] == true
                        && condition(m, "Ready").is_some_and(|c| c["status"] == "True")
                }))
            .then_some(mms)
        },
    );
    for (before, after) in mms.iter().zip(&mms2) {
        assert_eq!(before["spec"]["providerID"], after["spec"]["providerID"]);
        assert_eq!(
            before["status"]["machineRef"],
            after["status"]["machineRef"]
        );
    }
    wait(
        "Cluster API's Machines Running on the target",
        Duration::from_secs(120),
        &logs2,
        || machines_running(&target),
    );
    // A few seconds more for anything that would start a boot.
    std::thread::sleep(Duration::from_secs(5));
    let boots_after: Vec<usize> = rack
        .machines
        .iter()
        .map(|m| m.boots.load(Ordering::SeqCst))
        .collect();
    let power_ons_after: Vec<u64> = rack
        .machines
        .iter()
        .map(|m| u64::from(m.bmc.counters().power_ons))
        .collect();
    assert_eq!(
        boots_before, boots_after,
        "a server booted again after the move"
    );
    assert_eq!(
        power_ons_before, power_ons_after,
        "a server was powered on after the move"
    );
    for (i, before) in servers_before.iter().enumerate() {
        let after = get_in(
            &target,
            NS,
            "machines.metalherd.dev",
            &rack.machines[i].name,
        );
        assert_eq!(after["status"]["phase"], "Ready", "{after:#}");
        assert_eq!(
            before["metadata"]["labels"], after["metadata"]["labels"],
            "claim changed"
        );
        assert_eq!(
            before["status"]["provisionedRevision"], after["status"]["provisionedRevision"],
            "reinstalled"
        );
        assert!(
            after["metadata"]["annotations"]["metalherd.dev/reimage"].is_null(),
            "a reimage was asked for: {after:#}"
        );
    }
    drop(mh2);
    drop(rack);
}
