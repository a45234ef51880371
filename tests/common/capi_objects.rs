//! Cluster API objects for the provider's stories: kubectl apply/get/list
//! against a test's kube-apiserver, the provider's object shapes, and a
//! loopback file server for artifacts a node config fetches.

use serde_json::{Value, json};

use super::control_plane::ControlPlane;

/// The namespace the stories use.
pub const NS: &str = "default";
/// The provider's API group.
pub const INFRA: &str = "infrastructure.cluster.x-k8s.io";

pub fn apply(cp: &ControlPlane, docs: &[Value]) {
    apply_in(cp, docs)
}

/// `kubectl apply` of objects (their namespaces are their own).
pub fn apply_in(cp: &ControlPlane, docs: &[Value]) {
    if let Err(e) = try_apply(cp, docs) {
        panic!("kubectl apply: {e}");
    }
}

/// `kubectl apply` of objects; `Err` carries kubectl's output when the
/// API server refused them.
pub fn try_apply(cp: &ControlPlane, docs: &[Value]) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("objects.json");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": docs});
    std::fs::write(&f, list.to_string()).unwrap();
    let (ok, out, err) = cp.kubectl(&["apply", "-f", f.to_str().unwrap()]);
    if ok {
        Ok(())
    } else {
        Err(format!("{out}{err}"))
    }
}

/// Cluster `cluster`'s MachineDeployment `<cluster>-md` of `replicas` at
/// `version`: bootstrap from the KubeadmConfigTemplate `<cluster>-md`,
/// machines from the MetalherdMachineTemplate `<cluster>-md`.
pub fn kubeadm_machine_deployment(cluster: &str, replicas: u32, version: &str) -> Value {
    let md = format!("{cluster}-md");
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
        "metadata": {"name": md, "namespace": NS},
        "spec": {"clusterName": cluster, "replicas": replicas,
            "selector": {"matchLabels": {"md": md}},
            "template": {"metadata": {"labels": {"md": md}}, "spec": {"clusterName": cluster, "version": version,
                "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": md}},
                "infrastructureRef": infra("MetalherdMachineTemplate", &md)}}}})
}

pub fn get(cp: &ControlPlane, resource: &str, name: &str) -> Value {
    get_in(cp, NS, resource, name)
}

pub fn get_in(cp: &ControlPlane, ns: &str, resource: &str, name: &str) -> Value {
    let (ok, out, err) = cp.kubectl(&["get", resource, name, "-n", ns, "-o", "json"]);
    if !ok {
        return json!({"error": err});
    }
    serde_json::from_str(&out).unwrap_or(Value::Null)
}

pub fn list(cp: &ControlPlane, resource: &str, selector: &str) -> Vec<Value> {
    list_in(cp, NS, resource, selector)
}

pub fn list_in(cp: &ControlPlane, ns: &str, resource: &str, selector: &str) -> Vec<Value> {
    let mut args = vec!["get", resource, "-n", ns, "-o", "json"];
    if !selector.is_empty() {
        args.extend(["-l", selector]);
    }
    let (ok, out, err) = cp.kubectl(&args);
    assert!(ok, "kubectl get {resource}: {err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    v["items"].as_array().cloned().unwrap_or_default()
}

pub fn condition<'a>(o: &'a Value, type_: &str) -> Option<&'a Value> {
    o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

pub fn infra(kind: &str, name: &str) -> Value {
    json!({"apiGroup": INFRA, "kind": kind, "name": name})
}

pub fn template(name: &str, pool: &str) -> Value {
    template_in(NS, name, pool)
}

/// A MetalherdMachineTemplate selecting `pool=<pool>`, class `flatcar`.
pub fn template_in(ns: &str, name: &str, pool: &str) -> Value {
    json!({"apiVersion": format!("{INFRA}/v1alpha1"), "kind": "MetalherdMachineTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"template": {"spec": {
            "hostSelector": {"matchLabels": {"pool": pool}},
            "classRef": {"name": "flatcar"}}}}})
}

pub fn metalherd_cluster(name: &str, host: &str) -> Value {
    metalherd_cluster_in(NS, name, host)
}

pub fn metalherd_cluster_in(ns: &str, name: &str, host: &str) -> Value {
    json!({"apiVersion": format!("{INFRA}/v1alpha1"), "kind": "MetalherdCluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"controlPlaneEndpoint": {"host": host, "port": 6443}}})
}

/// A loopback HTTP server answering GET /<name> with its body, for the
/// test's lifetime; returns `127.0.0.1:port`.
pub fn serve_files(files: &[(&'static str, &'static [u8])]) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let files: Vec<(&'static str, &'static [u8])> = files.to_vec();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 2048];
            let n = conn.read(&mut buf).unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]);
            let path = req.split_whitespace().nth(1).unwrap_or("/");
            let reply = match files.iter().find(|(f, _)| path == format!("/{f}")) {
                Some((_, body)) => {
                    let mut r = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    )
                    .into_bytes();
                    r.extend_from_slice(body);
                    r
                }
                None => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_vec(),
            };
            let _ = conn.write_all(&reply);
        }
    });
    addr
}

/// The stand-in for an externally managed control plane (a hosted one, or
/// one a site runs itself): a CRD of group `controlplane.test.metalherd.dev`
/// under the v1beta2 contract label, whose status the test sets.
pub const EXTERNAL_CP_GROUP: &str = "controlplane.test.metalherd.dev";

pub fn install_external_control_plane_crd(cp: &ControlPlane) {
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("externalcontrolplanes.{EXTERNAL_CP_GROUP}"),
            "labels": {"cluster.x-k8s.io/v1beta2": "v1alpha1", "clusterctl.cluster.x-k8s.io": ""}},
        "spec": {"group": EXTERNAL_CP_GROUP, "scope": "Namespaced",
            "names": {"plural": "externalcontrolplanes", "singular": "externalcontrolplane", "kind": "ExternalControlPlane", "listKind": "ExternalControlPlaneList"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    apply_in(cp, &[crd]);
    let (ok, _, err) = cp.kubectl(&[
        "wait",
        "--for=condition=Established",
        &format!("crd/externalcontrolplanes.{EXTERNAL_CP_GROUP}"),
    ]);
    assert!(ok, "{err}");
}

pub fn external_control_plane(ns: &str, name: &str, host: &str) -> Value {
    json!({"apiVersion": format!("{EXTERNAL_CP_GROUP}/v1alpha1"), "kind": "ExternalControlPlane",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"version": "v1.34.4", "controlPlaneEndpoint": {"host": host, "port": 6443}}})
}

pub fn external_control_plane_ref(name: &str) -> Value {
    json!({"apiGroup": EXTERNAL_CP_GROUP, "kind": "ExternalControlPlane", "name": name})
}

/// Mark the stand-in control plane initialized, as its provider would.
pub fn initialize_external_control_plane(cp: &ControlPlane, ns: &str, name: &str) {
    let status = json!({"status": {"initialization": {"controlPlaneInitialized": true},
        "externalManagedControlPlane": true, "version": "v1.34.4"}});
    let (code, body) = cp.raw(
        "PATCH",
        &format!(
            "/apis/{EXTERNAL_CP_GROUP}/v1alpha1/namespaces/{ns}/externalcontrolplanes/{name}/status"
        ),
        Some(&cp.token),
        Some(&status),
        "application/merge-patch+json",
    );
    assert!(code < 300, "{code} {body}");
}

/// Wait until `f` holds (printing how long it took), else panic with
/// `logs()`.
pub fn wait<T>(
    what: &str,
    timeout: std::time::Duration,
    logs: &dyn Fn() -> String,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let t0 = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            eprintln!("{what}: after {:.1} s", t0.elapsed().as_secs_f64());
            return v;
        }
        if t0.elapsed() > timeout {
            panic!("timed out waiting for {what}\n{}", logs());
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// Install metalherd's provider (deploy/cluster-api/: CRDs and roles) and
/// the stand-in control-plane CRD, and wait until the CRDs are served.
pub fn install_provider(cp: &ControlPlane) {
    let dir = super::repo_root().join("deploy/cluster-api");
    let (ok, out, err) = cp.kubectl(&["apply", "-f", dir.to_str().unwrap()]);
    assert!(ok, "provider CRDs and roles: {out}{err}");
    let (ok, _, err) = cp.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/metalherdmachines.infrastructure.cluster.x-k8s.io",
        "crd/metalherdclusters.infrastructure.cluster.x-k8s.io",
        "crd/metalherdmachinetemplates.infrastructure.cluster.x-k8s.io",
        "crd/metalherdclustertemplates.infrastructure.cluster.x-k8s.io",
    ]);
    assert!(ok, "{err}");
    install_external_control_plane_crd(cp);
}

/// The simulated rack's `flatcar` class (boot files under `dir`) whose
/// kubelet and kubeadm come from a loopback file server, pinned by sha512
/// (the node config's Ignition fetches them).
pub fn class_with_served_binaries(dir: &std::path::Path) -> Value {
    const BINARIES: [(&str, &[u8]); 2] = [
        ("kubelet", b"#!/bin/sh\necho kubelet\n"),
        ("kubeadm", b"#!/bin/sh\necho kubeadm\n"),
    ];
    let files = serve_files(&BINARIES);
    let mut class = super::rack::flatcar_class(dir);
    for (name, body) in BINARIES {
        use sha2::Digest;
        let hex: String = sha2::Sha512::digest(body)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        class["spec"]["kubernetes"][name] =
            json!({"url": format!("http://{files}/{name}"), "sha512": hex});
    }
    class
}

/// metalherd as the provider: `serve --store kubernetes` against `cp` with
/// `controller.clusterApi: true`, its boot server on 127.0.0.1:`boot_port`
/// serving `assets` (the simulated rack boots from it).
pub fn provider_metalherd(
    cp: &ControlPlane,
    boot_port: u16,
    assets: &std::path::Path,
) -> super::server::Server {
    let config = super::rack::controller_config(
        "  clusterApi: true\n",
        &format!(
            "boot:\n  listen: 127.0.0.1:{boot_port}\n  assetsDir: {}\n  waitSeconds: 1\n",
            assets.display()
        ),
    );
    let kc = cp.metalherd_kubeconfig();
    super::server::Server::start_with_args(
        Some(&config),
        &[
            "--store",
            "kubernetes",
            "--kubeconfig",
            kc.to_str().unwrap(),
        ],
    )
}
