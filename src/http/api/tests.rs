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

fn app(dir: &tempfile::TempDir) -> Router {
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&dir.path().join("s.redb")).unwrap());
    let metrics = ApiMetrics::register(&MetricsRegistry::new());
    let st = ApiState {
        store,
        cancel: CancellationToken::new(),
        metrics: metrics.clone(),
        admission: Default::default(),
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
    let app = app(&d);
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
    let app = app(&d);
    let m = json!({"metadata": {"name": "m1"},
        "spec": {"bmc": {"address": "ipmi://h", "credentialsSecretRef": {"name": "s"}}},
        "status": {"phase": "Ready"}});
    let (code, b) = call(
        &app,
        "POST",
        "/apis/metalherd.dev/v1alpha1/namespaces/lab/machines",
        Some(m),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{b}");
    assert_eq!(b["kind"], "Machine");
    assert_eq!(b["metadata"]["namespace"], "lab");
    assert!(
        b.get("status").is_none_or(|s| s.get("phase").is_none()),
        "{b}"
    );
}
