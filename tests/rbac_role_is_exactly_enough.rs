//! Story: a cluster admin deploys metalherd with `kubectl apply -k
//! deploy/kubernetes/` on a real kube-apiserver (tests/common/control_plane.rs)
//! and it runs with its ServiceAccount's token, not as an admin.
//!
//! Every object of the kustomization is accepted for real (CRDs,
//! Namespace, ServiceAccount, Role, RoleBinding, ClusterRole and binding,
//! ConfigMap, Secrets, Deployment, Service, ValidatingWebhookConfiguration)
//! and can be read back. The Deployment's Pods need a node, which this
//! story has not: metalherd runs as a process here, with a token that
//! kube-apiserver's TokenRequest API issued for the `metalherd`
//! ServiceAccount, and the webhook configuration is pointed at that
//! process (the Service has no endpoints without the Pods).
//!
//! With the Role as shipped, a server of the simulated rack is provisioned
//! to Ready in the `metalherd` namespace, the webhook answering for
//! kube-apiserver. Then each rule of the Role is removed in turn: metalherd
//! fails, and what it reports (at start, or in its log) is kube-apiserver's
//! 403 naming a verb and resource of the removed rule. So the Role is
//! enough, and no rule in it is idle. (The ClusterRole for the target
//! cluster's Nodes is applied and bound, not exercised: no Node joins here.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::control_plane::{ControlPlane, Options};
use common::proc::{ChildGuard, wait_for};
use common::rack::{controller_config, tail};
use common::server::Server;
use common::sim_rack::{SimRack, bmc_credentials};
use serde_json::{Value, json};

const NS: &str = "metalherd";

fn post(cp: &ControlPlane, path: &str, obj: &Value) {
    let (code, body) = cp.req("POST", path, Some(obj));
    assert!(code < 300, "POST {path}: {code} {body}");
}

fn phase(cp: &ControlPlane, name: &str) -> String {
    let (_, m) = cp.req(
        "GET",
        &format!("/apis/metalherd.dev/v1alpha1/namespaces/{NS}/machines/{name}"),
        None,
    );
    m["status"]["phase"].as_str().unwrap_or("").to_string()
}

/// `metalherd serve` in Kubernetes mode as the ServiceAccount, its log in
/// `dir/name.log`.
fn serve(dir: &Path, name: &str, kc: &Path, config: &Path) -> ChildGuard {
    let mut cmd = std::process::Command::new(common::metalherd_bin());
    cmd.args([
        "serve",
        "--listen",
        &format!("127.0.0.1:{}", common::free_port()),
    ])
    .arg("--data-dir")
    .arg(dir.join(format!("{name}-data")))
    // Short Lease timing: a killed predecessor's Lease expires within 3 s.
    .args(common::rack::replica_args(kc.to_str().unwrap()))
    .args(["--watch-namespace", NS, "--config"])
    .arg(config)
    .env("METALHERD_LOG", "info")
    .env("NO_COLOR", "1");
    ChildGuard::spawn(name, &mut cmd, &dir.join(format!("{name}.log")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_role_is_exactly_enough() {
    let cp = tokio::task::spawn_blocking(|| ControlPlane::start(Options::default()))
        .await
        .unwrap();
    let dir = common::rack::boot_files();
    let boot_port = common::free_port();
    let rack = SimRack::start("rbac", 2, 62, &format!("http://127.0.0.1:{boot_port}")).await;

    let (cp, rendered) = tokio::task::spawn_blocking(move || {
        // kubectl apply -k, on a copy with the generated key and
        // certificate the kustomization asks for.
        let copy = common::deploy::prepared();
        let k = copy.path().join("deploy/kubernetes");
        let (ok, out, err) = cp.kubectl(&["apply", "-k", k.to_str().unwrap()]);
        assert!(ok, "kubectl apply -k deploy/kubernetes/: {out}{err}");
        let rendered = common::deploy::render();
        for o in &rendered {
            let kind = o["kind"].as_str().unwrap();
            let name = o["metadata"]["name"].as_str().unwrap();
            let mut args = vec!["get", kind, name, "-o", "name"];
            if let Some(ns) = o["metadata"]["namespace"].as_str() {
                args.extend(["-n", ns]);
            }
            let (ok, _, err) = cp.kubectl(&args);
            assert!(ok, "{kind}/{name} not stored: {err}");
        }
        (cp, rendered)
    })
    .await
    .unwrap();
    let role = rendered
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "metalherd")
        .unwrap()
        .clone();

    // The ServiceAccount's token, from kube-apiserver's TokenRequest API.
    let (ok, token, err) =
        cp.kubectl(&["create", "token", "metalherd", "-n", NS, "--duration", "2h"]);
    assert!(ok, "kubectl create token: {err}");
    let sa_kc = cp.dir.path().join("serviceaccount.kubeconfig");
    cp.write_kubeconfig(&sa_kc, token.trim());
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        controller_config(
            "",
            &format!(
                "boot:\n  listen: 127.0.0.1:{boot_port}\n  assetsDir: {}\n  waitSeconds: 1\n",
                dir.path().join("assets").display()
            ),
        ),
    )
    .unwrap();

    // metalherd as the ServiceAccount; the webhook pointed at it.
    let sa_kc2 = sa_kc.clone();
    let config2 = config.clone();
    let kmode = tokio::task::spawn_blocking(move || {
        Server::start_with_args(
            Some(&std::fs::read_to_string(&config2).unwrap()),
            &[
                "--store",
                "kubernetes",
                "--kubeconfig",
                sa_kc2.to_str().unwrap(),
                "--watch-namespace",
                NS,
            ],
        )
    })
    .await
    .unwrap();
    let ca = std::fs::read(kmode.data_dir.join("ca.crt")).unwrap();
    let patch = {
        use base64::Engine;
        json!([{"op": "replace", "path": "/webhooks/0/clientConfig", "value": {
            "url": format!("{}{}", kmode.url, metalherd::http::api::webhook::PATH),
            "caBundle": base64::engine::general_purpose::STANDARD.encode(&ca)}}])
    };
    let (ok, out, err) = cp.kubectl(&[
        "patch",
        "validatingwebhookconfiguration",
        "metalherd.dev",
        "--type",
        "json",
        "-p",
        &patch.to_string(),
    ]);
    assert!(ok, "point the webhook at metalherd: {out}{err}");

    // The user's objects, in metalherd's namespace.
    let (user, pw) = bmc_credentials();
    post(
        &cp,
        &format!("/api/v1/namespaces/{NS}/secrets"),
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bmc"},
            "stringData": {"username": user, "password": pw}}),
    );
    post(
        &cp,
        &format!("/api/v1/namespaces/{NS}/secrets"),
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "join"},
            "stringData": {"token": "abcdef.0123456789abcdef"}}),
    );
    let mut class = common::rack::flatcar_class(dir.path());
    class["metadata"]["namespace"] = json!(NS);
    post(
        &cp,
        &format!("/apis/metalherd.dev/v1alpha1/namespaces/{NS}/machineclasses"),
        &class,
    );
    let mut m = rack.manifest(0, "bmc", json!({}));
    m["metadata"]["namespace"] = json!(NS);
    m["spec"]["classRef"] = json!({"name": "flatcar"});
    // Through the webhook, which metalherd answers.
    let mf = dir.path().join("machine.json");
    std::fs::write(&mf, m.to_string()).unwrap();
    let (ok, out, err) = cp.kubectl(&["apply", "-f", mf.to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    let name = rack.machines[0].name.clone();
    let (cp, kmode) = tokio::task::spawn_blocking(move || {
        let ready = wait_for(Duration::from_secs(120), || {
            (phase(&cp, &name) == "Ready").then_some(())
        });
        assert!(
            ready.is_some(),
            "not Ready as the ServiceAccount ({}); log:\n{}",
            phase(&cp, &name),
            tail(&kmode.log(), 30)
        );
        (cp, kmode)
    })
    .await
    .unwrap();
    drop(kmode);
    // The webhook is not what this part is about: metalherd is restarted
    // with rules missing, and kube-apiserver must not need it meanwhile.
    let (ok, _, err) = cp.kubectl(&["delete", "validatingwebhookconfiguration", "metalherd.dev"]);
    assert!(ok, "{err}");

    // A second Machine with no class: the controller registers it (reads
    // the BMC Secret, writes status, records Events).
    let mut m2 = rack.manifest(1, "bmc", json!({}));
    m2["metadata"]["namespace"] = json!(NS);
    let rules = role["rules"].as_array().unwrap().clone();
    let m2_name = rack.machines[1].name.clone();
    tokio::task::spawn_blocking(move || {
        for (i, rule) in rules.iter().enumerate() {
            let mut cut = role.clone();
            cut["rules"].as_array_mut().unwrap().remove(i);
            strip_server_fields(&mut cut);
            let f = cp.dir.path().join(format!("role-{i}.json"));
            std::fs::write(&f, cut.to_string()).unwrap();
            let (ok, out, err) = cp.kubectl(&["replace", "-f", f.to_str().unwrap()]);
            assert!(ok, "replace the Role: {out}{err}");
            // The Machine the controller must handle now, created anew
            // (its finalizer from an earlier round dropped first).
            let path = format!("/apis/metalherd.dev/v1alpha1/namespaces/{NS}/machines/{m2_name}");
            cp.raw(
                "PATCH",
                &path,
                Some(&cp.token),
                Some(&json!({"metadata": {"finalizers": null}})),
                "application/merge-patch+json",
            );
            cp.req("DELETE", &path, None);
            let gone = wait_for(Duration::from_secs(30), || {
                (cp.req("GET", &path, None).0 == 404).then_some(())
            });
            assert!(gone.is_some(), "{m2_name} was not deleted");
            let mut g = serve(cp.dir.path(), &format!("without-rule-{i}"), &sa_kc, &config);
            post(
                &cp,
                &format!("/apis/metalherd.dev/v1alpha1/namespaces/{NS}/machines"),
                &m2,
            );
            let wants = forbidden_texts(rule);
            let log = cp.dir.path().join(format!("without-rule-{i}.log"));
            let seen = wait_for(Duration::from_secs(60), || {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                text.lines()
                    .find(|l| l.contains("forbidden") && wants.iter().any(|w| l.contains(w)))
                    .map(str::to_string)
            });
            let seen = seen.unwrap_or_else(|| {
                panic!(
                    "without rule {i} ({rule}) metalherd never reported a 403 naming one of {wants:?}; log:\n{}",
                    tail(&std::fs::read_to_string(&log).unwrap_or_default(), 30)
                )
            });
            eprintln!("without rule {i}: {}", seen.trim());
            g.kill9();
            // Put the Role back.
            let mut whole = role.clone();
            strip_server_fields(&mut whole);
            std::fs::write(&f, whole.to_string()).unwrap();
            let (ok, out, err) = cp.kubectl(&["replace", "-f", f.to_str().unwrap()]);
            assert!(ok, "restore the Role: {out}{err}");
        }
    })
    .await
    .unwrap();
}

/// What a 403 for a request this rule allowed would name: `VERB RESOURCE`
/// as metalherd's store errors print them.
fn forbidden_texts(rule: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for v in rule["verbs"].as_array().unwrap() {
        for r in rule["resources"].as_array().unwrap() {
            out.push(format!("{} {}", v.as_str().unwrap(), r.as_str().unwrap()));
        }
    }
    out
}

fn strip_server_fields(o: &mut Value) {
    if let Some(m) = o["metadata"].as_object_mut() {
        for k in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "managedFields",
        ] {
            m.remove(k);
        }
    }
}
