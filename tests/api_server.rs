//! Story: the REST API behaves like a Kubernetes API server for metalherd's
//! objects: bearer-token auth, create/get/list/replace/patch/delete with
//! the right codes and `Status` bodies, status subresource, and watches
//! streamed over HTTP that resume from a resourceVersion.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::manifests::{machine, machine_class};
use common::proc::{ChildGuard, wait_for};
use common::server::Server;
use serde_json::{Value, json};

const MACHINES: &str = "/apis/metalherd.dev/v1alpha1/namespaces/default/machines";
/// Watches use Secrets: no controller writes them, so the stream holds
/// exactly the test's own changes.
const SECRETS: &str = "/api/v1/namespaces/default/secrets";

fn secret(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "labels": {"rack": "r1"}}, "data": {"k": "djE="}})
}

#[test]
fn requests_without_the_token_get_401_and_healthz_needs_none() {
    let s = Server::start_isolated();
    for path in [
        MACHINES,
        "/api/v1/namespaces/default/secrets",
        "/metrics",
        "/nope",
    ] {
        let (code, body) = s.http("GET", path, None, None, "");
        assert_eq!(code, 401, "{path}: {body}");
        assert_eq!(body["reason"], "Unauthorized", "{path}: {body}");
        let (code, _) = s.http("GET", path, Some("wrong-token"), None, "");
        assert_eq!(code, 401, "{path} with a wrong token");
    }
    let (code, _) = s.http(
        "POST",
        MACHINES,
        None,
        Some(&machine("m1")),
        "application/json",
    );
    assert_eq!(code, 401);
    let (code, _) = s.http("GET", "/healthz", None, None, "");
    assert_eq!(code, 200);
    // Nothing was created by the refused POST.
    let (code, l) = s.req("GET", MACHINES, None);
    assert_eq!(code, 200);
    assert_eq!(l["items"], json!([]));
    // The token file is private.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(s.data_dir.join("api-token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn crud_with_kubernetes_codes() {
    let s = Server::start_isolated();
    // Machines: create, list, get. (The machine controller runs in this
    // server and writes their status, so exact-version checks use a
    // MachineClass below, which no controller writes.)
    let (code, m1) = s.req("POST", MACHINES, Some(&machine("m1")));
    assert_eq!(code, 201, "{m1}");
    assert_eq!(m1["metadata"]["generation"], 1);
    assert!(m1["metadata"]["uid"].is_string());
    let (code, dup) = s.req("POST", MACHINES, Some(&machine("m1")));
    assert_eq!((code, dup["reason"].as_str()), (409, Some("AlreadyExists")));
    let mut other = machine("m2");
    other["metadata"]["labels"] = json!({"rack": "r2"});
    assert_eq!(s.req("POST", MACHINES, Some(&other)).0, 201);
    let (code, l) = s.req("GET", &format!("{MACHINES}?labelSelector=rack%3Dr2"), None);
    assert_eq!(code, 200);
    assert_eq!(l["kind"], "MachineList");
    assert_eq!(l["items"].as_array().unwrap().len(), 1);
    assert_eq!(l["items"][0]["metadata"]["name"], "m2");
    let (_, all) = s.req("GET", "/apis/metalherd.dev/v1alpha1/machines", None);
    assert_eq!(all["items"].as_array().unwrap().len(), 2);
    let (code, bad) = s.req("GET", &format!("{MACHINES}?labelSelector=a%20in%20"), None);
    assert_eq!((code, bad["reason"].as_str()), (400, Some("BadRequest")));
    let (code, got) = s.req("GET", &format!("{MACHINES}/m1"), None);
    assert_eq!(code, 200);
    assert_eq!(
        (&got["metadata"]["uid"], &got["spec"]),
        (&m1["metadata"]["uid"], &m1["spec"])
    );
    let (code, nf) = s.req("GET", &format!("{MACHINES}/nope"), None);
    assert_eq!((code, nf["reason"].as_str()), (404, Some("NotFound")));

    // Replace: spec change bumps generation; a stale resourceVersion conflicts.
    let classes = "/apis/metalherd.dev/v1alpha1/namespaces/default/machineclasses";
    let (code, c1) = s.req("POST", classes, Some(&machine_class("c1")));
    assert_eq!(code, 201, "{c1}");
    let mut upd = c1.clone();
    upd["spec"]["kubernetes"]["version"] = json!("v1.33.3");
    let (code, c1b) = s.req("PUT", &format!("{classes}/c1"), Some(&upd));
    assert_eq!(code, 200, "{c1b}");
    assert_eq!(c1b["metadata"]["generation"], 2);
    let (code, c) = s.req("PUT", &format!("{classes}/c1"), Some(&upd));
    assert_eq!((code, c["reason"].as_str()), (409, Some("Conflict")), "{c}");
    // A body naming another object is a bad request.
    let (code, _) = s.req("PUT", &format!("{classes}/c2"), Some(&c1b));
    assert_eq!(code, 400);

    // Merge patch (labels), without a resourceVersion: applied to the latest.
    let (code, p) = s.http(
        "PATCH",
        &format!("{classes}/c1"),
        Some(&s.token),
        Some(&json!({"metadata": {"labels": {"pool": "a"}}})),
        "application/merge-patch+json",
    );
    assert_eq!(code, 200, "{p}");
    assert_eq!(
        p["metadata"]["labels"],
        json!({"os": "flatcar", "pool": "a"})
    );
    assert_eq!(p["metadata"]["generation"], 2, "labels are not spec");
    let (code, _) = s.http(
        "PATCH",
        &format!("{classes}/c1"),
        Some(&s.token),
        Some(&json!({"spec": {"wipeOnDeprovision": true}})),
        "application/json",
    );
    assert_eq!(code, 415);
    // Strategic merge patches are for built-in kinds only, as in Kubernetes.
    let (code, _) = s.http(
        "PATCH",
        &format!("{classes}/c1"),
        Some(&s.token),
        Some(&json!({"spec": {"wipeOnDeprovision": true}})),
        "application/strategic-merge-patch+json",
    );
    assert_eq!(code, 415);

    // Status goes through /status only.
    let (code, st) = s.http(
        "PATCH",
        &format!("{classes}/c1/status"),
        Some(&s.token),
        Some(&json!({"status": {"revision": "r1"}})),
        "application/merge-patch+json",
    );
    assert_eq!(code, 200, "{st}");
    assert_eq!(st["status"]["revision"], "r1");
    assert_eq!(st["metadata"]["generation"], 2);
    let mut with_status = st.clone();
    with_status["status"]["revision"] = json!("r2");
    let (code, kept) = s.req("PUT", &format!("{classes}/c1"), Some(&with_status));
    assert_eq!(code, 200, "{kept}");
    assert_eq!(
        kept["status"]["revision"], "r1",
        "PUT must not write status"
    );

    // Secrets: stringData is folded into data.
    let secrets = "/api/v1/namespaces/default/secrets";
    let (code, sec) = s.req(
        "POST",
        secrets,
        Some(&json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "m1-bmc"}, "stringData": {"username": "admin"}})),
    );
    assert_eq!(code, 201, "{sec}");
    assert_eq!(sec["data"]["username"], "YWRtaW4=");
    // Secrets are core/v1, not under the metalherd group.
    let (code, _) = s.req(
        "GET",
        "/apis/metalherd.dev/v1alpha1/namespaces/default/secrets",
        None,
    );
    assert_eq!(code, 404);

    // Delete, then it is gone.
    for path in [format!("{classes}/c1"), format!("{secrets}/m1-bmc")] {
        let (code, _) = s.req("DELETE", &path, None);
        assert_eq!(code, 200, "{path}");
        assert_eq!(s.req("GET", &path, None).0, 404, "{path}");
        let (code, nf) = s.req("DELETE", &path, None);
        assert_eq!((code, nf["reason"].as_str()), (404, Some("NotFound")));
    }

    // Metrics count what happened, under the metalherd_ prefix.
    let out = s
        .curl()
        .args(["-s", "-H", &format!("Authorization: Bearer {}", s.token)])
        .arg(format!("{}/metrics", s.url))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("metalherd_api_requests_total{method=\"POST\",code=\"201\"}"),
        "{text}"
    );
    // Secret values never reach the log.
    assert!(!s.log().contains("YWRtaW4="), "secret data in log");
}

#[test]
fn finalizers_only_mark_for_deletion() {
    let s = Server::start_isolated();
    let secrets = "/api/v1/namespaces/default/secrets";
    let sec = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "held", "finalizers": ["example.com/hold"]}});
    assert_eq!(s.req("POST", secrets, Some(&sec)).0, 201);
    let (code, marked) = s.req("DELETE", &format!("{secrets}/held"), None);
    assert_eq!(code, 202, "{marked}");
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(s.req("GET", &format!("{secrets}/held"), None).0, 200);
    let (code, _) = s.http(
        "PATCH",
        &format!("{secrets}/held"),
        Some(&s.token),
        Some(&json!({"metadata": {"finalizers": null}})),
        "application/merge-patch+json",
    );
    assert!(code == 200 || code == 404, "{code}");
    assert_eq!(s.req("GET", &format!("{secrets}/held"), None).0, 404);
}

/// Start `curl -N` on a watch URL, writing the stream to a file.
fn start_watch(s: &Server, query: &str, file: &str) -> (ChildGuard, std::path::PathBuf) {
    let timeout = if query.contains("timeoutSeconds") {
        ""
    } else {
        "&timeoutSeconds=60"
    };
    let out = s.dir.path().join(file);
    let guard = ChildGuard::spawn(
        "curl watch",
        s.curl()
            .args(["-s", "-N", "--max-time", "60", "-H"])
            .arg(format!("Authorization: Bearer {}", s.token))
            .arg(format!("{}{SECRETS}?watch=true{timeout}{query}", s.url)),
        &out,
    );
    (guard, out)
}

fn events(path: &std::path::Path, n: usize) -> Vec<Value> {
    let got = wait_for(Duration::from_secs(20), || {
        let text = std::fs::read_to_string(path).ok()?;
        // Only complete lines: curl may be mid-write.
        let done = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        let lines: Vec<Value> = done
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("watch line is JSON"))
            .collect();
        (lines.len() >= n).then_some(lines)
    });
    got.unwrap_or_else(|| {
        panic!(
            "fewer than {n} watch events: {}",
            std::fs::read_to_string(path).unwrap_or_default()
        )
    })
}

fn summary(evs: &[Value]) -> Vec<(String, String)> {
    evs.iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn watch_streams_changes_over_http_and_resumes_from_a_version() {
    let s = Server::start_isolated();
    assert_eq!(s.req("POST", SECRETS, Some(&secret("before"))).0, 201);
    let (_, list) = s.req("GET", SECRETS, None);
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    // Without a version: synthetic ADDED for what exists, then changes.
    let (_g1, plain) = start_watch(&s, "", "w1");
    // From the list's version: only what comes after.
    let (_g2, from) = start_watch(&s, &format!("&resourceVersion={rv}"), "w2");
    // With a selector: only rack r2.
    let (_g3, sel) = start_watch(
        &s,
        &format!("&resourceVersion={rv}&labelSelector=rack%3Dr2"),
        "w3",
    );
    // Both watches are open once the first shows its ADDED event; give the
    // resumed one a change it must see to prove it is open too.
    events(&plain, 1);

    let (_, a) = s.req("POST", SECRETS, Some(&secret("a")));
    let mut b = secret("b");
    b["metadata"]["labels"]["rack"] = json!("r2");
    assert_eq!(s.req("POST", SECRETS, Some(&b)).0, 201);
    let mut a2 = a.clone();
    a2["data"]["k"] = json!("djI=");
    assert_eq!(s.req("PUT", &format!("{SECRETS}/a"), Some(&a2)).0, 200);
    assert_eq!(s.req("DELETE", &format!("{SECRETS}/a"), None).0, 200);

    let want_after: Vec<(String, String)> = [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
    ]
    .iter()
    .map(|(t, n)| (t.to_string(), n.to_string()))
    .collect();
    let mut want_plain = vec![("ADDED".to_string(), "before".to_string())];
    want_plain.extend(want_after.clone());
    assert_eq!(summary(&events(&plain, 5)), want_plain);
    assert_eq!(summary(&events(&from, 4)), want_after);
    assert_eq!(
        summary(&events(&sel, 1)),
        vec![("ADDED".to_string(), "b".to_string())]
    );

    // Resume from the middle: exactly the changes after that version.
    let evs = events(&from, 4);
    let mid = evs[1]["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let (_g4, resumed) = start_watch(
        &s,
        &format!("&resourceVersion={mid}&timeoutSeconds=2"),
        "w4",
    );
    let got = events(&resumed, 2);
    assert_eq!(summary(&got), want_after[2..].to_vec());
    // The stream ends by itself at timeoutSeconds with nothing more in it.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(events(&resumed, 2).len(), 2);

    // A bad version is a 400, not a hang.
    let (code, _) = s.req(
        "GET",
        &format!("{SECRETS}?watch=true&resourceVersion=abc"),
        None,
    );
    assert_eq!(code, 400);
}

/// The scale subresource as kube-apiserver serves it for a CRD with
/// `subresources.scale`: an `autoscaling/v1` Scale whose spec is the set's
/// `spec.replicas` and whose status is the controller's `status.replicas`
/// and `status.selector`; PUT and merge PATCH write only `spec.replicas`,
/// with the Scale's resourceVersion as a precondition.
#[test]
fn scale_subresource_reads_and_writes_replicas() {
    let s = Server::start_isolated();
    let sets = "/apis/metalherd.dev/v1alpha1/namespaces/default/machinesets";
    let scale = format!("{sets}/workers/scale");
    let classes = "/apis/metalherd.dev/v1alpha1/namespaces/default/machineclasses";
    assert_eq!(
        s.req("POST", classes, Some(&machine_class("flatcar"))).0,
        201
    );
    // One pool machine, Available (its BMC is unreachable in this
    // namespace, so the Machine controller leaves the phase alone).
    let mut m = machine("m1");
    m["metadata"]["labels"] = json!({"role": "worker"});
    assert_eq!(s.req("POST", MACHINES, Some(&m)).0, 201);
    let (code, body) = s.http(
        "PATCH",
        &format!("{MACHINES}/m1/status"),
        Some(&s.token),
        Some(&json!({"status": {"phase": "Available"}})),
        "application/merge-patch+json",
    );
    assert_eq!(code, 200, "{body}");
    let (code, set) = s.req(
        "POST",
        sets,
        Some(&common::manifests::machine_set("workers", 1)),
    );
    assert_eq!(code, 201, "{set}");

    // GET: the controller claims the machine and records the selector.
    let got = wait_for(Duration::from_secs(30), || {
        let (code, sc) = s.req("GET", &scale, None);
        (code == 200 && sc["status"]["replicas"] == 1).then_some(sc)
    });
    let sc = got.unwrap_or_else(|| {
        panic!(
            "the scale never showed 1 replica: {:?}\n{}",
            s.req("GET", &scale, None),
            s.log()
        )
    });
    assert_eq!(sc["kind"], "Scale");
    assert_eq!(sc["apiVersion"], "autoscaling/v1");
    assert_eq!(sc["metadata"]["name"], "workers");
    assert_eq!(sc["metadata"]["namespace"], "default");
    assert_eq!(sc["spec"]["replicas"], 1);
    assert_eq!(sc["status"]["selector"], "role=worker");
    let (_, obj) = s.req("GET", &format!("{sets}/workers"), None);
    assert_eq!(
        sc["metadata"]["resourceVersion"],
        obj["metadata"]["resourceVersion"]
    );
    assert_eq!(sc["metadata"]["uid"], obj["metadata"]["uid"]);

    // PUT a Scale with the current resourceVersion: spec.replicas moves,
    // nothing else of the set does.
    let mut put = sc.clone();
    put["spec"]["replicas"] = json!(3);
    let (code, after) = s.req("PUT", &scale, Some(&put));
    assert_eq!(code, 200, "{after}");
    assert_eq!(after["kind"], "Scale");
    assert_eq!(after["spec"]["replicas"], 3);
    let (_, obj2) = s.req("GET", &format!("{sets}/workers"), None);
    assert_eq!(obj2["spec"]["replicas"], 3);
    assert_eq!(obj2["spec"]["template"], obj["spec"]["template"]);
    assert_eq!(obj2["spec"]["selector"], obj["spec"]["selector"]);
    // The same stale Scale again: a conflict, as in Kubernetes.
    let (code, st) = s.req("PUT", &scale, Some(&put));
    assert_eq!(code, 409, "{st}");
    assert_eq!(st["reason"], "Conflict");
    // Invalid replicas name the field.
    let (code, st) = s.req(
        "PUT",
        &scale,
        Some(&json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "spec": {"replicas": -1}})),
    );
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["details"]["causes"][0]["field"], "spec.replicas");
    // Not a Scale: refused.
    let (code, _) = s.req("PUT", &scale, Some(&obj2));
    assert_eq!(code, 400);

    // Merge PATCH, as `kubectl scale` sends it: back to 0, and the
    // controller releases the machine.
    let (code, after) = s.http(
        "PATCH",
        &scale,
        Some(&s.token),
        Some(&json!({"spec": {"replicas": 0}})),
        "application/merge-patch+json",
    );
    assert_eq!(code, 200, "{after}");
    // Zero is left out, as autoscaling/v1 encodes it (`omitempty`).
    assert_eq!(after["spec"], json!({}), "{after}");
    let (_, obj3) = s.req("GET", &format!("{sets}/workers"), None);
    assert_eq!(obj3["spec"]["replicas"], 0);
    let released = wait_for(Duration::from_secs(30), || {
        let (_, sc) = s.req("GET", &scale, None);
        (sc["status"]["replicas"] == 0).then_some(())
    });
    assert!(released.is_some(), "{}", s.log());
    let (code, _) = s.http(
        "PATCH",
        &scale,
        Some(&s.token),
        Some(&json!({"spec": {"replicas": 2}})),
        "application/json-patch+json",
    );
    assert_eq!(code, 415);

    // Only MachineSets have one; a missing set is 404.
    let (code, st) = s.req("GET", &format!("{MACHINES}/m1/scale"), None);
    assert_eq!(code, 404, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("no scale subresource")
    );
    assert_eq!(s.req("GET", &format!("{sets}/nope/scale"), None).0, 404);
    assert_eq!(s.req("DELETE", &scale, None).0, 405);
}
