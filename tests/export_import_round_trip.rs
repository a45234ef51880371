//! Story: move a site from standalone to Kubernetes mode, and back up and
//! restore a standalone one.
//!
//! A standalone `metalherd serve` (controller off, so the states below stay
//! put) holds Secrets, classes, Machines in several phases, a MachineSet, a
//! DiscoveredMachine and an Event. `metalherd export` through its API first
//! refuses because one Machine is in the middle of a boot, naming it; once
//! that Machine has settled it writes the file. `metalherd import
//! --kubeconfig` recreates everything in an API server, and `metalherd
//! export --kubeconfig` from there gives the same objects back. Then the
//! first file is restored with `import --stopped` into an empty data
//! directory, exported from it with `export --stopped`, and compared
//! again.
//!
//! The story runs twice, on the same code; the API server of the
//! Kubernetes-mode half is:
//! - `export_import_round_trip`: a real kube-apiserver and etcd (the test
//!   binary's control plane, tests/common/control_plane.rs, deploy/crds/
//!   installed), reached as its `metalherd` user through a kubeconfig;
//! - `export_import_round_trip_on_the_stand_in`: the stand-in (a second
//!   `metalherd serve`, controller off), through the kubeconfig `metalherd
//!   kubeconfig` prints.
//!
//! What the comparison ignores, and only that: the metadata the server sets
//! on create (`uid`, `resourceVersion`, `creationTimestamp`,
//! `managedFields`, `generation`, `selfLink`:
//! `metalherd::backup::objects::SERVER_SET_METADATA`), every
//! `observedGeneration` in status and its conditions (import moves them to
//! the new generation; checked separately: each still equals its object's
//! generation), an Event's `involvedObject.uid` (checked separately:
//! it names the new uid of its Machine), and an Event's fields that
//! kube-apiserver always writes, when they hold their zero value
//! (`eventTime: null`, `reportingComponent: ""`, `reportingInstance: ""`,
//! `source: {}`: core/v1 serializes them even when unset; the stand-in
//! leaves an unset field out, which a Kubernetes client reads the same).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::Api;
use common::server::{Server, text};
use metalherd::backup::objects::without_server_set;
use serde_json::{Value, json};

const API: &str = "/apis/metalherd.dev/v1alpha1/namespaces/default";
const T: &str = "2026-01-02T03:04:05Z";

fn ok(out: std::process::Output, what: &str) -> (String, String) {
    let (o, e) = text(&out);
    assert!(out.status.success(), "{what} failed:\n{o}\n{e}");
    (o, e)
}

fn put_status(s: &Server, plural: &str, name: &str, status: Value) {
    let path = format!("{API}/{plural}/{name}");
    let (code, mut obj) = s.req("GET", &path, None);
    assert_eq!(code, 200, "{obj}");
    obj["status"] = status;
    let (code, body) = s.req("PUT", &format!("{path}/status"), Some(&obj));
    assert_eq!(code, 200, "status of {name}: {body}");
}

fn create(s: &Server, path: &str, obj: Value) -> Value {
    let (code, body) = s.req("POST", path, Some(&obj));
    assert!(code < 300, "create at {path}: {code} {body}");
    body
}

/// The standalone site: objects in several states.
fn seed(s: &Server) {
    let examples = common::repo_root().join("deploy/examples");
    for f in [
        "bmc-secret.yaml",
        "bootstrap-token.yaml",
        "class-flatcar.yaml",
        "machine.yaml",
        "machine-flatcar.yaml",
        "machineset.yaml",
    ] {
        let p = examples.join(f);
        ok(s.cli(&["apply", "-f", p.to_str().unwrap()]), f);
    }
    let cond = |t: &str, st: &str, g: i64| {
        json!({"type": t, "status": st, "reason": "Seeded", "message": "",
            "lastTransitionTime": T, "observedGeneration": g})
    };
    let boot_done = json!({"id": "b-1", "purpose": "install", "revision": "r1", "mintedAt": T,
        "ignitionServedAt": T, "completedAt": T, "outcome": "installed", "bootedAt": T});
    put_status(
        s,
        "machines",
        "rack1-u05",
        json!({"phase": "Ready", "powerState": "On",
        "conditions": [cond("Ready", "True", 1)], "boot": boot_done,
        "bootHistory": [{"step": "Installed", "time": T, "bootId": "b-1"}], "observedGeneration": 1}),
    );
    put_status(
        s,
        "machines",
        "rack1-u07",
        json!({"phase": "Available", "powerState": "Off",
        "conditions": [cond("Ready", "False", 1)], "observedGeneration": 1}),
    );
    // An unpaused Machine whose spec changed once (generation 2), in Error;
    // and one in the middle of its install boot.
    let mut m = serde_json::to_value(
        serde_yaml::from_str::<Value>(
            &std::fs::read_to_string(examples.join("machine.yaml")).unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    for (name, mac) in [
        ("rack1-u09", "52:54:00:12:34:09"),
        ("rack1-u10", "52:54:00:12:34:10"),
    ] {
        m["metadata"] = json!({"name": name, "namespace": "default", "labels": {"rack": "rack1"}});
        m["spec"]["bootMACAddress"] = json!(mac);
        m["spec"]["network"]["address"] = json!(format!("10.20.0.1{}/24", &name[7..]));
        m["spec"]["network"]["hostname"] = json!(name);
        create(s, &format!("{API}/machines"), m.clone());
    }
    let path = format!("{API}/machines/rack1-u09");
    let (_, mut u09) = s.req("GET", &path, None);
    u09["spec"]["online"] = json!(true);
    let (code, body) = s.req("PUT", &path, Some(&u09));
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["metadata"]["generation"], 2);
    put_status(
        s,
        "machines",
        "rack1-u09",
        json!({"phase": "Error", "powerState": "Unknown",
        "conditions": [cond("Ready", "False", 2), cond("BmcReachable", "False", 1)],
        "lastError": {"reason": "BmcUnreachable", "message": "no route", "time": T},
        "observedGeneration": 2}),
    );
    put_status(
        s,
        "machines",
        "rack1-u10",
        json!({"phase": "Provisioning", "powerState": "On",
        "boot": {"id": "b-2", "purpose": "install", "mintedAt": T}}),
    );
    put_status(
        s,
        "machinesets",
        "workers",
        json!({"replicas": 1, "readyReplicas": 1,
        "observedGeneration": 1}),
    );
    create(
        s,
        &format!("{API}/discoveredmachines"),
        json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "DiscoveredMachine",
        "metadata": {"name": "52-54-00-aa-bb-cc", "namespace": "default"},
        "spec": {"macAddress": "52:54:00:aa:bb:cc", "architecture": "x86_64-uefi",
            "firstSeen": T, "lastSeen": T}}),
    );
    let (_, u05) = s.req("GET", &format!("{API}/machines/rack1-u05"), None);
    create(
        s,
        "/api/v1/namespaces/default/events",
        json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "rack1-u05.seeded", "namespace": "default"},
        "involvedObject": {"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
            "namespace": "default", "name": "rack1-u05", "uid": u05["metadata"]["uid"]},
        "type": "Normal", "reason": "Ready", "message": "rack1-u05 is Ready", "count": 1,
        "firstTimestamp": T, "lastTimestamp": T}),
    );
}

fn read(path: &Path) -> Value {
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The items of an export, keyed by kind/namespace/name, with what the
/// comparison ignores removed. Checks on the way that observedGenerations
/// still equal their object's generation where they did in the seed.
fn comparable(doc: &Value) -> std::collections::BTreeMap<String, Value> {
    let uids: std::collections::BTreeMap<&str, String> = doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["metadata"]["uid"].as_str().unwrap(),
                format!("{}/{}", o["kind"], o["metadata"]["name"]),
            )
        })
        .collect();
    let mut out = std::collections::BTreeMap::new();
    for item in doc["items"].as_array().unwrap() {
        let mut o = without_server_set(item);
        let generation = item["metadata"]["generation"].clone();
        if let Some(s) = o.get_mut("status").and_then(Value::as_object_mut) {
            if let Some(g) = s.remove("observedGeneration") {
                assert_eq!(
                    g, generation,
                    "observedGeneration of {}",
                    item["metadata"]["name"]
                );
            }
            for c in s
                .get_mut("conditions")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                c.as_object_mut().unwrap().remove("observedGeneration");
            }
        }
        if let Some(u) = o.pointer_mut("/involvedObject/uid") {
            // The Event names its Machine by the uid that Machine has in
            // this same export.
            let named = uids.get(u.as_str().unwrap()).cloned();
            assert_eq!(
                named.as_deref(),
                Some("\"Machine\"/\"rack1-u05\""),
                "{item}"
            );
            *u = Value::Null;
        }
        if o["kind"] == "Event" {
            let unset = [
                ("eventTime", json!(null)),
                ("reportingComponent", json!("")),
                ("reportingInstance", json!("")),
                ("source", json!({})),
            ];
            let fields = o.as_object_mut().unwrap();
            for (field, zero) in unset {
                if fields.get(field) == Some(&zero) {
                    fields.remove(field);
                }
            }
        }
        out.insert(
            format!(
                "{}/{}/{}",
                o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]
            ),
            o,
        );
    }
    out
}

fn assert_same(a: &Value, b: &Value, what: &str) {
    let (a, b) = (comparable(a), comparable(b));
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "{what}: different objects"
    );
    for (k, v) in &a {
        assert_eq!(v, &b[k], "{what}: {k} differs");
    }
}

#[test]
fn export_import_round_trip() {
    let cp = common::control_plane::shared();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    cp.write_kubeconfig(&kc, &cp.metalherd_token);
    round_trip(&cp, &kc);
}

#[test]
fn export_import_round_trip_on_the_stand_in() {
    let cluster = Server::start();
    let (kc_text, _) = ok(cluster.cli(&["kubeconfig"]), "metalherd kubeconfig");
    let kc = cluster.dir.path().join("kubeconfig");
    std::fs::write(&kc, kc_text).unwrap();
    round_trip(&cluster, &kc);
}

/// The story, its Kubernetes-mode half on `cluster` (empty of the site's
/// objects), reached through the kubeconfig `kc`.
fn round_trip(cluster: &impl Api, kc: &Path) {
    let site = Server::start();
    seed(&site);
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first.yaml");
    let first_s = first.to_str().unwrap();

    // A Machine in the middle of its boot: refused, and named.
    let out = site.cli(&["export", "--events", "-o", first_s]);
    let (_, err) = text(&out);
    assert!(
        !out.status.success(),
        "export with a boot in flight succeeded"
    );
    assert!(
        err.contains("machine default/rack1-u10: network boot b-2 (install) is open")
            || err.contains("machine default/rack1-u10: phase Provisioning"),
        "{err}"
    );
    assert!(!err.contains("rack1-u05"), "{err}");
    // It settles (the boot failed; the Machine is in Error), then export works.
    put_status(
        &site,
        "machines",
        "rack1-u10",
        json!({"phase": "Error", "powerState": "Off",
        "boot": {"id": "b-2", "purpose": "install", "mintedAt": T, "completedAt": T,
            "outcome": "failed"}}),
    );
    let (_, err) = ok(
        site.cli(&["export", "--events", "-o", first_s]),
        "export from the site",
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&first).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the export holds Secrets");
    let first_doc = read(&first);
    let kinds: Vec<&str> = first_doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "Secret",
            "Secret",
            "Secret",
            "Secret",
            "MachineClass",
            "Machine",
            "Machine",
            "Machine",
            "Machine",
            "MachineSet",
            "DiscoveredMachine",
            "Event"
        ]
    );
    assert!(err.contains("exported 12 objects"), "{err}");
    // A stopped-store export refuses a store a server holds.
    let out = site.cli(&["export", "--stopped"]);
    assert!(!out.status.success());
    assert!(
        text(&out)
            .1
            .contains("stop it, or export from it while it runs"),
        "{}",
        text(&out).1
    );

    // Into Kubernetes mode: the API server through a kubeconfig.
    let kc_s = kc.to_str().unwrap();
    let (o, _) = ok(
        site.cli(&["import", "-f", first_s, "--kubeconfig", kc_s]),
        "import into the cluster",
    );
    assert!(o.contains("imported 4 secrets, 1 machineclasses, 4 machines, 1 machinesets, 1 discoveredmachines, 1 events"), "{o}");
    // Again: everything is already there, named.
    let out = site.cli(&["import", "-f", first_s, "--kubeconfig", kc_s]);
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("machine default/rack1-u05"),
        "{}",
        text(&out).1
    );
    let second = dir.path().join("second.yaml");
    ok(
        site.cli(&[
            "export",
            "--events",
            "--kubeconfig",
            kc_s,
            "-o",
            second.to_str().unwrap(),
        ]),
        "export from the cluster",
    );
    let second_doc = read(&second);
    assert_same(&first_doc, &second_doc, "standalone -> Kubernetes mode");
    let (_, u05) = cluster.req("GET", &format!("{API}/machines/rack1-u05"), None);
    let old_u05 = first_doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["metadata"]["name"] == "rack1-u05")
        .unwrap();
    assert_ne!(
        u05["metadata"]["uid"], old_u05["metadata"]["uid"],
        "a recreated Machine has a new uid"
    );
    assert!(
        u05["metadata"]["annotations"]["metalherd.dev/paused"] == "true",
        "paused in the file, paused after"
    );
    let (_, u09) = cluster.req("GET", &format!("{API}/machines/rack1-u09"), None);
    assert!(
        u09["metadata"].get("annotations").is_none(),
        "import's own pause is lifted: {u09}"
    );

    // Restore the first file into an empty data directory, and export it
    // from there with no server running.
    let restored = dir.path().join("restored");
    let rs = restored.to_str().unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(common::metalherd_bin())
            .args(["--data-dir", rs])
            .args(args)
            .env_remove("METALHERD_SERVER")
            .env_remove("METALHERD_TOKEN")
            .output()
            .unwrap()
    };
    ok(run(&["import", "-f", first_s, "--stopped"]), "restore");
    let out = run(&["import", "-f", first_s, "--stopped"]);
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("is not empty (12 objects)"),
        "{}",
        text(&out).1
    );
    let third = dir.path().join("third.yaml");
    ok(
        run(&[
            "export",
            "--stopped",
            "--events",
            "-o",
            third.to_str().unwrap(),
        ]),
        "export --stopped",
    );
    assert_same(&first_doc, &read(&third), "backup -> restore");
    drop(site);
}
