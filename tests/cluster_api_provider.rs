//! Story: metalherd as Cluster API's infrastructure provider, on the
//! simulated rack (tests/common/sim_rack.rs: in-process Redfish BMCs and
//! servers that walk the boot path at protocol level; no VM), with a real
//! kube-apiserver and etcd (tests/common/control_plane.rs) and Cluster
//! API's real core, kubeadm bootstrap and kubeadm control plane managers
//! (tests/common/cluster_api.rs, built from the Go module proxy).
//!
//! - A Cluster with a KubeadmControlPlane of one machine and a
//!   MachineDeployment of two workers: the MetalherdCluster is provisioned,
//!   Cluster API stamps a MetalherdMachine for the control plane, the
//!   kubeadm bootstrap provider writes its Ignition (`kubeadm init`),
//!   metalherd claims a server for it, installs it and reports the
//!   contract's status; the control-plane Machine reaches `Provisioned`
//!   with metalherd's providerID. The node config the server gets is
//!   rendered from the bootstrap Secret and run through the real Ignition:
//!   `/etc/kubeadm.sh`, `/etc/kubeadm.yml` (the cluster's endpoint), the
//!   kubelet's provider ID. The workers wait for the control plane (no
//!   kubelet runs on a simulated server, so it never initializes): their
//!   MetalherdMachines say so, and claim nothing.
//! - A pool: a MachineDeployment of three with a bootstrap Secret of its
//!   own, created at once, gets three different servers; scaled to four,
//!   the fourth says why it waits (`NoServerAvailable`, the pool's
//!   counts); scaled to two, the released server is powered off,
//!   unclaimed and labelled for the MachineDeployment, and scaled to three
//!   again it is taken back and reinstalled in place (a reimage).
//! - Pausing: `cluster.x-k8s.io/paused` on a MetalherdMachine shows as its
//!   Paused condition.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::cluster_api::ClusterApi;
use common::control_plane::ControlPlane;
use common::rack::put_secret;
use common::server::Server;
use common::sim_rack::{SimRack, bmc_credentials};
use serde_json::json;

use common::capi_objects::{
    NS, apply, condition, get, infra, kubeadm_machine_deployment, list, metalherd_cluster, template,
};

/// Wait until `f` holds, with the managers' and metalherd's logs on failure.
fn wait<T>(
    what: &str,
    timeout: Duration,
    capi: &ClusterApi,
    metalherd: &Server,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            eprintln!("{what}: after {:.1} s", t0.elapsed().as_secs_f64());
            return v;
        }
        if t0.elapsed() > timeout {
            panic!(
                "timed out waiting for {what}\n{}\n---- metalherd log tail:\n{}",
                capi.logs_tail(25),
                common::rack::tail(&metalherd.log(), 40)
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn cluster_api_provider_on_the_simulated_rack() {
    let cp = common::control_plane::shared();
    let capi = ClusterApi::start_with_feature_gates(&cp, "KubeadmBootstrapFormatIgnition=true");
    common::capi_objects::install_provider(&cp);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = common::rack::boot_files();
    let boot_port = common::free_port();
    let boot_url = format!("http://127.0.0.1:{boot_port}");
    let rack = rt.block_on(SimRack::start("capi", 5, 63, &boot_url));
    let metalherd =
        common::capi_objects::provider_metalherd(&cp, boot_port, &dir.path().join("assets"));

    // The servers: one for the control plane, three for the pool, a spare.
    let (user, pw) = bmc_credentials();
    put_secret(&*cp, "bmc", &user, &pw);
    common::rack::put_join_secret(&*cp);
    let class = common::capi_objects::class_with_served_binaries(dir.path());
    let mut servers = vec![class];
    for i in 0..5 {
        let pool = match i {
            0 => "cp",
            4 => "spare",
            _ => "pool",
        };
        servers.push(rack.manifest(i, "bmc", json!({"pool": pool})));
    }
    apply(&cp, &servers);

    control_plane_story(&cp, &capi, &metalherd, &rack);
    pool_story(&cp, &capi, &metalherd);
    drop(metalherd);
    drop(rack);
}

/// A Cluster with a KubeadmControlPlane of one and two workers.
fn control_plane_story(cp: &ControlPlane, capi: &ClusterApi, mh: &Server, rack: &SimRack) {
    let endpoint = rack.machines[0].ip.to_string();
    let applied = Instant::now();
    apply(
        cp,
        &[
            metalherd_cluster("c1", &endpoint),
            template("c1-cp", "cp"),
            template("c1-md", "workers-none"),
            json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
                "metadata": {"name": "c1-cp", "namespace": NS},
                "spec": {"replicas": 1, "version": "v1.34.4",
                    "machineTemplate": {"spec": {"infrastructureRef": infra("MetalherdMachineTemplate", "c1-cp")}},
                    "kubeadmConfigSpec": {"format": "ignition"}}}),
            json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
                "metadata": {"name": "c1-md", "namespace": NS},
                "spec": {"template": {"spec": {"format": "ignition"}}}}),
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": "c1", "namespace": NS},
                "spec": {
                    "clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]}, "services": {"cidrBlocks": ["10.96.0.0/24"]}},
                    "infrastructureRef": infra("MetalherdCluster", "c1"),
                    "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "c1-cp"}}}),
            kubeadm_machine_deployment("c1", 2, "v1.34.4"),
        ],
    );

    // The infrastructure cluster is provisioned and Cluster API sees it.
    wait(
        "Cluster c1's infrastructure provisioned",
        Duration::from_secs(60),
        capi,
        mh,
        || {
            let c = get(cp, "cluster.cluster.x-k8s.io", "c1");
            (c["status"]["initialization"]["infrastructureProvisioned"] == true).then_some(())
        },
    );
    let mc = get(cp, "metalherdcluster", "c1");
    assert_eq!(
        mc["status"]["initialization"]["provisioned"], true,
        "{mc:#}"
    );
    let c = get(cp, "cluster.cluster.x-k8s.io", "c1");
    assert_eq!(
        c["spec"]["controlPlaneEndpoint"]["host"],
        endpoint.as_str(),
        "{c:#}"
    );

    // The control plane's MetalherdMachine claims the cp server, which
    // installs, and the contract's status follows.
    let mm = wait(
        "the control plane's MetalherdMachine provisioned",
        Duration::from_secs(180),
        capi,
        mh,
        || {
            list(cp, "metalherdmachines", "cluster.x-k8s.io/control-plane")
                .into_iter()
                .find(|m| m["status"]["initialization"]["provisioned"] == true)
        },
    );
    let server = mm["status"]["machineRef"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(server, rack.machines[0].name);
    assert_eq!(
        mm["spec"]["providerID"],
        format!("metalherd://{NS}/{server}")
    );
    assert_eq!(condition(&mm, "Ready").unwrap()["status"], "True", "{mm:#}");
    assert_eq!(
        condition(&mm, "Paused").unwrap()["status"],
        "False",
        "{mm:#}"
    );
    let addrs = mm["status"]["addresses"].as_array().unwrap();
    assert!(
        addrs
            .iter()
            .any(|a| a["type"] == "InternalIP" && a["address"] == endpoint.as_str()),
        "{addrs:?}"
    );
    let s = get(cp, "machines.metalherd.dev", &server);
    assert_eq!(s["status"]["phase"], "Ready", "{s:#}");
    let secret_name = s["spec"]["bootstrapDataSecretRef"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        rack.machines[0]
            .boots
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );

    // Cluster API's Machine: bootstrap and infrastructure ready, the
    // providerID copied.
    let owner = mm["metadata"]["ownerReferences"][0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let m = wait(
        "the control-plane Machine Provisioned",
        Duration::from_secs(60),
        capi,
        mh,
        || {
            let m = get(cp, "machines.cluster.x-k8s.io", &owner);
            (m["status"]["phase"] == "Provisioned").then_some(m)
        },
    );
    eprintln!(
        "cluster api: kubectl apply of the Cluster to its control-plane Machine Provisioned: {:.1} s",
        applied.elapsed().as_secs_f64()
    );
    assert_eq!(
        m["spec"]["providerID"],
        format!("metalherd://{NS}/{server}"),
        "{m:#}"
    );

    // The node config the server is handed: the kubeadm bootstrap
    // provider's data, translated and merged, run by the real Ignition.
    node_config_runs_in_real_ignition(cp, mh, &server, &secret_name, &endpoint);

    // The workers wait for the control plane to initialize, and say so.
    let workers = wait(
        "two worker MetalherdMachines",
        Duration::from_secs(60),
        capi,
        mh,
        || {
            let w = list(
                cp,
                "metalherdmachines",
                "cluster.x-k8s.io/deployment-name=c1-md",
            );
            (w.len() == 2 && w.iter().all(|m| condition(m, "Ready").is_some())).then_some(w)
        },
    );
    for w in &workers {
        let ready = condition(w, "Ready").unwrap();
        // Cluster API creates a worker's MetalherdMachine before the
        // Machine that owns it, and that Machine's bootstrap data waits
        // for the control plane.
        let reason = ready["reason"].as_str().unwrap_or_default();
        assert!(
            ["WaitingForOwner", "WaitingForBootstrapData"].contains(&reason),
            "{w:#}"
        );
        eprintln!(
            "worker {}: {reason}: {}",
            w["metadata"]["name"], ready["message"]
        );
        assert!(w["status"]["machineRef"].is_null(), "{w:#}");
    }
}

/// Render the claimed server's node config from the objects in the API
/// server, as the boot service does, and apply it with the real Ignition.
fn node_config_runs_in_real_ignition(
    cp: &ControlPlane,
    mh: &Server,
    server: &str,
    secret: &str,
    endpoint: &str,
) {
    let machine: metalherd::api::Machine =
        serde_json::from_value(get(cp, "machines.metalherd.dev", server)).unwrap();
    let class: metalherd::api::MachineClass =
        serde_json::from_value(get(cp, "machineclasses.metalherd.dev", "flatcar")).unwrap();
    let s: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(get(cp, "secret", secret)).unwrap();
    assert_eq!(
        s.data.as_ref().unwrap().get("format").map(|f| f.0.clone()),
        Some(b"ignition".to_vec())
    );
    // What `metalherd render` prints for the claimed server, from the
    // objects in the API server, secrets shown and redacted.
    let render = |show: bool| {
        let mut args = vec!["render", "ignition", server, "--stage", "node"];
        if show {
            args.push("--show-secrets");
        }
        let out = mh.cli(&args);
        let (o, e) = common::server::text(&out);
        assert!(out.status.success(), "metalherd render: {o}{e}");
        o
    };
    let json = render(true);
    let shown = render(false);
    common::ignition::validate(&json).unwrap();
    // The library's render from the same objects is the same config.
    let secrets =
        metalherd::ignition::RenderSecrets::from_bootstrap_secret(&machine, Some(&s)).unwrap();
    let ctx = common::ignition::url_ctx();
    let config = metalherd::ignition::render(
        metalherd::ignition::Stage::Node,
        &machine,
        &class,
        &secrets,
        &ctx,
    )
    .unwrap();
    let lib: serde_json::Value =
        serde_json::from_value(serde_json::to_value(&config).unwrap()).unwrap();
    let cli: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        cli["storage"]["files"].as_array().map(Vec::len),
        lib["storage"]["files"].as_array().map(Vec::len)
    );
    let root = tempfile::tempdir().unwrap();
    // The bootstrap files name their owner (`root:root`), which Ignition
    // looks up in the node's own user database.
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    std::fs::write(
        root.path().join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(root.path().join("etc/group"), "root:x:0:\n").unwrap();
    let log = common::ignition::apply(&json, root.path()).unwrap_or_else(|e| panic!("{e}"));
    let read = |p: &str| {
        std::fs::read_to_string(root.path().join(p.trim_start_matches('/')))
            .unwrap_or_else(|e| panic!("{p}: {e}\n{log}"))
    };
    let script = read("/etc/kubeadm.sh");
    assert!(
        script.contains("kubeadm init --config /etc/kubeadm.yml"),
        "{script}"
    );
    assert!(
        script.contains("/run/cluster-api/bootstrap-success.complete"),
        "{script}"
    );
    let kubeadm = read("/etc/kubeadm.yml");
    assert!(kubeadm.contains("kind: ClusterConfiguration"), "{kubeadm}");
    assert!(kubeadm.contains(&format!("{endpoint}:6443")), "{kubeadm}");
    assert!(read("/etc/kubernetes/pki/ca.crt").contains("BEGIN CERTIFICATE"));
    assert_eq!(
        read("/etc/default/kubelet").trim(),
        format!("KUBELET_EXTRA_ARGS=--provider-id=metalherd://{NS}/{server}")
    );
    let dropin = read("/etc/systemd/system/kubeadm.service.d/10-metalherd.conf");
    assert!(
        dropin.contains("After=network-online.target containerd.service"),
        "{dropin}"
    );
    let unit = read("/etc/systemd/system/kubeadm.service");
    assert!(
        unit.contains("ExecStart=/bin/bash /etc/kubeadm.sh"),
        "{unit}"
    );
    // The booted call-home waits for Cluster API's join, not metalherd's,
    // and only follows a join that succeeded.
    let booted = read("/etc/systemd/system/metalherd-booted.service");
    assert!(
        booted.contains(
            "After=network-online.target kubelet.service kubeadm.service\nRequires=kubeadm.service\n"
        ),
        "{booted}"
    );
    // metalherd's own join is not there.
    assert!(!root.path().join("etc/metalherd/kubeadm-join.yaml").exists());
    // The redacted form hides the bootstrap files (a CA key is in them).
    let key = read("/etc/kubernetes/pki/ca.key");
    let enc = metalherd::ignition::spec::data_url(key.as_bytes());
    assert!(
        !shown.contains(&enc) && shown.contains("redacted"),
        "bootstrap data shown unredacted"
    );
}

/// A MachineDeployment of three with its own bootstrap data, on a Cluster
/// with no control plane: claims, a short pool, release and reuse.
fn pool_story(cp: &ControlPlane, capi: &ClusterApi, mh: &Server) {
    let bootstrap = json!({"ignition": {"version": "3.3.0"},
        "storage": {"files": [{"path": "/etc/pool-joined", "contents": {"source": "data:,yes"}}]}});
    let (code, body) = cp.req(
        "POST",
        &format!("/api/v1/namespaces/{NS}/secrets"),
        Some(&json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "pool-bootstrap", "namespace": NS},
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"format": "ignition", "value": bootstrap.to_string()}})),
    );
    assert!(code < 300, "{code} {body}");
    let md = |replicas: i32| {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": "pool-md", "namespace": NS},
            "spec": {"clusterName": "pool", "replicas": replicas,
                "selector": {"matchLabels": {"md": "pool-md"}},
                "template": {"metadata": {"labels": {"md": "pool-md"}}, "spec": {"clusterName": "pool", "version": "v1.34.4",
                    "bootstrap": {"dataSecretName": "pool-bootstrap"},
                    "infrastructureRef": infra("MetalherdMachineTemplate", "pool")}}}})
    };
    apply(
        cp,
        &[
            metalherd_cluster("pool", "127.0.63.99"),
            template("pool", "pool"),
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": "pool", "namespace": NS},
                "spec": {"infrastructureRef": infra("MetalherdCluster", "pool")}}),
            md(3),
        ],
    );
    let sel = "cluster.x-k8s.io/deployment-name=pool-md";
    let claimed = |want: usize| {
        move || {
            let mms = list(cp, "metalherdmachines", sel);
            let servers: Vec<String> = mms
                .iter()
                .filter_map(|m| m["status"]["machineRef"]["name"].as_str().map(String::from))
                .collect();
            (mms.len() == want && servers.len() == want).then_some(servers)
        }
    };
    let servers = wait(
        "three pool servers claimed",
        Duration::from_secs(120),
        capi,
        mh,
        claimed(3),
    );
    let distinct: BTreeSet<&String> = servers.iter().collect();
    assert_eq!(distinct.len(), 3, "one server claimed twice: {servers:?}");
    // Every claim is on the server too, once.
    let labelled = list(
        cp,
        "machines.metalherd.dev",
        "infrastructure.cluster.x-k8s.io/metalherdmachine",
    );
    let pool_claims: Vec<_> = labelled
        .iter()
        .filter(|m| m["metadata"]["labels"]["pool"] == "pool")
        .collect();
    assert_eq!(pool_claims.len(), 3);

    // A fourth replica: the pool is short, and the MetalherdMachine says so.
    apply(cp, &[md(4)]);
    let short = wait(
        "the fourth replica reports a short pool",
        Duration::from_secs(60),
        capi,
        mh,
        || {
            list(cp, "metalherdmachines", sel)
                .into_iter()
                .find(|m| condition(m, "Ready").is_some_and(|c| c["reason"] == "NoServerAvailable"))
        },
    );
    let msg = condition(&short, "Ready").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("3 Machines match hostSelector, 3 claimed"),
        "{msg}"
    );

    // Down to two: one server released, powered off, remembered.
    apply(cp, &[md(2)]);
    let kept = wait(
        "two pool machines left",
        Duration::from_secs(120),
        capi,
        mh,
        claimed(2),
    );
    let released = wait(
        "a pool server released for reuse",
        Duration::from_secs(60),
        capi,
        mh,
        || {
            list(
                cp,
                "machines.metalherd.dev",
                "infrastructure.cluster.x-k8s.io/released-from",
            )
            .into_iter()
            .find(|m| m["metadata"]["labels"]["pool"] == "pool")
        },
    );
    let released_name = released["metadata"]["name"].as_str().unwrap().to_string();
    assert!(!kept.contains(&released_name));
    assert_eq!(
        released["metadata"]["labels"]["infrastructure.cluster.x-k8s.io/released-from"],
        "MachineDeployment.pool-md"
    );
    assert_eq!(released["spec"]["online"], false, "{released:#}");
    assert!(released["spec"]["bootstrapDataSecretRef"].is_null());

    // Back to three: the released server is taken back (the reuse rule)
    // and reinstalled in place.
    apply(cp, &[md(3)]);
    let back = wait(
        "the released server claimed again",
        Duration::from_secs(120),
        capi,
        mh,
        || {
            list(cp, "metalherdmachines", sel).into_iter().find(|m| {
                m["status"]["machineRef"]["name"] == released_name.as_str()
                    && !kept.contains(&released_name)
            })
        },
    );
    assert_eq!(back["status"]["reused"], true, "{back:#}");
    let s = get(cp, "machines.metalherd.dev", &released_name);
    assert!(
        s["metadata"]["annotations"]["metalherd.dev/reimage"]
            .as_str()
            .is_some_and(|v| v.starts_with("cluster-api:")),
        "{s:#}"
    );

    // Pausing one MetalherdMachine shows on it.
    let name = back["metadata"]["name"].as_str().unwrap().to_string();
    let (ok, _, err) = cp.kubectl(&[
        "annotate",
        "-n",
        NS,
        "metalherdmachine",
        &name,
        "cluster.x-k8s.io/paused=",
    ]);
    assert!(ok, "{err}");
    wait(
        "the Paused condition",
        Duration::from_secs(30),
        capi,
        mh,
        || {
            let m = get(cp, "metalherdmachine", &name);
            condition(&m, "Paused")
                .is_some_and(|c| c["status"] == "True")
                .then_some(())
        },
    );
}
