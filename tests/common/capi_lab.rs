//! Cluster API on the virtual rack: the lab's kube-apiserver as Cluster
//! API's management cluster, the managers and metalherd (`serve --store
//! kubernetes` with `controller.clusterApi: true`) in the rack's namespace,
//! and kubectl helpers with failure messages that carry every log that may
//! say why (the managers', metalherd's, each VM's console).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::capi_objects::NS;
use super::cluster_api::ClusterApi;
use super::lab::{Lab, tail};
use super::proc::{ChildGuard, wait_for};

/// The line metalherd logs once it leads and runs its controllers.
pub const LEADING: &str = "leading: starting the boot services and controllers";

/// The provider's CRDs.
const PROVIDER_CRDS: [&str; 4] = [
    "crd/metalherdmachines.infrastructure.cluster.x-k8s.io",
    "crd/metalherdclusters.infrastructure.cluster.x-k8s.io",
    "crd/metalherdmachinetemplates.infrastructure.cluster.x-k8s.io",
    "crd/metalherdclustertemplates.infrastructure.cluster.x-k8s.io",
];

/// Cluster API's managers with `format: ignition` allowed, and metalherd's
/// provider manifests (deploy/cluster-api) applied and established, plus
/// `extra_crds` (applied by the caller first, waited for here).
pub fn start_cluster_api(lab: &Lab, extra_crds: &[&str]) -> ClusterApi {
    let capi = ClusterApi::start_with_feature_gates(lab, "KubeadmBootstrapFormatIgnition=true");
    let provider = super::repo_root().join("deploy/cluster-api");
    let (ok, out, err) = lab.kubectl(&["apply", "-f", provider.to_str().unwrap()]);
    assert!(ok, "provider CRDs and roles: {out}{err}");
    let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    args.extend(PROVIDER_CRDS);
    args.extend(extra_crds);
    let (ok, _, err) = lab.kubectl(&args);
    assert!(ok, "{err}");
    capi
}

fn log_path(lab: &Lab) -> PathBuf {
    lab.run.join("replica-capi.log")
}

/// metalherd's log (the replica [`metalherd`] started).
pub fn log(lab: &Lab) -> String {
    std::fs::read_to_string(log_path(lab)).unwrap_or_default()
}

/// metalherd in Kubernetes mode in the rack's namespace, as
/// provision_in_kubernetes_mode_on_a_vm's replicas run, with `config`;
/// returns once it leads.
pub fn metalherd(lab: &Lab, config: &Path) -> ChildGuard {
    let kubeconfig = lab.run.join("kube/admin.kubeconfig").display().to_string();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &lab.ns])
        .arg(super::metalherd_bin())
        .arg("--data-dir")
        .arg(lab.run.join("data-capi"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{}", super::free_port()),
        ])
        .arg("--config")
        .arg(config)
        .args(super::rack::replica_args(&kubeconfig))
        .env("METALHERD_LOG", "info");
    let proc = ChildGuard::spawn("metalherd (Kubernetes mode)", &mut cmd, &log_path(lab));
    wait_for(Duration::from_secs(60), || {
        log(lab).contains(LEADING).then_some(())
    })
    .unwrap_or_else(|| panic!("metalherd did not lead:\n{}", log(lab)));
    proc
}

/// The lab's class and its Machines with no class (Available, a pool the
/// MetalherdMachineTemplates select by label), applied; `labels` adds
/// labels to a Machine by name (`("vm1", "role: control-plane")`).
pub fn declare_pool(lab: &Lab, labels: &[(&str, &str)]) {
    lab.write_pool(&[], labels);
    for f in ["class.yaml", "machines.yaml"] {
        let (ok, out, err) = lab.kubectl(&["apply", "-f", &lab.run.join(f).to_string_lossy()]);
        assert!(ok, "kubectl apply -f {f}: {out}{err}");
    }
}

/// `kubectl apply` of `docs` in the lab's API server.
pub fn apply(lab: &Lab, docs: &[Value]) {
    let f = lab.run.join("capi-objects.json");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": docs});
    std::fs::write(&f, list.to_string()).unwrap();
    let (ok, out, err) = lab.kubectl(&["apply", "-f", f.to_str().unwrap()]);
    assert!(ok, "kubectl apply: {out}{err}");
}

/// One object in [`NS`], or `{"error": ...}`.
pub fn get(lab: &Lab, resource: &str, name: &str) -> Value {
    let (ok, out, err) = lab.kubectl(&["get", resource, name, "-n", NS, "-o", "json"]);
    if !ok {
        return json!({"error": err});
    }
    serde_json::from_str(&out).unwrap_or(Value::Null)
}

/// Every object of a resource in [`NS`] (none when kubectl fails).
pub fn list(lab: &Lab, resource: &str) -> Vec<Value> {
    let (ok, out, _) = lab.kubectl(&["get", resource, "-n", NS, "-o", "json"]);
    let v: Value = serde_json::from_str(&out)
        .ok()
        .filter(|_| ok)
        .unwrap_or_default();
    v["items"].as_array().cloned().unwrap_or_default()
}

/// The MetalherdMachine that claimed `server` (its `status.machineRef`),
/// if one has.
pub fn claim_of(lab: &Lab, server: &str) -> Option<Value> {
    list(lab, "metalherdmachines")
        .into_iter()
        .find(|m| m["status"]["machineRef"]["name"] == server)
}

/// Whether Cluster `cluster`'s `status.initialization` has every one of
/// `fields` true (`infrastructureProvisioned`, `controlPlaneInitialized`).
pub fn cluster_initialized(lab: &Lab, cluster: &str, fields: &[&str]) -> bool {
    let c = get(lab, "cluster.cluster.x-k8s.io", cluster);
    fields
        .iter()
        .all(|f| c["status"]["initialization"][*f] == true)
}

/// Whether a Node (as JSON) has Ready=True.
pub fn node_ready(n: &Value) -> bool {
    n["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// Wait until `f` holds; on timeout, panic with the managers' and
/// metalherd's log tails and the console tails of VMs 1..=`vms`.
pub fn wait<T>(
    what: &str,
    timeout: Duration,
    lab: &Lab,
    capi: &ClusterApi,
    vms: usize,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let t0 = Instant::now();
    if let Some(v) = wait_for(timeout, &mut f) {
        eprintln!("lab: {what} after {:.1} s", t0.elapsed().as_secs_f64());
        return v;
    }
    let consoles: String = (1..=vms)
        .map(|i| {
            format!(
                "---- vm{i} console tail:\n{}\n",
                tail(&lab.console(i), 5000)
            )
        })
        .collect();
    panic!(
        "timed out waiting for {what}\n{}\n---- metalherd log tail:\n{}\n{consoles}",
        capi.logs_tail(30),
        tail(&log(lab), 6000),
    );
}

/// metalherd with the provider on and no target cluster (the lab's config
/// without its controller's kubeconfig, the lab's own cluster): a cluster
/// Cluster API builds does not exist before its control plane does, so a
/// server is provisioned when its `booted` call-home arrives. Stops the
/// lab's own metalherd first.
pub fn metalherd_without_target(lab: &mut Lab) -> ChildGuard {
    lab.kill_metalherd();
    let config = lab.run.join("config.yaml");
    let mut yaml: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    let removed = yaml["controller"]
        .as_mapping_mut()
        .and_then(|m| m.remove("kubeconfig"));
    assert!(
        removed.is_some(),
        "the lab's config named no target cluster"
    );
    std::fs::write(&config, serde_yaml::to_string(&yaml).unwrap()).unwrap();
    lab.merge_config("controller: {clusterApi: true}");
    metalherd(lab, &config)
}

/// A KubeadmControlPlane's `kubeadmConfigSpec` (`format: ignition`) with
/// the patience an emulated control plane needs.
pub fn emulated_kubeadm_config_spec() -> Value {
    let cri = "unix:///run/containerd/containerd.sock";
    // An emulated VM starts etcd and kube-apiserver in minutes, not
    // seconds; a control-plane join waits on etcd too.
    let timeouts = json!({"controlPlaneComponentHealthCheckSeconds": 1200,
        "kubeletHealthCheckSeconds": 600, "kubernetesAPICallSeconds": 300,
        "etcdAPICallSeconds": 600, "tlsBootstrapSeconds": 1200, "discoverySeconds": 1200});
    // Its kube-apiserver answers slowly while other VMs install beside
    // it: with the default 10 s renew deadline (5 s per request) the
    // controller manager loses its lease over and over and its CSR
    // approver, which lets the other kubelets in, never runs for long.
    let leases = json!([
        {"name": "leader-elect-lease-duration", "value": "120s"},
        {"name": "leader-elect-renew-deadline", "value": "90s"}]);
    // kube-apiserver's health checks give etcd 2 s by default: failed
    // livez checks had the kubelet restart it in the middle of kubeadm
    // init's last phases. kubeadm patches (its `patches.directory`) give
    // the static pods' probes more patience on the same grounds.
    let etcd_checks = json!([
        {"name": "etcd-healthcheck-timeout", "value": "30s"},
        {"name": "etcd-readycheck-timeout", "value": "30s"}]);
    let patches = "/etc/kubernetes/patches";
    let patient = |container: &str| {
        json!({"path": format!("{patches}/{container}+strategic.yaml"), "owner": "root:root",
            "permissions": "0644",
            "content": format!("spec:\n  containers:\n  - name: {container}\n    livenessProbe: {{failureThreshold: 120, timeoutSeconds: 60}}\n    startupProbe: {{failureThreshold: 120, timeoutSeconds: 60}}\n")})
    };
    let files: Vec<Value> = [
        "kube-apiserver",
        "etcd",
        "kube-controller-manager",
        "kube-scheduler",
    ]
    .map(patient)
    .into();
    let registration = json!({"nodeRegistration": {"criSocket": cri},
        "patches": {"directory": patches}, "timeouts": timeouts});
    json!({"format": "ignition",
        "files": files,
        "clusterConfiguration": {
            "apiServer": {"extraArgs": etcd_checks},
            "controllerManager": {"extraArgs": leases.clone()},
            "scheduler": {"extraArgs": leases}},
        "initConfiguration": registration.clone(),
        // KCP wants the control-plane timeout the same in both.
        "joinConfiguration": registration})
}

/// The kubeconfig Cluster API wrote for `cluster`'s workload cluster
/// (`<cluster>-kubeconfig`), checked to name `server`, saved in the run
/// directory.
pub fn workload_kubeconfig(lab: &Lab, cluster: &str, server: &str) -> PathBuf {
    let secret = get(lab, "secret", &format!("{cluster}-kubeconfig"));
    let value = secret["data"]["value"].as_str().unwrap_or_else(|| {
        panic!("no kubeconfig in {cluster}-kubeconfig: {secret:#}");
    });
    use base64::Engine;
    let kubeconfig = base64::engine::general_purpose::STANDARD
        .decode(value)
        .unwrap();
    assert!(
        String::from_utf8_lossy(&kubeconfig).contains(server),
        "the workload kubeconfig's server is not {server}"
    );
    let path = lab.run.join(format!("{cluster}.kubeconfig"));
    std::fs::write(&path, &kubeconfig).unwrap();
    path
}

/// `kubectl` against a workload cluster, from inside the rack: (success,
/// stdout, stderr).
pub fn workload(lab: &Lab, kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let kubectl = super::control_plane::kube_bin("kubectl");
    let mut all = vec!["--kubeconfig", kubeconfig.to_str().unwrap()];
    all.extend(args);
    let out = lab.cmd_in_ns(kubectl.to_str().unwrap(), &all);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `kubectl get ARGS -o json` against a workload cluster: its items (none
/// when kubectl fails).
pub fn workload_list(lab: &Lab, kubeconfig: &Path, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["get"];
    all.extend(args);
    all.extend(["-o", "json"]);
    let (ok, out, _) = workload(lab, kubeconfig, &all);
    let v: Value = serde_json::from_str(&out)
        .ok()
        .filter(|_| ok)
        .unwrap_or_default();
    v["items"].as_array().cloned().unwrap_or_default()
}

/// [`emulated_kubeadm_config_spec`] for a stacked control plane that
/// grows beyond one server (control-plane joins with etcd membership) on
/// emulated CPUs, as the highly available and upgrade stories run it.
pub fn emulated_stacked_control_plane_spec() -> Value {
    let mut spec = emulated_kubeadm_config_spec();
    // etcd's defaults (100 ms heartbeats, 1 s elections) are for members
    // on real CPUs; emulated ones miss them and elect over and over.
    spec["clusterConfiguration"]["etcd"] = json!({"local": {"extraArgs": [
        {"name": "heartbeat-interval", "value": "500"},
        {"name": "election-timeout", "value": "5000"}]}});
    // The joining servers have one vCPU (kubeadm asks for two): a joining
    // server with two took both of the host's cores while it booted, and
    // the first member's etcd answered kubeadm's member list (one try, 2 s)
    // too late, which failed the join.
    spec["joinConfiguration"]["nodeRegistration"]["ignorePreflightErrors"] = json!(["NumCPU"]);
    // ECDSA keys: every TLS handshake (kubeadm's etcd client makes a new
    // connection per call, 2 s each) costs an emulated CPU far less than
    // with RSA.
    spec["clusterConfiguration"]["encryptionAlgorithm"] = json!("ECDSA-P256");
    // kubeadm's output on the console too: a failed join says why there.
    spec["files"].as_array_mut().unwrap().push(json!({
        "path": "/etc/systemd/system/kubeadm.service.d/10-console.conf",
        "owner": "root:root", "permissions": "0644",
        "content": "[Service]\nStandardOutput=journal+console\nStandardError=journal+console\n"}));
    // Nor kube-proxy nor CoreDNS: every emulated cycle goes to the
    // control plane.
    spec["initConfiguration"]["skipPhases"] = json!(["addon/kube-proxy", "addon/coredns"]);
    spec
}

/// Panics when one of `nodes`' `kubeadm.service` failed (its console,
/// VM i+1 for `nodes[i]`, says so): nothing retries it, so waiting longer
/// would only time out.
pub fn no_failed_kubeadm(lab: &Lab, nodes: &[&str]) {
    for (i, name) in nodes.iter().enumerate() {
        let console = lab.console(i + 1);
        if let Some(line) = console
            .lines()
            .find(|l| l.contains("Failed to start") && l.contains("kubeadm.service"))
        {
            panic!(
                "{name}'s kubeadm.service failed: {line}\n---- {name} console tail:\n{}",
                tail(&console, 4000)
            );
        }
    }
}

/// The servers claimed by a MetalherdMachine (their `status.machineRef`).
pub fn claimed(lab: &Lab) -> std::collections::BTreeSet<String> {
    list(lab, "metalherdmachines")
        .iter()
        .filter_map(|m| m["status"]["machineRef"]["name"].as_str().map(String::from))
        .collect()
}

/// Runs `f` while a thread gives the emulated servers whose control plane
/// runs (a control-plane Machine Running) the host's CPU first (nice
/// -10), then those with a running kubelet or a control plane joining
/// (0), then the others, still installing (10): on 2 cores a joining
/// server otherwise starves the etcd it joins, and kubeadm's etcd calls
/// (2 s each; since v1.34.4 a member list stops at its first failed
/// call) fail the join. Every thread of each of `nodes`' QEMU processes,
/// every 5 s.
pub fn with_serving_members_first<T>(lab: &Lab, nodes: &[&str], f: impl FnOnce() -> T) -> T {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    let prioritize = || {
        while !stop.load(Ordering::SeqCst) {
            let machines = list(lab, "machines.cluster.x-k8s.io");
            let running = |control_plane: bool| -> std::collections::BTreeSet<String> {
                machines
                    .iter()
                    .filter(|m| m["status"]["phase"] == "Running")
                    .filter(|m| {
                        !control_plane
                            || m["metadata"]["labels"]
                                .get("cluster.x-k8s.io/control-plane")
                                .is_some()
                    })
                    .filter_map(|m| m["status"]["nodeRef"]["name"].as_str().map(String::from))
                    .collect()
            };
            let (serving, kubelet) = (running(true), running(false));
            // Servers of control-plane machines still joining: once its
            // learner is promoted a joining server's etcd is part of the
            // quorum, and starving it stalls every write of the cluster.
            let control_plane_infra: std::collections::BTreeSet<&str> = machines
                .iter()
                .filter(|m| {
                    m["metadata"]["labels"]
                        .get("cluster.x-k8s.io/control-plane")
                        .is_some()
                })
                .filter_map(|m| m["spec"]["infrastructureRef"]["name"].as_str())
                .collect();
            let joining: std::collections::BTreeSet<String> = list(lab, "metalherdmachines")
                .iter()
                .filter(|mm| {
                    mm["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| control_plane_infra.contains(n))
                })
                .filter_map(|mm| {
                    mm["status"]["machineRef"]["name"]
                        .as_str()
                        .map(String::from)
                })
                .collect();
            for name in nodes {
                let out = Command::new("pgrep")
                    .args(["-f", &format!("guest={}-{name},", lab.ns)])
                    .output()
                    .unwrap();
                let nice = if serving.contains(*name) {
                    "-10"
                } else if kubelet.contains(*name) || joining.contains(*name) {
                    "0"
                } else {
                    "10"
                };
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"));
                    for task in tasks.into_iter().flatten().flatten() {
                        let _ = Command::new("renice")
                            .args(["-n", nice, "-p"])
                            .arg(task.file_name())
                            .output();
                    }
                }
            }
            for _ in 0..50 {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    std::thread::scope(|scope| {
        scope.spawn(prioritize);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        stop.store(true, Ordering::SeqCst);
        result.unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}
