//! Story: deploy metalherd from the checked-in manifests, on a cluster
//! (deploy/kubernetes/, `kubectl apply -k`) or a host (deploy/systemd/).
//!
//! Without a cluster to apply them to, this checks what can be checked
//! here: kubectl's own kustomize renders deploy/kubernetes/ (with a
//! generated token key, as the kustomization's header says); every
//! rendered object parses into its k8s-openapi type and serializes back to
//! the same document (a misspelled field would be lost on the way); the
//! CRDs (deploy/kubernetes/crds.yaml, generated) are exactly what
//! `metalherd crds` prints; the Role grants exactly
//! the requests the Kubernetes store backend makes, recorded on the wire
//! (a tower layer in the kube client) while the store's shared suite and a
//! sweep of every store call over every kind run against a stand-in API
//! server; the Deployment's probes name a path the server serves without a
//! token; its config file parses as metalherd's; and `systemd-analyze
//! verify` accepts the systemd unit without a warning. The admission
//! webhook's pieces: tests/deploy_webhook.rs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use common::deploy::{docs, named, render, typed};
use common::server::{Server, text};
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
#[allow(unused_imports)]
use metalherd::api::Kind;
#[allow(unused_imports)]
use metalherd::store::{Deleted, ListOptions, Selector, Store, StoreError, WatchEvent};
use serde_json::{Value, json};

#[allow(unused_macros, dead_code)]
#[path = "../src/store/suite.rs"]
mod suite;

/// (verb, apiGroup, resource) as RBAC names a request.
type Rule = (String, String, String);

/// The RBAC terms of one request: verb from the method (and `watch=`),
/// group and resource (with subresource) from the path.
fn rule_of(method: &http::Method, uri: &http::Uri) -> Rule {
    let segs: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    let (group, rest) = match segs.as_slice() {
        ["api", _v, rest @ ..] => (String::new(), rest),
        ["apis", g, _v, rest @ ..] => (g.to_string(), rest),
        _ => panic!("not an API path: {uri}"),
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] => rest,
        rest => rest,
    };
    let (resource, named) = match rest {
        [r] => (r.to_string(), false),
        [r, _name] => (r.to_string(), true),
        [r, _name, sub] => (format!("{r}/{sub}"), true),
        _ => panic!("unexpected path {uri}"),
    };
    let watch = uri
        .query()
        .unwrap_or("")
        .split('&')
        .any(|q| q == "watch=true" || q == "watch=1");
    let verb = match (method.as_str(), named) {
        ("GET", true) => "get",
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        (m, _) => panic!("unexpected method {m} {uri}"),
    };
    (verb.to_string(), group, resource)
}

/// A Kubernetes store on a fresh stand-in, recording every request.
async fn recording_store(calls: Arc<Mutex<BTreeSet<Rule>>>) -> (Server, Arc<dyn Store>) {
    let s = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let kc = s.kubeconfig();
    metalherd::cluster::kube::install_crypto_provider();
    let kc = kube::config::Kubeconfig::from_yaml(&kc).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    // The suite also writes in `lab`, which must exist first; made outside
    // the recording, as an admin would.
    let plain = kube::Client::try_from(config.clone()).unwrap();
    metalherd::store::kubernetes::KubernetesStore::new(plain, None)
        .create(
            Kind::Namespace,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lab"}}),
        )
        .await
        .unwrap();
    let record =
        tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
            calls
                .lock()
                .unwrap()
                .insert(rule_of(req.method(), req.uri()));
            req
        });
    let client = kube::client::ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&record)
        .build();
    let store = metalherd::store::kubernetes::KubernetesStore::new(client, None);
    (s, Arc::new(store))
}

fn example(name: &str) -> Value {
    let p = common::repo_root().join("deploy/examples").join(name);
    serde_yaml::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// One valid object of each kind the backend writes in a namespace
/// (`None` for Namespaces: cluster-scoped, beyond a namespaced Role, and
/// never written by metalherd in Kubernetes mode).
fn sample(kind: Kind) -> Option<Value> {
    const T: &str = "2026-01-02T03:04:05Z";
    Some(match kind {
        Kind::Machine => suite::machine("sweep", json!({})),
        Kind::MachineClass => example("class-flatcar.yaml"),
        Kind::MachineSet => example("machineset.yaml"),
        Kind::DiscoveredMachine => json!({"apiVersion": "metalherd.dev/v1alpha1",
            "kind": "DiscoveredMachine", "metadata": {"name": "52-54-00-aa-bb-cc"},
            "spec": {"macAddress": "52:54:00:aa:bb:cc", "firstSeen": T, "lastSeen": T}}),
        Kind::Secret => json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "sweep"}, "stringData": {"k": "v"}}),
        Kind::Event => json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "sweep.1"},
            "involvedObject": {"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
                "namespace": "default", "name": "sweep"},
            "type": "Normal", "reason": "Sweep", "message": "m", "count": 1}),
        Kind::Lease => json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "sweep"}, "spec": {"holderIdentity": "a"}}),
        Kind::Namespace => return None,
    })
}

/// Every store call, on every kind.
async fn sweep(s: &dyn Store) {
    for kind in Kind::ALL {
        let Some(obj) = sample(kind) else { continue };
        let created = s
            .create(kind, obj)
            .await
            .unwrap_or_else(|e| panic!("create {kind}: {e}"));
        let (ns, name) = metalherd::store::key_of(&created);
        let got = s.get(kind, &ns, &name).await.unwrap();
        let list = s.list(kind, &ListOptions::default()).await.unwrap();
        let mut w = s
            .watch(kind, &ListOptions::default(), Some(&list.resource_version))
            .await
            .unwrap();
        let mut next = got.clone();
        next["metadata"]["labels"] = json!({"swept": "yes"});
        let updated = s.update(kind, next).await.unwrap();
        assert!(matches!(w.next().await, Some(Ok(WatchEvent::Modified(_)))));
        drop(s.watch(kind, &ListOptions::default(), None).await.unwrap());
        if kind.has_status() {
            let mut st = updated.clone();
            st["status"] = json!({});
            s.update_status(kind, st).await.unwrap();
        }
        s.delete(kind, &ns, &name).await.unwrap();
    }
}

fn rules_of(rules: &[PolicyRule]) -> BTreeSet<Rule> {
    let mut out = BTreeSet::new();
    for r in rules {
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    out.insert((v.clone(), g.clone(), res.clone()));
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_role_grants_exactly_what_the_store_backend_requests() {
    let calls = Arc::new(Mutex::new(BTreeSet::new()));
    macro_rules! run_suite {
        ($($t:ident),*) => {$(
            let (server, s) = recording_store(calls.clone()).await;
            suite::$t(s).await;
            drop(server);
        )*};
    }
    run_suite!(
        create_sets_metadata_and_rejects_duplicates,
        stale_resource_version_is_a_conflict,
        generation_moves_only_on_spec_changes,
        finalizers_delay_deletion_until_removed,
        list_filters_by_namespace_and_labels,
        invalid_objects_are_refused_and_change_nothing,
        secret_string_data_is_stored_as_base64_data,
        watch_resumed_from_a_version_sees_every_later_change_once,
        watch_filters_by_namespace_and_labels,
        a_version_the_store_never_gave_is_refused
    );
    let (server, s) = recording_store(calls.clone()).await;
    sweep(s.as_ref()).await;
    drop(server);
    let recorded = calls.lock().unwrap().clone();
    let rendered = tokio::task::spawn_blocking(render).await.unwrap();
    let role: Role = typed(&rendered, "Role");
    assert_eq!(
        rules_of(role.rules.as_deref().unwrap_or_default()),
        recorded,
        "deploy/kubernetes/rbac.yaml's Role against the requests recorded"
    );
}

/// Parse into the type and back: a field the type does not know is lost,
/// so the document must come back unchanged.
fn round_trips<T: serde::de::DeserializeOwned + serde::Serialize>(d: &Value) {
    let t: T = serde_json::from_value(d.clone()).unwrap_or_else(|e| panic!("{}: {e}", d["kind"]));
    let back = serde_json::to_value(&t).unwrap();
    if let Some(at) = first_difference(d, &back, String::new()) {
        panic!(
            "{} {}: {at} does not survive its type (a field it does not know?)",
            d["kind"], d["metadata"]["name"]
        );
    }
}

/// Where two documents differ, numbers compared by value (`0` and `0.0`
/// are one number to the API server).
fn first_difference(a: &Value, b: &Value, at: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                first_difference(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    format!("{at}.{k}"),
                )
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, format!("{at}[{i}]"))),
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => None,
        _ if a == b => None,
        _ => Some(at),
    }
}

#[test]
fn every_manifest_parses_and_the_crds_are_the_generated_ones() {
    let rendered = render();
    for d in &rendered {
        match d["kind"].as_str().unwrap() {
            "Namespace" => round_trips::<Namespace>(d),
            "CustomResourceDefinition" => round_trips::<CustomResourceDefinition>(d),
            "ServiceAccount" => round_trips::<ServiceAccount>(d),
            "Role" => round_trips::<Role>(d),
            "ClusterRole" => round_trips::<ClusterRole>(d),
            "RoleBinding" => round_trips::<RoleBinding>(d),
            "ClusterRoleBinding" => round_trips::<ClusterRoleBinding>(d),
            "ConfigMap" => round_trips::<ConfigMap>(d),
            "Secret" => round_trips::<Secret>(d),
            "Deployment" => round_trips::<Deployment>(d),
            "Service" => round_trips::<Service>(d),
            "ValidatingWebhookConfiguration" => round_trips::<ValidatingWebhookConfiguration>(d),
            k => panic!("unexpected kind {k} in deploy/kubernetes"),
        }
        if d["kind"] != "Namespace"
            && d["kind"] != "CustomResourceDefinition"
            && !d["kind"].as_str().unwrap().starts_with("Cluster")
            && d["kind"] != "ValidatingWebhookConfiguration"
        {
            assert_eq!(
                d["metadata"]["namespace"], "metalherd",
                "{}",
                d["metadata"]["name"]
            );
        }
    }
    // The CRDs: each generated file is exactly what `metalherd crds` prints.
    let print = |args: &[&str]| {
        let out = std::process::Command::new(common::metalherd_bin())
            .args(args)
            .output()
            .unwrap();
        text(&out).0
    };
    let crds = print(&["crds"]);
    for (printed, args, path) in [
        (crds.clone(), "crds", "deploy/kubernetes/crds.yaml"),
        (
            print(&["crds", "--cluster-api"]),
            "crds --cluster-api",
            "deploy/cluster-api/crds.yaml",
        ),
    ] {
        let file = std::fs::read_to_string(common::repo_root().join(path)).unwrap();
        assert!(
            file == printed,
            "{path} is stale: regenerate it with\n  cargo run -q -- {args} > {path}"
        );
    }
    // And what kustomize made of it, object for object.
    let want = docs(&crds);
    let got: Vec<&Value> = rendered
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .collect();
    assert_eq!(got.len(), want.len(), "CRDs rendered vs `metalherd crds`");
    for w in &want {
        let name = &w["metadata"]["name"];
        let g = got
            .iter()
            .find(|g| &g["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("CRD {name} not rendered"));
        if let Some(at) = first_difference(w, g, String::new()) {
            panic!("CRD {name} differs from `metalherd crds` at {at}");
        }
    }

    // The ClusterRole: the target cluster's calls in src/cluster/kube.rs
    // (get_opt, cordon/uncordon = patch, delete on Nodes; list Pods across
    // namespaces; create pods/eviction).
    let cr: ClusterRole = typed(&rendered, "ClusterRole");
    let want: BTreeSet<Rule> = [
        ("delete", "", "nodes"),
        ("get", "", "nodes"),
        ("patch", "", "nodes"),
        ("list", "", "pods"),
        ("create", "", "pods/eviction"),
    ]
    .iter()
    .map(|(v, g, r)| (v.to_string(), g.to_string(), r.to_string()))
    .collect();
    assert_eq!(rules_of(cr.rules.as_deref().unwrap_or_default()), want);
    // Both bindings name the ServiceAccount the Deployment runs as.
    for b in ["RoleBinding", "ClusterRoleBinding"] {
        let d = rendered.iter().find(|d| d["kind"] == b).unwrap();
        assert_eq!(
            d["subjects"],
            json!([{"kind": "ServiceAccount", "name": "metalherd", "namespace": "metalherd"}])
        );
    }

    // The token key Secret is the one leader election reads
    // (src/leader/token_key.rs), with a key of the length it wants.
    let secret: Secret = named(
        &rendered,
        "Secret",
        metalherd::leader::token_key::SECRET_NAME,
    );
    assert_eq!(secret.data.unwrap()["key"].0.len(), 32);
    // The config file parses as metalherd's.
    let cm: ConfigMap = typed(&rendered, "ConfigMap");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.yaml");
    std::fs::write(&cfg, &cm.data.unwrap()["config.yaml"]).unwrap();
    let parsed = metalherd::config::ConfigFile::load(&cfg).unwrap();
    assert!(parsed.dhcp.is_some() && parsed.boot.is_some());
}

#[test]
fn the_deployment_runs_with_host_network_two_capabilities_and_real_probes() {
    let rendered = render();
    let d: Deployment = typed(&rendered, "Deployment");
    let spec = d.spec.unwrap();
    // Two replicas: one leads, one stands by.
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(pod.service_account_name.as_deref(), Some("metalherd"));
    let anti = pod.affinity.unwrap().pod_anti_affinity.unwrap();
    let terms = anti
        .required_during_scheduling_ignored_during_execution
        .unwrap();
    assert_eq!(terms[0].topology_key, "kubernetes.io/hostname");
    let c = &pod.containers[0];
    let caps = c
        .security_context
        .as_ref()
        .unwrap()
        .capabilities
        .as_ref()
        .unwrap();
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
    let added: BTreeSet<&str> = caps.add.iter().flatten().map(String::as_str).collect();
    assert_eq!(added, BTreeSet::from(["NET_BIND_SERVICE", "NET_RAW"]));
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    let args = c.args.clone().unwrap();
    for a in [
        "serve",
        "--store=kubernetes",
        "--watch-namespace=metalherd",
        "--listen=0.0.0.0:7080",
    ] {
        assert!(args.iter().any(|x| x == a), "{a} missing from {args:?}");
    }
    // Probes: HTTPS on the API port, on a path serve answers without a token.
    let api_port = c
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("api"))
        .unwrap();
    assert_eq!(api_port.container_port, 7080);
    let mut paths = BTreeSet::new();
    for p in [&c.readiness_probe, &c.liveness_probe] {
        let g = p.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(g.scheme.as_deref(), Some("HTTPS"));
        assert_eq!(
            g.port,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("api".into())
        );
        paths.insert(g.path.clone().unwrap());
    }
    let server = Server::start();
    for p in paths {
        let out = server
            .curl()
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("{}{p}", server.url))
            .output()
            .unwrap();
        assert_eq!(text(&out).0, "200", "probe path {p}, without a token");
    }
    // The token key is read from the Secret through the API, not mounted:
    // serve writes it into its data directory.
    assert!(
        !c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path.ends_with("boot-token.key"))
    );
}

#[test]
fn the_systemd_unit_verifies() {
    let unit =
        std::fs::read_to_string(common::repo_root().join("deploy/systemd/metalherd.service"))
            .unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    assert_eq!(
        exec,
        "/usr/local/bin/metalherd serve --config /etc/metalherd/config.yaml --data-dir /var/lib/metalherd"
    );
    for line in [
        "StateDirectory=metalherd",
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE CAP_NET_RAW",
        "AmbientCapabilities=CAP_NET_BIND_SERVICE CAP_NET_RAW",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} missing");
    }
    // systemd-analyze verify checks the executable exists: point it at the
    // built binary. It exits 0 on unknown keys and bad values, printing
    // them: any output is a failure.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("metalherd.service");
    std::fs::write(
        &path,
        unit.replace(
            "/usr/local/bin/metalherd",
            common::metalherd_bin().to_str().unwrap(),
        ),
    )
    .unwrap();
    let out = std::process::Command::new(common::require_tool("systemd-analyze"))
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let (o, e) = text(&out);
    assert!(
        out.status.success() && o.is_empty() && e.is_empty(),
        "systemd-analyze verify:\n{o}{e}"
    );
}
