//! Router tests against the embedded store in a temp directory, through
//! `tower::ServiceExt::oneshot` (no sockets).

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::*;
use crate::http::ops::MetricsRegistry;
use crate::store::embedded::EmbeddedStore;

mod lists;

async fn app(dir: &tempfile::TempDir) -> Router {
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&dir.path().join("s.redb")).unwrap());
    namespaces::ensure(&*store).await.unwrap();
    let metrics = ApiMetrics::register(&MetricsRegistry::new());
    let st = ApiState {
        store,
        cancel: CancellationToken::new(),
        metrics: metrics.clone(),
        admission: Default::default(),
        namespaces: Default::default(),
    };
    protect(
        routes(st),
        crate::http::ops::health_routes(),
        "t0k",
        metrics,
    )
}

async fn call(app: &Router, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let mut b = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", "Bearer t0k");
    if body.is_some() {
        b = b.header("content-type", "application/json");
    }
    let req = b
        .body(body.map_or(Body::empty(), |v| Body::from(v.to_string())))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let code = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[test]
fn groups_serve_their_own_kinds_only() {
    assert_eq!(Group::Core.kind("secrets"), Some(Kind::Secret));
    assert_eq!(Group::Core.kind("machines"), None);
    assert_eq!(Group::Metalherd.kind("machines"), Some(Kind::Machine));
    assert_eq!(Group::Metalherd.kind("events"), None);
}

#[tokio::test]
async fn body_must_agree_with_the_url() {
    let d = tempfile::tempdir().unwrap();
    let app = app(&d).await;
    let base = "/apis/metalherd.dev/v1alpha1/namespaces/default";
    let m = json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": "m1", "namespace": "other"},
        "spec": {"bmc": {"address": "ipmi://h", "credentialsSecretRef": {"name": "s"}}}});
    let (code, b) = call(&app, "POST", &format!("{base}/machines"), Some(m.clone())).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{b}");
    let (code, _) = call(&app, "POST", &format!("{base}/machinesets"), Some(m)).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    let (code, b) = call(&app, "POST", &format!("{base}/machines"), Some(json!([1]))).await;
    assert_eq!(
        (code, b["kind"].as_str()),
        (StatusCode::BAD_REQUEST, Some("Status"))
    );
    let (code, b) = call(&app, "GET", &format!("{base}/widgets"), None).await;
    assert_eq!(
        (code, b["reason"].as_str()),
        (StatusCode::NOT_FOUND, Some("NotFound"))
    );
    let (code, _) = call(&app, "GET", &format!("{base}/secrets/x/status"), None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, b) = call(
        &app,
        "POST",
        &format!("{base}/machines/m1"),
        Some(json!({})),
    )
    .await;
    assert_eq!(
        (code, b["reason"].as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, Some("MethodNotAllowed"))
    );
}

#[tokio::test]
async fn create_fills_kind_and_namespace_and_drops_status() {
    let d = tempfile::tempdir().unwrap();
    let app = app(&d).await;
    let m = json!({"metadata": {"name": "m1"},
        "spec": {"bmc": {"address": "ipmi://h", "credentialsSecretRef": {"name": "s"}}},
        "status": {"phase": "Ready"}});
    let url = "/apis/metalherd.dev/v1alpha1/namespaces/lab/machines";
    // Not before the namespace exists (kube-apiserver's answer).
    let (code, b) = call(&app, "POST", url, Some(m.clone())).await;
    assert_eq!(code, StatusCode::NOT_FOUND, "{b}");
    assert_eq!(b["message"], "namespaces \"lab\" not found");
    assert_eq!(
        b["details"],
        json!({"name": "lab", "group": "", "kind": "namespaces"})
    );
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lab"}});
    let (code, b) = call(&app, "POST", "/api/v1/namespaces", Some(ns)).await;
    assert_eq!(code, StatusCode::CREATED, "{b}");
    let (code, b) = call(&app, "POST", url, Some(m)).await;
    assert_eq!(code, StatusCode::CREATED, "{b}");
    assert_eq!(b["kind"], "Machine");
    assert_eq!(b["metadata"]["namespace"], "lab");
    assert!(
        b.get("status").is_none_or(|s| s.get("phase").is_none()),
        "{b}"
    );
}

#[test]
fn leases_are_served_in_coordination_only() {
    assert_eq!(Group::Coordination.kind("leases"), Some(Kind::Lease));
    assert_eq!(Group::Core.kind("leases"), None);
    assert_eq!(group_prefix(Kind::Lease), "/apis/coordination.k8s.io/v1");
}

#[tokio::test]
async fn leases_have_kube_apiservers_update_rules() {
    let d = tempfile::tempdir().unwrap();
    let app = app(&d).await;
    let url = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    let lease = |holder: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "leader"},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                        "renewTime": "2026-11-22T03:00:00.000000Z"}})
    };
    // A PUT without a resourceVersion creates a missing Lease...
    let (code, b) = call(&app, "PUT", &format!("{url}/leader"), Some(lease("a"))).await;
    assert_eq!(code, StatusCode::CREATED, "{b}");
    assert_eq!(b["spec"]["renewTime"], "2026-11-22T03:00:00.000000Z");
    let rv = b["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    // ...but does not overwrite one that exists.
    let (code, b) = call(&app, "PUT", &format!("{url}/leader"), Some(lease("b"))).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(
        b["details"]["causes"][0]["field"],
        "metadata.resourceVersion"
    );
    // With the current version one writer wins; the other gets a Conflict.
    let mut next = lease("b");
    next["metadata"]["resourceVersion"] = json!(rv);
    let (code, b) = call(&app, "PUT", &format!("{url}/leader"), Some(next.clone())).await;
    assert_eq!(code, StatusCode::OK, "{b}");
    next["spec"]["holderIdentity"] = json!("c");
    let (code, b) = call(&app, "PUT", &format!("{url}/leader"), Some(next)).await;
    assert_eq!(
        (code, b["reason"].as_str()),
        (StatusCode::CONFLICT, Some("Conflict")),
        "{b}"
    );
    assert_eq!(b["details"]["kind"], "leases");
    // A strategic merge patch (what kubectl sends a built-in kind) works.
    let req = Request::builder()
        .method("PATCH")
        .uri(format!("{url}/leader"))
        .header("authorization", "Bearer t0k")
        .header("content-type", "application/strategic-merge-patch+json")
        .body(Body::from(r#"{"spec":{"leaseTransitions":1}}"#))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let (_, b) = call(&app, "GET", &format!("{url}/leader"), None).await;
    assert_eq!(b["spec"]["holderIdentity"], "b");
    assert_eq!(b["spec"]["leaseTransitions"], 1);
    // Unknown fields and kube-apiserver's rules are refused by path.
    let mut bad = lease("x");
    bad["metadata"]["name"] = json!("other");
    bad["spec"]["leaseDurationSeconds"] = json!(0);
    let (code, b) = call(&app, "POST", url, Some(bad)).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(
        b["details"]["causes"][0]["field"],
        "spec.leaseDurationSeconds"
    );
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .starts_with("Lease.coordination.k8s.io \"other\" is invalid"),
        "{b}"
    );
    let (code, b) = call(&app, "GET", "/apis/coordination.k8s.io/v1/leases", None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(
        (b["kind"].as_str(), b["items"].as_array().map(Vec::len)),
        (Some("LeaseList"), Some(1))
    );
}

async fn send(
    app: &Router,
    method: &str,
    path: &str,
    ct: &str,
    body: &[u8],
) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", "Bearer t0k")
        .header("content-type", ct)
        .body(Body::from(body.to_vec()))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let code = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn namespaces_are_cluster_scoped_objects() {
    let d = tempfile::tempdir().unwrap();
    let app = app(&d).await;
    // `default` is there from the start.
    let (code, b) = call(&app, "GET", "/api/v1/namespaces/default", None).await;
    assert_eq!(code, StatusCode::OK, "{b}");
    assert_eq!(b["status"]["phase"], "Active");
    assert_eq!(
        b["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "default"
    );
    // `kubectl create namespace lab` sends protobuf.
    let pb = b"k8s\0\x0a\x0f\x0a\x02v1\x12\x09Namespace\x12\x09\x0a\x05\x0a\x03lab\x12\x00";
    let (code, b) = send(
        &app,
        "POST",
        "/api/v1/namespaces",
        "application/vnd.kubernetes.protobuf",
        pb,
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{b}");
    assert!(b["metadata"].get("namespace").is_none(), "{b}");
    let (code, b) = call(&app, "GET", "/api/v1/namespaces", None).await;
    assert_eq!(code, StatusCode::OK);
    let names: Vec<&str> = b["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "lab"]);
    // Not a namespaced resource, and namespaced kinds are not created here.
    let (code, _) = call(&app, "GET", "/api/v1/namespaces/lab/namespaces", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, _) = call(&app, "POST", "/api/v1/secrets", Some(json!({}))).await;
    assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED);
    // Labels by merge patch; the name label stays.
    let (code, b) = send(
        &app,
        "PATCH",
        "/api/v1/namespaces/lab",
        "application/merge-patch+json",
        br#"{"metadata":{"labels":{"team":"a"}}}"#,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{b}");
    assert_eq!(
        b["metadata"]["labels"],
        json!({"team": "a", "kubernetes.io/metadata.name": "lab"})
    );
    // An invalid name is refused by path.
    let bad = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a.b"}});
    let (code, b) = call(&app, "POST", "/api/v1/namespaces", Some(bad)).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["details"]["causes"][0]["field"], "metadata.name");
}

#[tokio::test]
async fn a_namespace_with_machines_is_not_deleted() {
    let d = tempfile::tempdir().unwrap();
    let app = app(&d).await;
    let (code, b) = call(&app, "DELETE", "/api/v1/namespaces/default", None).await;
    assert_eq!(
        (code, b["reason"].as_str()),
        (StatusCode::FORBIDDEN, Some("Forbidden")),
        "{b}"
    );
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lab"}});
    call(&app, "POST", "/api/v1/namespaces", Some(ns)).await;
    let base = "/apis/metalherd.dev/v1alpha1/namespaces/lab";
    for name in ["u1", "u2"] {
        let m = json!({"metadata": {"name": name},
            "spec": {"bmc": {"address": "ipmi://h", "credentialsSecretRef": {"name": "s"}}}});
        let (code, b) = call(&app, "POST", &format!("{base}/machines"), Some(m)).await;
        assert_eq!(code, StatusCode::CREATED, "{b}");
    }
    let secret = json!({"metadata": {"name": "s"}, "stringData": {"username": "u"}});
    let (code, _) = call(&app, "POST", "/api/v1/namespaces/lab/secrets", Some(secret)).await;
    assert_eq!(code, StatusCode::CREATED);
    let (code, b) = call(&app, "DELETE", "/api/v1/namespaces/lab", None).await;
    assert_eq!(
        (code, b["reason"].as_str()),
        (StatusCode::CONFLICT, Some("Conflict")),
        "{b}"
    );
    let msg = b["message"].as_str().unwrap();
    assert!(
        msg.contains("2 Machines (u1, u2)") && msg.contains("never retires servers"),
        "{msg}"
    );
    // Nothing went: not the Machines, not the Secret, not the namespace.
    let (code, _) = call(&app, "GET", &format!("{base}/machines/u1"), None).await;
    assert_eq!(code, StatusCode::OK);
    let (code, _) = call(&app, "GET", "/api/v1/namespaces/lab/secrets/s", None).await;
    assert_eq!(code, StatusCode::OK);
    // Once the Machines are gone, the namespace goes, with its Secret.
    for name in ["u1", "u2"] {
        let (code, _) = call(&app, "DELETE", &format!("{base}/machines/{name}"), None).await;
        assert_eq!(code, StatusCode::OK);
    }
    let (code, b) = call(&app, "DELETE", "/api/v1/namespaces/lab", None).await;
    assert_eq!(code, StatusCode::OK, "{b}");
    let (code, _) = call(&app, "GET", "/api/v1/namespaces/lab/secrets/s", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, _) = call(&app, "GET", "/api/v1/namespaces/lab", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn server_side_apply_creates_owns_and_refuses_conflicts() {
    let d = tempfile::tempdir().unwrap();
    let app = app(&d).await;
    let url = "/apis/coordination.k8s.io/v1/namespaces/default/leases/leader";
    let apply = "application/apply-patch+yaml";
    let yaml = |holder: &str| {
        format!(
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: leader\nspec:\n  holderIdentity: {holder}\n"
        )
    };
    // fieldManager is required.
    let (code, b) = send(&app, "PATCH", url, apply, yaml("a").as_bytes()).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert!(
        b["message"].as_str().unwrap().contains("fieldManager"),
        "{b}"
    );
    // Created from YAML, owned by the manager.
    let (code, b) = send(
        &app,
        "PATCH",
        &format!("{url}?fieldManager=a"),
        apply,
        yaml("a").as_bytes(),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{b}");
    assert_eq!(b["metadata"]["managedFields"][0]["manager"], "a");
    assert_eq!(b["metadata"]["managedFields"][0]["operation"], "Apply");
    let rv = b["metadata"]["resourceVersion"].clone();
    // Again: nothing changes, not even the resourceVersion.
    let (code, b) = send(
        &app,
        "PATCH",
        &format!("{url}?fieldManager=a"),
        apply,
        yaml("a").as_bytes(),
    )
    .await;
    assert_eq!(
        (code, &b["metadata"]["resourceVersion"]),
        (StatusCode::OK, &rv),
        "{b}"
    );
    // Another manager changing the holder conflicts, then forces.
    let (code, b) = send(
        &app,
        "PATCH",
        &format!("{url}?fieldManager=b"),
        apply,
        yaml("b").as_bytes(),
    )
    .await;
    assert_eq!(
        (code, b["reason"].as_str()),
        (StatusCode::CONFLICT, Some("Conflict")),
        "{b}"
    );
    assert_eq!(
        b["details"]["causes"][0],
        json!({"reason": "FieldManagerConflict", "message": "conflict with \"a\"", "field": ".spec.holderIdentity"})
    );
    let (code, b) = send(
        &app,
        "PATCH",
        &format!("{url}?fieldManager=b&force=true"),
        apply,
        yaml("b").as_bytes(),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{b}");
    assert_eq!(b["spec"]["holderIdentity"], "b");
    // A merge patch is an Update by its manager; the client's own
    // managedFields are ignored.
    let (code, b) = send(
        &app,
        "PATCH",
        &format!("{url}?fieldManager=editor"),
        "application/merge-patch+json",
        br#"{"metadata":{"managedFields":[]},"spec":{"leaseDurationSeconds":30}}"#,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{b}");
    let managers: Vec<(&str, &str)> = b["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap(),
                e["operation"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(managers, [("b", "Apply"), ("editor", "Update")]);
    // A server-side dry run answers what the apply would store and stores
    // nothing; a value other than All is refused.
    let (code, b) = send(
        &app,
        "PATCH",
        &format!("{url}?fieldManager=b&dryRun=All"),
        apply,
        yaml("c").as_bytes(),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{b}");
    assert_eq!(b["spec"]["holderIdentity"], "c");
    let (_, stored) = call(&app, "GET", url, None).await;
    assert_eq!(stored["spec"]["holderIdentity"], "b");
    assert_eq!(
        b["metadata"]["resourceVersion"], stored["metadata"]["resourceVersion"],
        "no version given out"
    );
    let (code, _) = send(
        &app,
        "PATCH",
        &format!("{url}?fieldManager=b&dryRun=Some"),
        apply,
        yaml("c").as_bytes(),
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    // A delete too, asked in the query or in DeleteOptions (as `kubectl
    // delete --dry-run=server` asks): answered, and nothing goes.
    let (code, b) = call(&app, "DELETE", &format!("{url}?dryRun=All"), None).await;
    assert_eq!(code, StatusCode::OK, "{b}");
    let options = json!({"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"]});
    let (code, _) = call(&app, "DELETE", url, Some(options.clone())).await;
    assert_eq!(code, StatusCode::OK);
    let (code, _) = call(&app, "GET", url, None).await;
    assert_eq!(code, StatusCode::OK, "deleted by a dry run");
    // A dry-run create: answered with a uid, not stored.
    let lease = |name: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name}, "spec": {"holderIdentity": "x"}})
    };
    let leases = url.rsplit_once('/').unwrap().0;
    let (code, b) = call(
        &app,
        "POST",
        &format!("{leases}?dryRun=All"),
        Some(lease("rehearsed")),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{b}");
    assert!(b["metadata"]["uid"].is_string());
    let (code, _) = call(&app, "GET", &format!("{leases}/rehearsed"), None).await;
    assert_eq!(code, StatusCode::NOT_FOUND, "created by a dry run");
    let ns = "/api/v1/namespaces/lab";
    let (code, _) = call(
        &app,
        "POST",
        "/api/v1/namespaces",
        Some(json!({"metadata": {"name": "lab"}})),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED);
    let (code, _) = call(&app, "DELETE", ns, Some(options)).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    let (code, _) = call(&app, "GET", ns, None).await;
    assert_eq!(code, StatusCode::OK, "namespace deleted by a dry run");
}

/// A watch from a version the store no longer keeps is answered as
/// kube-apiserver does: 200 and one ERROR event with a 410 `Expired`
/// Status (clients re-list on it), not an HTTP 410.
#[tokio::test]
async fn a_watch_from_too_old_a_version_gets_an_error_event() {
    let store = crate::store::memory::MemoryStore::with_log_limit(2);
    let store: Arc<dyn Store> = Arc::new(store);
    namespaces::ensure(&*store).await.unwrap();
    let metrics = ApiMetrics::register(&MetricsRegistry::new());
    let st = ApiState {
        store,
        cancel: CancellationToken::new(),
        metrics: metrics.clone(),
        admission: Default::default(),
        namespaces: Default::default(),
    };
    let app = protect(
        routes(st),
        crate::http::ops::health_routes(),
        "t0k",
        metrics,
    );
    let url = "/api/v1/namespaces/default/secrets";
    for i in 0..5 {
        let s = json!({"metadata": {"name": format!("s{i}")}, "stringData": {"a": "b"}});
        let (code, _) = call(&app, "POST", url, Some(s)).await;
        assert_eq!(code, StatusCode::CREATED);
    }
    let req = Request::builder()
        .uri(format!("{url}?watch=true&resourceVersion=1"))
        .header("authorization", "Bearer t0k")
        .body(Body::empty())
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let lines: Vec<Value> = bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["type"], "ERROR");
    assert_eq!(lines[0]["object"]["code"], 410);
    assert_eq!(lines[0]["object"]["reason"], "Expired");
}
