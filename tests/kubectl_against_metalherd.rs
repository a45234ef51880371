//! Story: a user who lives in kubectl points it at metalherd. The real
//! kubectl (the suite targets 1.32) against a running `metalherd serve`,
//! through the kubeconfig `metalherd kubeconfig` prints: TLS verified
//! against the data directory's CA, the token accepted, discovery, printer
//! columns, `apply` (twice: `unchanged`), `describe` with events, `wait`
//! for the Ready condition, `delete`. And the CLI's side of TLS: it never
//! sends the token over plain HTTP unless told to.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::kubectl::{kubeconfig, kubectl, kubectl_cmd, ok, require_recent_kubectl};
use common::server::{Server, text};
use serde_json::json;

const MACHINE: &str = "apiVersion: metalherd.dev/v1alpha1
kind: Machine
metadata:
  name: rack1-u07
  namespace: default
spec:
  bmc:
    address: redfish+https://10.0.0.5/redfish/v1/Systems/1
    credentialsSecretRef:
      name: rack1-u07-bmc
  network:
    address: 10.0.1.7/24
";

const MACHINES: &str = "/apis/metalherd.dev/v1alpha1/namespaces/default/machines";

#[test]
fn kubectl_accepts_the_printed_kubeconfig_as_is() {
    let s = Server::start();
    let kc = kubeconfig(&s);
    // kubectl reads it: server, CA data, token, context with a namespace.
    let (ok, view, err) = kubectl(&kc, &["config", "view", "--raw", "-o", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&view).unwrap();
    assert_eq!(v["current-context"], "metalherd");
    assert_eq!(v["contexts"][0]["context"]["namespace"], "default");
    assert_eq!(v["clusters"][0]["cluster"]["server"], s.url.as_str());
    assert!(v["clusters"][0]["cluster"]["certificate-authority-data"].is_string());
    assert_eq!(v["users"][0]["user"]["token"], s.token.as_str());
    // Over TLS, verified against the CA, with the token: a raw list works
    // (no discovery involved).
    let (ok, body, err) = kubectl(&kc, &["get", "--raw", "/api/v1/namespaces/default/secrets"]);
    assert!(ok, "kubectl get --raw: {err}\n{}", s.log());
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "SecretList", "{body}");
    // A wrong token is refused by the server (kubectl did send it).
    let bad = std::fs::read_to_string(&kc)
        .unwrap()
        .replace(&s.token, "wrong-token");
    let bad_kc = s.dir.path().join("kubeconfig.bad");
    std::fs::write(&bad_kc, bad).unwrap();
    let (ok, _, err) = kubectl(&bad_kc, &["get", "--raw", "/api/v1/secrets"]);
    assert!(!ok);
    assert!(err.contains("Unauthorized") || err.contains("401"), "{err}");
}

#[test]
fn the_cli_sends_no_token_over_plain_http_unless_told() {
    let s = Server::start();
    let plain = s.url.replace("https://", "http://");
    let out = s.cli(&["--server", &plain, "get", "machines"]);
    let (_, err) = text(&out);
    assert!(!out.status.success());
    assert!(err.contains("plain HTTP"), "{err}");
    // And the TLS server does not answer plain HTTP either.
    let out = s
        .command("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("{plain}/healthz"))
        .output()
        .unwrap();
    assert_ne!(out.stdout, b"200");
    // A loopback server started with --insecure-http is reached with it.
    let addr = format!("127.0.0.1:{}", common::free_port());
    let data = s.dir.path().join("plain-data");
    let _g = common::proc::ChildGuard::spawn(
        "metalherd serve --insecure-http",
        s.metalherd()
            .args(["serve", "--insecure-http", "--listen", &addr, "--data-dir"])
            .arg(&data)
            .args(["--config"])
            .arg(s.dir.path().join("config.yaml")),
        &s.dir.path().join("plain.log"),
    );
    let up = common::proc::wait_for(std::time::Duration::from_secs(30), || {
        let o = s
            .metalherd()
            .args(["--insecure-http", "--data-dir"])
            .arg(&data)
            .args(["get", "machines"])
            .output()
            .ok()?;
        o.status.success().then_some(())
    });
    assert!(up.is_some(), "CLI over --insecure-http");
    // The same server refuses to listen off loopback without TLS.
    let out = s
        .metalherd()
        .args([
            "serve",
            "--insecure-http",
            "--listen",
            "0.0.0.0:0",
            "--data-dir",
        ])
        .arg(s.dir.path().join("other"))
        .output()
        .unwrap();
    let (_, err) = text(&out);
    assert!(!out.status.success());
    assert!(err.contains("only on a loopback address"), "{err}");
}

#[test]
fn kubectl_discovers_metalherd_and_prints_its_columns() {
    require_recent_kubectl();
    let s = Server::start();
    let kc = kubeconfig(&s);
    let out = ok(&kc, &["version"]);
    assert!(out.contains("Server Version: v1.32.0+metalherd"), "{out}");
    let out = ok(&kc, &["api-resources"]);
    let line = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} missing from api-resources:\n{out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        line("machines"),
        [
            "machines",
            "mach",
            "metalherd.dev/v1alpha1",
            "true",
            "Machine"
        ]
    );
    assert_eq!(line("machinesets")[1], "ms");
    assert_eq!(line("events")[1..], ["ev", "v1", "true", "Event"]);

    let file = s.dir.path().join("machine.yaml");
    std::fs::write(&file, MACHINE).unwrap();
    let f = file.to_str().unwrap();
    assert_eq!(
        ok(&kc, &["apply", "-f", f]).trim(),
        "machine.metalherd.dev/rack1-u07 created"
    );
    assert_eq!(
        ok(&kc, &["apply", "-f", f]).trim(),
        "machine.metalherd.dev/rack1-u07 unchanged"
    );
    // What the controller would report, written through /status.
    let (code, m) = s.req("GET", &format!("{MACHINES}/rack1-u07"), None);
    assert_eq!(code, 200, "{m}");
    let mut m = m;
    m["status"] = json!({"phase": "Ready", "powerState": "On", "nodeRef": {"name": "rack1-u07"}});
    let (code, body) = s.req("PUT", &format!("{MACHINES}/rack1-u07/status"), Some(&m));
    assert_eq!(code, 200, "{body}");

    // The CRD's printer columns, filled in by the server.
    let out = ok(&kc, &["get", "machines"]);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["NAME", "PHASE", "POWER", "NODE", "CLASS", "AGE"],
        "{out}"
    );
    assert_eq!(
        rows[1][..4],
        ["rack1-u07", "Ready", "On", "rack1-u07"],
        "{out}"
    );
    let out = ok(&kc, &["get", "machines", "-o", "wide"]);
    let head: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(head[6..], ["BMC", "MAC", "ADDRESS", "ERROR"], "{out}");
    assert!(
        out.contains("redfish+https://10.0.0.5/redfish/v1/Systems/1"),
        "{out}"
    );
    assert!(out.contains("10.0.1.7/24"), "{out}");
    // Across namespaces, and by category.
    let out = ok(&kc, &["get", "machines", "-A"]);
    assert!(out.starts_with("NAMESPACE"), "{out}");
    assert!(
        out.contains("default") && out.contains("rack1-u07"),
        "{out}"
    );
    let out = ok(&kc, &["get", "metalherd"]);
    assert!(out.contains("machine.metalherd.dev/rack1-u07"), "{out}");
    // One object, as YAML, with kubectl's own last-applied annotation.
    let out = ok(&kc, &["get", "machine", "rack1-u07", "-o", "yaml"]);
    let y: serde_json::Value = serde_yaml::from_str(&out).unwrap();
    assert_eq!(
        y["spec"]["bmc"]["address"],
        "redfish+https://10.0.0.5/redfish/v1/Systems/1"
    );
    assert_eq!(y["status"]["phase"], "Ready");
    assert!(
        y["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string(),
        "{out}"
    );
    let out = ok(
        &kc,
        &[
            "get",
            "mach",
            "rack1-u07",
            "-o",
            "jsonpath={.status.powerState}",
        ],
    );
    assert_eq!(out, "On");

    // get -w: the current row, then a row per change, as Tables.
    let wlog = s.dir.path().join("watch.log");
    let _w = common::proc::ChildGuard::spawn(
        "kubectl get -w",
        kubectl_cmd(&kc).args(["get", "machines", "-w"]),
        &wlog,
    );
    let rows = |n: usize| {
        let t = std::fs::read_to_string(&wlog).unwrap_or_default();
        (t.lines().filter(|l| l.starts_with("rack1-u07")).count() >= n).then_some(t)
    };
    common::proc::wait_for(Duration::from_secs(20), || rows(1)).expect("first watch row");
    ok(&kc, &["label", "machine", "rack1-u07", "watched=yes"]);
    let t = common::proc::wait_for(Duration::from_secs(20), || rows(2)).expect("a row per change");
    assert!(t.starts_with("NAME") && t.contains("Ready"), "{t}");

    // A Secret applied again with a changed value: kubectl sends a
    // strategic merge patch, applied as the map merge it is.
    let secret = |pw: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: rack1-u07-bmc\n  namespace: default\nstringData:\n  username: admin\n  password: {pw}\n"
        )
    };
    let sf = s.dir.path().join("secret.yaml");
    std::fs::write(&sf, secret("one")).unwrap();
    let sf = sf.to_str().unwrap();
    assert_eq!(
        ok(&kc, &["apply", "-f", sf]).trim(),
        "secret/rack1-u07-bmc created"
    );
    std::fs::write(sf, secret("two")).unwrap();
    assert_eq!(
        ok(&kc, &["apply", "-f", sf]).trim(),
        "secret/rack1-u07-bmc configured"
    );
    let out = ok(
        &kc,
        &[
            "get",
            "secret",
            "rack1-u07-bmc",
            "-o",
            "jsonpath={.data.password}",
        ],
    );
    assert_eq!(out, "dHdv", "base64 of \"two\"");
    // kubectl create secret sends protobuf, read for Secrets.
    assert_eq!(
        ok(
            &kc,
            &["create", "secret", "generic", "x", "--from-literal=a=b"]
        )
        .trim(),
        "secret/x created"
    );
    let out = ok(&kc, &["get", "secret", "x", "-o", "jsonpath={.data.a}"]);
    assert_eq!(out, "Yg==", "base64 of \"b\"");
    let out = ok(&kc, &["get", "secrets"]);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["NAME", "TYPE", "DATA", "AGE"], "{out}");
    assert_eq!(rows[1][..3], ["rack1-u07-bmc", "Opaque", "2"], "{out}");
    assert_eq!(rows[2][..3], ["x", "Opaque", "1"], "{out}");
}

#[test]
fn kubectl_describes_applies_waits_and_deletes() {
    require_recent_kubectl();
    let s = Server::start();
    let kc = kubeconfig(&s);
    let file = s.dir.path().join("machine.yaml");
    std::fs::write(&file, MACHINE).unwrap();
    let f = file.to_str().unwrap();
    ok(&kc, &["apply", "-f", f]);
    let (_, m) = s.req("GET", &format!("{MACHINES}/rack1-u07"), None);
    let uid = m["metadata"]["uid"].as_str().unwrap().to_string();

    // Events about it (and one about another machine) as the controller
    // records them; describe shows its own only.
    for (name, about, reason, message) in [
        (
            "rack1-u07.a",
            "rack1-u07",
            "Provisioning",
            "Available → Provisioning",
        ),
        (
            "rack1-u08.b",
            "rack1-u08",
            "Unrelated",
            "another machine's event",
        ),
    ] {
        let ev = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
                               "namespace": "default", "name": about,
                               "uid": if about == "rack1-u07" { uid.as_str() } else { "other" }},
            "type": "Normal", "reason": reason, "message": message, "count": 1,
            "firstTimestamp": "2026-11-22T03:00:00Z", "lastTimestamp": "2026-11-22T03:00:00Z",
            "source": {"component": "metalherd"}
        });
        let (code, body) = s.req("POST", "/api/v1/namespaces/default/events", Some(&ev));
        assert_eq!(code, 201, "{body}");
    }
    let out = ok(&kc, &["describe", "machine", "rack1-u07"]);
    assert!(out.contains("Name:         rack1-u07"), "{out}");
    assert!(out.contains("redfish+https://10.0.0.5"), "{out}");
    let events = out
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        events.contains("Provisioning") && events.contains("Available → Provisioning"),
        "{out}"
    );
    assert!(!events.contains("Unrelated"), "{out}");
    let out = ok(&kc, &["get", "events"]);
    assert!(
        out.contains("machine/rack1-u07") && out.contains("machine/rack1-u08"),
        "{out}"
    );

    // An invalid manifest is refused with the field's path.
    let bad = s.dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        MACHINE
            .replace("rack1-u07", "rack1-u09")
            .replace("    address: redfish", "    bogus: 1\n    address: redfish"),
    )
    .unwrap();
    let (okay, _, err) = kubectl(&kc, &["apply", "-f", bad.to_str().unwrap()]);
    assert!(!okay);
    assert!(err.contains("spec.bmc.bogus"), "{err}");

    // patch (JSON and merge), a failed JSON patch test, edit.
    let out = ok(
        &kc,
        &[
            "patch",
            "machine",
            "rack1-u07",
            "--type",
            "json",
            "-p",
            r#"[{"op":"add","path":"/metadata/labels","value":{"rack":"r1"}}]"#,
        ],
    );
    assert_eq!(out.trim(), "machine.metalherd.dev/rack1-u07 patched");
    let out = ok(&kc, &["get", "machines", "-l", "rack=r1", "-o", "name"]);
    assert_eq!(out.trim(), "machine.metalherd.dev/rack1-u07");
    let (okay, _, err) = kubectl(
        &kc,
        &[
            "patch",
            "machine",
            "rack1-u07",
            "--type",
            "json",
            "-p",
            r#"[{"op":"test","path":"/spec/online","value":true}]"#,
        ],
    );
    assert!(!okay && err.contains("value did not match"), "{err}");
    let out = ok(
        &kc,
        &[
            "patch",
            "machine",
            "rack1-u07",
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"labels":{"pool":"a"}}}"#,
        ],
    );
    assert_eq!(out.trim(), "machine.metalherd.dev/rack1-u07 patched");
    let out = kubectl_cmd(&kc)
        .env("KUBE_EDITOR", "sed -i s/online:\\ false/online:\\ true/")
        .args(["edit", "machine", "rack1-u07"])
        .output()
        .unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "kubectl edit: {e}");
    assert_eq!(o.trim(), "machine.metalherd.dev/rack1-u07 edited");
    let (_, m) = s.req("GET", &format!("{MACHINES}/rack1-u07"), None);
    assert_eq!(m["spec"]["online"], true, "{m}");
    assert_eq!(m["metadata"]["labels"], json!({"rack": "r1", "pool": "a"}));

    // wait returns once the Ready condition flips to True, not before.
    let log = s.dir.path().join("wait.log");
    let mut wait = common::proc::ChildGuard::spawn(
        "kubectl wait",
        kubectl_cmd(&kc).args([
            "wait",
            "--for=condition=Ready",
            "machine/rack1-u07",
            "--timeout=60s",
        ]),
        &log,
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        wait.running(),
        "wait returned early: {}",
        std::fs::read_to_string(&log).unwrap()
    );
    let (_, mut m) = s.req("GET", &format!("{MACHINES}/rack1-u07"), None);
    m["status"] = json!({"phase": "Ready", "conditions": [{
        "type": "Ready", "status": "True", "reason": "NodeReady",
        "message": "provisioned and its Node is Ready",
        "lastTransitionTime": "2026-11-22T03:00:00Z"}]});
    let (code, body) = s.req("PUT", &format!("{MACHINES}/rack1-u07/status"), Some(&m));
    assert_eq!(code, 200, "{body}");
    let done = common::proc::wait_for(Duration::from_secs(30), || (!wait.running()).then_some(()));
    assert!(done.is_some(), "kubectl wait did not return");
    let status = wait.child.take().unwrap().wait().unwrap();
    let out = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{out}");
    assert_eq!(out.trim(), "machine.metalherd.dev/rack1-u07 condition met");

    assert_eq!(
        ok(&kc, &["delete", "machine", "rack1-u07"]).trim(),
        "machine.metalherd.dev \"rack1-u07\" deleted"
    );
    let (okay, _, err) = kubectl(&kc, &["get", "machine", "rack1-u07"]);
    assert!(!okay);
    assert!(
        err.contains("NotFound") && err.contains("rack1-u07"),
        "{err}"
    );
}

/// The controller, not the test, sets the Ready condition: on the simulated
/// rack (sushy-tools' Redfish emulator) a Machine reaches Available, whose
/// Ready condition is False with reason Available; `kubectl wait` sees it.
/// (Ready=True needs a provisioned server whose Node is up: the QEMU lab.)
#[test]
fn kubectl_waits_on_the_condition_the_controller_sets() {
    use common::rack::{bmc_spec, controller_config, put_secret};
    require_recent_kubectl();
    let sushy = common::sushy::Sushy::start(common::sushy::SushyOptions::default());
    let (user, pw) = sushy.opts.auth.clone().expect("auth");
    let s = Server::start_with_config(Some(&controller_config("", "")));
    let kc = kubeconfig(&s);
    put_secret(&s, "u1-bmc", &user, &pw);
    let m = json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": "rack1-u1", "namespace": "default"},
        "spec": {"bmc": bmc_spec(&sushy.address(0), "u1-bmc")}});
    let file = s.dir.path().join("u1.yaml");
    std::fs::write(&file, serde_yaml::to_string(&m).unwrap()).unwrap();
    ok(&kc, &["apply", "-f", file.to_str().unwrap()]);
    let out = ok(
        &kc,
        &[
            "wait",
            "--for=jsonpath={.status.phase}=Available",
            "machine/rack1-u1",
            "--timeout=90s",
        ],
    );
    assert!(out.contains("condition met"), "{out}");
    let out = ok(
        &kc,
        &[
            "wait",
            "--for=condition=Ready=false",
            "machine/rack1-u1",
            "--timeout=30s",
        ],
    );
    assert_eq!(out.trim(), "machine.metalherd.dev/rack1-u1 condition met");
    let reason = ok(
        &kc,
        &[
            "get",
            "machine",
            "rack1-u1",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].reason}",
        ],
    );
    assert_eq!(reason, "Available", "{}", s.log());
}

#[test]
fn kubectl_scales_a_machineset() {
    require_recent_kubectl();
    let s = Server::start();
    let kc = kubeconfig(&s);
    let set = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/examples/machineset.yaml"
    );
    ok(&kc, &["apply", "-f", set]);
    // Through the /scale subresource discovery advertises.
    let out = ok(&kc, &["scale", "machineset/workers", "--replicas", "5"]);
    assert!(
        out.contains("machineset.metalherd.dev/workers scaled"),
        "{out}"
    );
    let replicas = ok(
        &kc,
        &["get", "ms", "workers", "-o", "jsonpath={.spec.replicas}"],
    );
    assert_eq!(replicas.trim(), "5");
    // A precondition on the current size that no longer holds is refused.
    let (done, _, err) = kubectl(
        &kc,
        &[
            "scale",
            "machineset/workers",
            "--current-replicas",
            "3",
            "--replicas",
            "1",
        ],
    );
    assert!(!done, "scaled from a stale size");
    assert!(err.contains("3"), "{err}");
    let replicas = ok(
        &kc,
        &["get", "ms", "workers", "-o", "jsonpath={.spec.replicas}"],
    );
    assert_eq!(replicas.trim(), "5");
}
