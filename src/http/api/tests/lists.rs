//! Lists and collections beyond get and watch: paging with `limit` and
//! `continue`, a watch's initial events and bookmarks, `deletecollection`.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::{app, call};

/// The lines of a finished watch (one that ends by its timeoutSeconds).
async fn watch_lines(app: &Router, path: &str) -> Vec<Value> {
    let req = Request::builder()
        .uri(path)
        .header("authorization", "Bearer t0k")
        .body(Body::empty())
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

/// `limit` and `continue` page a list in name order; a token outlives no
/// write (410 Expired, as an expired one on kube-apiserver); a watch asked
/// for initial events ends them with the annotated BOOKMARK;
/// `deletecollection` deletes what the selector matches and answers the
/// list of it.
#[tokio::test]
async fn paging_initial_events_and_deletecollection() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir).await;
    let url = "/api/v1/namespaces/default/secrets";
    for (i, team) in [(3, "a"), (1, "b"), (2, "a")] {
        let s = json!({"metadata": {"name": format!("s{i}"), "labels": {"team": team}},
            "stringData": {"a": "b"}});
        let (code, _) = call(&app, "POST", url, Some(s)).await;
        assert_eq!(code, StatusCode::CREATED);
    }
    let names = |b: &Value| -> Vec<String> {
        b["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (code, first) = call(&app, "GET", &format!("{url}?limit=2"), None).await;
    assert_eq!(code, StatusCode::OK, "{first}");
    assert_eq!(names(&first), ["s1", "s2"]);
    assert_eq!(first["metadata"]["remainingItemCount"], 1);
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    let (code, rest) = call(
        &app,
        "GET",
        &format!("{url}?limit=2&continue={token}"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{rest}");
    assert_eq!(names(&rest), ["s3"]);
    assert!(rest["metadata"].get("continue").is_none());
    // A label selector pages what it matches, without a count.
    let (_, a) = call(
        &app,
        "GET",
        &format!("{url}?limit=1&labelSelector=team%3Da"),
        None,
    )
    .await;
    assert_eq!(names(&a), ["s2"]);
    assert!(a["metadata"].get("remainingItemCount").is_none());
    // A write in between: the token has expired.
    let s = json!({"metadata": {"name": "s4"}, "stringData": {"a": "b"}});
    call(&app, "POST", url, Some(s)).await;
    let (code, b) = call(
        &app,
        "GET",
        &format!("{url}?limit=2&continue={token}"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::GONE, "{b}");
    assert_eq!(b["reason"], "Expired");

    // Initial events, then the BOOKMARK that ends them.
    let lines = watch_lines(
        &app,
        &format!(
            "{url}?watch=1&allowWatchBookmarks=true&sendInitialEvents=true\
             &resourceVersionMatch=NotOlderThan&timeoutSeconds=1"
        ),
    )
    .await;
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["ADDED", "ADDED", "ADDED", "ADDED", "BOOKMARK"]);
    let end = &lines[4]["object"];
    assert_eq!(end["kind"], "Secret");
    assert_eq!(
        end["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert!(end["metadata"]["resourceVersion"].is_string());
    // Initial events need resourceVersionMatch=NotOlderThan.
    let (code, _) = call(
        &app,
        "GET",
        &format!("{url}?watch=1&sendInitialEvents=true"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);

    // deletecollection: a dry run deletes nothing, then for real.
    let (code, b) = call(
        &app,
        "DELETE",
        &format!("{url}?labelSelector=team%3Da&dryRun=All"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{b}");
    assert_eq!(b["kind"], "SecretList");
    assert_eq!(names(&b), ["s2", "s3"]);
    let (_, all) = call(&app, "GET", url, None).await;
    assert_eq!(names(&all).len(), 4);
    let (code, b) = call(
        &app,
        "DELETE",
        &format!("{url}?labelSelector=team%3Da"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{b}");
    assert_eq!(names(&b), ["s2", "s3"]);
    let (_, all) = call(&app, "GET", url, None).await;
    assert_eq!(names(&all), ["s1", "s4"]);
    // Namespaces are not deleted as a collection.
    let (code, _) = call(&app, "DELETE", "/api/v1/namespaces", None).await;
    assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED);
}
