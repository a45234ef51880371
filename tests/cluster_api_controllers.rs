//! Story: Cluster API's own controllers (core, the kubeadm bootstrap
//! provider CABPK, the kubeadm control plane provider KCP), built from the
//! Go module proxy, run against a real kube-apiserver
//! (tests/common/cluster_api.rs). Their webhooks default and refuse what
//! the release's do, and they reconcile: a Cluster whose infrastructure (a
//! stand-in infrastructure provider declared here, with no controller of
//! its own) says it is provisioned, a KubeadmControlPlane that creates its
//! first control plane Machine, CABPK rendering that Machine's kubeadm
//! init as Ignition into its bootstrap Secret, and a worker Machine whose
//! KubeadmConfig waits for the control plane. No VM: nothing boots.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::cluster_api::ClusterApi;
use common::control_plane::{ControlPlane, KUBE_VERSION, shared};
use common::proc::wait_for;
use serde_json::{Value, json};

/// The stand-in infrastructure provider's group and the contract its one
/// served version (v1alpha1) keeps: the label core reads to know which
/// version to ask for.
const INFRA: &str = "infrastructure.smoke.metalherd.dev";

fn infra_crd(kind: &str, plural: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{INFRA}"),
                     "labels": {"cluster.x-k8s.io/v1beta2": "v1alpha1"}},
        "spec": {
            "group": INFRA, "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                      "listKind": format!("{kind}List")},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}],
        },
    })
}

fn create(cp: &ControlPlane, path: &str, doc: &Value) -> Value {
    let (code, body) = cp.req("POST", path, Some(doc));
    assert_eq!(code, 201, "create {path}: {body}");
    body
}

fn get(cp: &ControlPlane, path: &str) -> Value {
    let (code, body) = cp.req("GET", path, None);
    assert_eq!(code, 200, "get {path}: {body}");
    body
}

/// The condition `type` of an object's `status.conditions` (v1beta2's
/// metav1.Conditions).
fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Poll `f` for up to 60 s; on timeout panic with `what`, the last value
/// seen and the managers' logs.
fn eventually<T>(capi: &ClusterApi, what: &str, mut f: impl FnMut() -> (Option<T>, Value)) -> T {
    let mut last = Value::Null;
    wait_for(Duration::from_secs(60), || {
        let (v, seen) = f();
        last = seen;
        v
    })
    .unwrap_or_else(|| {
        panic!(
            "{what}: never happened; last seen:\n{last:#}\n{}",
            capi.logs_tail(30)
        )
    })
}

fn decode(b64: &Value) -> String {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.as_str().unwrap_or_default())
        .expect("base64");
    String::from_utf8(bytes).expect("utf-8")
}

#[test]
fn cluster_api_controllers_reconcile_against_kube_apiserver() {
    let cp = shared();
    // Without the gate CABPK's and KCP's webhooks refuse `format: ignition`.
    let capi = ClusterApi::start_with_feature_gates(&cp, "KubeadmBootstrapFormatIgnition=true");
    let ns = common::unique("capi");
    cp.namespace(&ns);
    let dir = tempfile::tempdir().unwrap();
    for (kind, plural) in [
        ("SmokeCluster", "smokeclusters"),
        ("SmokeMachine", "smokemachines"),
        ("SmokeMachineTemplate", "smokemachinetemplates"),
    ] {
        std::fs::write(
            dir.path().join(format!("{plural}.json")),
            infra_crd(kind, plural).to_string(),
        )
        .unwrap();
    }
    let (ok, out, err) = cp.kubectl(&["apply", "-f", dir.path().to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = cp.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd",
        &format!("smokeclusters.{INFRA}"),
        &format!("smokemachines.{INFRA}"),
        &format!("smokemachinetemplates.{INFRA}"),
    ]);
    assert!(ok, "{out}{err}");
    let infra = format!("/apis/{INFRA}/v1alpha1/namespaces/{ns}");
    let capi_ns = format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{ns}");
    let cabpk_ns = format!("/apis/bootstrap.cluster.x-k8s.io/v1beta2/namespaces/{ns}");
    let kcp_ns = format!("/apis/controlplane.cluster.x-k8s.io/v1beta2/namespaces/{ns}");
    let meta = |name: &str| json!({"name": name, "namespace": ns});
    let infra_ref = |kind: &str, name: &str| json!({"apiGroup": INFRA, "kind": kind, "name": name});

    // The infrastructure, provisioned as its provider would say it is: the
    // v1beta2 contract's status.initialization.provisioned and an endpoint
    // (a port nothing listens on: no workload cluster answers).
    let endpoint = json!({"host": "127.0.0.1", "port": common::free_port()});
    create(
        &cp,
        &format!("{infra}/smokeclusters"),
        &json!({
        "apiVersion": format!("{INFRA}/v1alpha1"), "kind": "SmokeCluster",
        "metadata": meta("c1"), "spec": {"controlPlaneEndpoint": endpoint}}),
    );
    let (code, body) = cp.raw(
        "PATCH",
        &format!("{infra}/smokeclusters/c1/status"),
        Some(&cp.token),
        Some(&json!({"status": {"initialization": {"provisioned": true}}})),
        "application/merge-patch+json",
    );
    assert_eq!(code, 200, "{body}");
    create(
        &cp,
        &format!("{infra}/smokemachinetemplates"),
        &json!({
        "apiVersion": format!("{INFRA}/v1alpha1"), "kind": "SmokeMachineTemplate",
        "metadata": meta("c1-cp"), "spec": {"template": {"spec": {}}}}),
    );
    create(
        &cp,
        &format!("{capi_ns}/clusters"),
        &json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": meta("c1"),
        "spec": {
            "infrastructureRef": infra_ref("SmokeCluster", "c1"),
            "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io",
                                "kind": "KubeadmControlPlane", "name": "c1"},
        }}),
    );
    create(
        &cp,
        &format!("{kcp_ns}/kubeadmcontrolplanes"),
        &json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
        "metadata": meta("c1"),
        "spec": {
            "replicas": 1, "version": KUBE_VERSION,
            "machineTemplate": {"spec": {"infrastructureRef": infra_ref("SmokeMachineTemplate", "c1-cp")}},
            "kubeadmConfigSpec": {"format": "ignition"},
        }}),
    );

    // Core's webhooks: a Machine gets its cluster's label and a version
    // with its "v" (defaulting); a version that is not semver is refused
    // (validation).
    create(
        &cp,
        &format!("{infra}/smokemachines"),
        &json!({
        "apiVersion": format!("{INFRA}/v1alpha1"), "kind": "SmokeMachine",
        "metadata": meta("w0"), "spec": {}}),
    );
    let worker = |name: &str, version: &str| {
        json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "metadata": meta(name),
        "spec": {
            "clusterName": "c1", "version": version,
            "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io",
                                        "kind": "KubeadmConfig", "name": name}},
            "infrastructureRef": infra_ref("SmokeMachine", name),
        }})
    };
    let (code, body) = cp.req(
        "POST",
        &format!("{capi_ns}/machines"),
        Some(&worker("bad", "v1.x.4")),
    );
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("must be a valid semantic version"),
        "{body}"
    );
    let w0 = create(
        &cp,
        &format!("{capi_ns}/machines"),
        &worker("w0", KUBE_VERSION.trim_start_matches('v')),
    );
    assert_eq!(
        w0["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"], "c1",
        "{w0}"
    );
    assert_eq!(w0["spec"]["version"], KUBE_VERSION, "{w0}");

    // CABPK's webhook refuses a file with both content and contentFrom.
    let config = |name: &str, spec: Value| {
        json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
        "metadata": {"name": name, "namespace": ns, "ownerReferences": [{
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "w0",
            "uid": w0["metadata"]["uid"], "controller": true}]},
        "spec": spec})
    };
    let (code, body) = cp.req(
        "POST",
        &format!("{cabpk_ns}/kubeadmconfigs"),
        Some(&config(
            "bad",
            json!({"format": "ignition", "files": [{
                "path": "/etc/x", "content": "x",
                "contentFrom": {"secret": {"name": "s", "key": "k"}}}]}),
        )),
    );
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("only one of content or contentFrom"),
        "{body}"
    );
    create(
        &cp,
        &format!("{cabpk_ns}/kubeadmconfigs"),
        &config("w0", json!({"format": "ignition"})),
    );

    // Core: the Cluster's infrastructure is provisioned, its endpoint
    // taken from the infrastructure.
    let cluster = eventually(
        &capi,
        "core marks Cluster c1's infrastructure provisioned",
        || {
            let c = get(&cp, &format!("{capi_ns}/clusters/c1"));
            let done = c["status"]["initialization"]["infrastructureProvisioned"] == true
                && c["spec"]["controlPlaneEndpoint"] == endpoint;
            (done.then(|| c.clone()), c)
        },
    );
    assert!(
        cluster["metadata"]["finalizers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "cluster.cluster.x-k8s.io"),
        "{cluster:#}"
    );

    // Conversion: the stored v1beta2 objects read as v1beta1 through core's
    // and CABPK's /convert (the CRDs' conversion webhooks).
    let old = get(
        &cp,
        &format!("/apis/cluster.x-k8s.io/v1beta1/namespaces/{ns}/clusters/c1"),
    );
    assert_eq!(old["apiVersion"], "cluster.x-k8s.io/v1beta1", "{old:#}");
    let infra_ref = &old["spec"]["infrastructureRef"];
    assert_eq!(infra_ref["kind"], "SmokeCluster", "{old:#}");
    assert!(
        infra_ref["apiVersion"]
            .as_str()
            .unwrap_or("")
            .starts_with(INFRA),
        "{old:#}"
    );
    let old = get(
        &cp,
        &format!("/apis/bootstrap.cluster.x-k8s.io/v1beta1/namespaces/{ns}/kubeadmconfigs/w0"),
    );
    assert_eq!(
        old["apiVersion"], "bootstrap.cluster.x-k8s.io/v1beta1",
        "{old:#}"
    );
    assert_eq!(old["spec"]["format"], "ignition", "{old:#}");

    // CABPK: the worker's config waits, without bootstrap data. Its message
    // names what it waited for first: the Cluster's infrastructure when
    // CABPK saw w0 before the Cluster's update (its cache lags core's
    // write), else the control plane. CABPK 1.14.2 writes the control
    // plane wait only when the condition is missing
    // (handleClusterNotInitialized), so the first message stays.
    let w0_config = eventually(&capi, "CABPK says worker w0 waits", || {
        let c = get(&cp, &format!("{cabpk_ns}/kubeadmconfigs/w0"));
        let waits = condition(&c, "DataSecretAvailable").is_some_and(|d| {
            d["status"] == "False"
                && d["reason"] == "NotAvailable"
                && d["message"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("Waiting for Cluster")
        });
        (waits.then(|| c.clone()), c)
    });
    eprintln!(
        "CABPK on worker w0: {}",
        condition(&w0_config, "DataSecretAvailable").unwrap()
    );

    // KCP: creates the first control plane Machine, its KubeadmConfig and
    // its infrastructure machine cloned from the template.
    let cp0 = eventually(&capi, "KCP creates a control plane Machine", || {
        let l = get(
            &cp,
            &format!("{capi_ns}/machines?labelSelector=cluster.x-k8s.io/control-plane-name%3Dc1"),
        );
        let m = l["items"].as_array().and_then(|i| i.first()).cloned();
        (m, l)
    });
    let cp0_name = cp0["metadata"]["name"].as_str().unwrap().to_string();
    assert_eq!(
        cp0["metadata"]["ownerReferences"][0]["kind"], "KubeadmControlPlane",
        "{cp0:#}"
    );
    let infra_name = cp0["spec"]["infrastructureRef"]["name"].as_str().unwrap();
    get(&cp, &format!("{infra}/smokemachines/{infra_name}"));

    // CABPK renders kubeadm init as Ignition into the bootstrap Secret,
    // after generating the cluster's CA; core then sees bootstrap data.
    let config_name = cp0["spec"]["bootstrap"]["configRef"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let secret_name = eventually(
        &capi,
        "CABPK writes the control plane's bootstrap data",
        || {
            let c = get(&cp, &format!("{cabpk_ns}/kubeadmconfigs/{config_name}"));
            let name = c["status"]["dataSecretName"].as_str().map(str::to_string);
            (name, c)
        },
    );
    let secret = get(
        &cp,
        &format!("/api/v1/namespaces/{ns}/secrets/{secret_name}"),
    );
    assert_eq!(decode(&secret["data"]["format"]), "ignition", "{secret:#}");
    let ignition: Value = serde_json::from_str(&decode(&secret["data"]["value"]))
        .unwrap_or_else(|e| panic!("bootstrap data is not Ignition JSON: {e}"));
    let version = ignition["ignition"]["version"].as_str().unwrap_or_default();
    assert!(!version.is_empty(), "{ignition:#}");
    assert!(ignition.to_string().contains("kubeadm"), "{ignition:#}");
    eprintln!(
        "CABPK's Ignition for {cp0_name}: spec {version}, {} bytes",
        ignition.to_string().len()
    );
    get(&cp, &format!("/api/v1/namespaces/{ns}/secrets/c1-ca"));
    eventually(
        &capi,
        "core sees the control plane Machine's bootstrap data",
        || {
            let m = get(&cp, &format!("{capi_ns}/machines/{cp0_name}"));
            let done = m["status"]["initialization"]["bootstrapDataSecretCreated"] == true
                && m["spec"]["bootstrap"]["dataSecretName"] == secret_name.as_str();
            (done.then_some(()), m)
        },
    );
    // The worker still has no bootstrap data: it joins only once the
    // control plane is initialized, which needs a Node nothing here runs.
    let w0_config = get(&cp, &format!("{cabpk_ns}/kubeadmconfigs/w0"));
    assert!(
        w0_config["status"]["dataSecretName"].is_null(),
        "{w0_config:#}"
    );
}
