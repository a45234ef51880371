//! [`KubernetesStore`] against a tower-test mock API server, for what the
//! stand-in cannot show: RBAC refusals, a compacted watch (`410 Gone`) and
//! the reflector's re-list, conflicts at an exact moment, a watch request
//! the server ends. Each test is a scenario that answers exactly the calls
//! it expects, in order (as src/cluster/tests.rs does); a missing call
//! times out, an extra one hits a closed mock. Time is paused, so the
//! reflector's re-list delay passes at once.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use http::{Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower_test::mock::{Handle, SendResponse};

use super::KubernetesStore;
use crate::api::Kind;
use crate::store::modify::{Target, modify};
use crate::store::reflect::{Reflected, reflect};
use crate::store::{Deleted, ListOptions, Store, StoreError, WatchEvent};

const MACHINES: &str = "/apis/metalherd.dev/v1alpha1/machines";
const M1: &str = "/apis/metalherd.dev/v1alpha1/namespaces/default/machines/m1";

struct ApiServer(Handle<Request<Body>, Response<Body>>);

impl ApiServer {
    /// Take the next request; it must have this method and path.
    async fn expect(
        &mut self,
        method: &str,
        path: &str,
    ) -> (Request<Body>, SendResponse<Response<Body>>) {
        let (req, send) = self
            .0
            .next_request()
            .await
            .unwrap_or_else(|| panic!("client gone; expected {method} {path}"));
        assert_eq!(req.method().as_str(), method, "method of {}", req.uri());
        assert_eq!(req.uri().path(), path, "path of {method}");
        (req, send)
    }
}

fn reply_bytes(send: SendResponse<Response<Body>>, code: u16, body: Vec<u8>) {
    let resp = Response::builder()
        .status(StatusCode::from_u16(code).unwrap())
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    send.send_response(resp);
}

fn reply(send: SendResponse<Response<Body>>, code: u16, body: Value) {
    reply_bytes(send, code, serde_json::to_vec(&body).unwrap());
}

/// A watch answer: one JSON event per line, then the end of the stream.
fn reply_events(send: SendResponse<Response<Body>>, events: &[Value]) {
    let mut body = Vec::new();
    for e in events {
        body.extend(serde_json::to_vec(e).unwrap());
        body.push(b'\n');
    }
    reply_bytes(send, 200, body);
}

fn query(req: &Request<Body>) -> String {
    req.uri().query().unwrap_or_default().to_string()
}

async fn body_json(req: Request<Body>) -> Value {
    let bytes = req.into_body().collect_bytes().await.unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "code": code, "reason": reason, "message": message})
}

fn machine(rv: &str, phase: Option<&str>) -> Value {
    let mut m = json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": "m1", "namespace": "default", "uid": "u1", "resourceVersion": rv},
        "spec": {"bmc": {"address": "ipmi://10.0.0.5", "credentialsSecretRef": {"name": "bmc"}}}
    });
    if let Some(p) = phase {
        m["status"] = json!({"phase": p});
    }
    m
}

fn list(rv: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineList",
           "metadata": {"resourceVersion": rv}, "items": items})
}

/// Run `client_side` against a mock API server that plays `scenario`; both
/// must finish within the (paused-clock) timeout.
async fn run<T, S, F>(
    scenario: impl FnOnce(ApiServer) -> S,
    client_side: impl FnOnce(KubernetesStore) -> F,
) -> T
where
    S: Future<Output = ()> + Send + 'static,
    F: Future<Output = T>,
{
    run_in(None, scenario, client_side).await
}

/// [`run`] with the store's lists and watches kept to `namespace`.
async fn run_in<T, S, F>(
    namespace: Option<&str>,
    scenario: impl FnOnce(ApiServer) -> S,
    client_side: impl FnOnce(KubernetesStore) -> F,
) -> T
where
    S: Future<Output = ()> + Send + 'static,
    F: Future<Output = T>,
{
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let store = KubernetesStore::new(Client::new(svc, "default"), namespace.map(str::to_string));
    let server = tokio::spawn(scenario(ApiServer(handle)));
    let out = tokio::time::timeout(Duration::from_secs(3600), client_side(store))
        .await
        .expect("client side timed out: the scenario never answered a call");
    tokio::time::timeout(Duration::from_secs(3600), server)
        .await
        .expect("scenario timed out: an expected call never came")
        .expect("scenario failed");
    out
}

const FORBIDDEN: &str = "machines.metalherd.dev \"m1\" is forbidden: User \"system:serviceaccount:metalherd:metalherd\" cannot update resource \"machines/status\" in API group \"metalherd.dev\" in the namespace \"default\"";

#[tokio::test(start_paused = true)]
async fn rbac_forbidden_names_the_verb_and_the_resource() {
    let (status_err, list_err) = run(
        |mut api| async move {
            let (_, send) = api.expect("PUT", &format!("{M1}/status")).await;
            reply(send, 403, status(403, "Forbidden", FORBIDDEN));
            let (_, send) = api.expect("GET", MACHINES).await;
            reply(send, 403, status(403, "Forbidden", "machines.metalherd.dev is forbidden: cannot list resource \"machines\" at the cluster scope"));
        },
        |store| async move {
            let a = store
                .update_status(Kind::Machine, machine("5", Some("Ready")))
                .await
                .unwrap_err();
            let b = store
                .list(Kind::Machine, &ListOptions::default())
                .await
                .unwrap_err();
            (a, b)
        },
    )
    .await;
    assert!(
        matches!(status_err, StoreError::Forbidden { verb: "update", .. }),
        "{status_err:?}"
    );
    let text = status_err.to_string();
    assert!(
        text.starts_with(
            "forbidden: cannot update machines/status \"m1\" in namespace \"default\": "
        ),
        "{text}"
    );
    assert!(
        text.contains("system:serviceaccount:metalherd:metalherd"),
        "{text}"
    );
    let text = list_err.to_string();
    assert!(
        text.starts_with("forbidden: cannot list machines in all namespaces: "),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_compacted_watch_makes_the_reflector_list_again() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let cancel = CancellationToken::new();
    let log = seen.clone();
    let stop = cancel.clone();
    run(
        |mut api| async move {
            let (_, send) = api.expect("GET", MACHINES).await;
            reply(send, 200, list("10", vec![machine("9", None)]));
            let (req, send) = api.expect("GET", MACHINES).await;
            let q = query(&req);
            assert!(
                q.contains("watch=true") && q.contains("resourceVersion=10"),
                "{q}"
            );
            reply_events(
                send,
                &[
                    json!({"type": "MODIFIED", "object": machine("11", Some("Available"))}),
                    json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version: 10 (12)")}),
                ],
            );
            // The reflector lists again, and watches from the new list.
            let (req, send) = api.expect("GET", MACHINES).await;
            assert!(!query(&req).contains("watch"), "a list, not a watch");
            reply(
                send,
                200,
                list("20", vec![machine("19", Some("Ready")), {
                    let mut m2 = machine("18", None);
                    m2["metadata"]["name"] = json!("m2");
                    m2
                }]),
            );
        },
        |store| async move {
            reflect(
                &store,
                Kind::Machine,
                &ListOptions::default(),
                Duration::from_secs(1),
                &cancel,
                |r| {
                    let mut log = log.lock().unwrap();
                    log.push(match r {
                        Reflected::Listed(items) => format!("listed {}", items.len()),
                        Reflected::Changed(ev) => format!(
                            "{} {}",
                            ev.type_str(),
                            ev.object()["status"]["phase"].as_str().unwrap_or("")
                        ),
                    });
                    if log.len() == 3 {
                        stop.cancel();
                    }
                },
            )
            .await;
        },
    )
    .await;
    assert_eq!(
        *seen.lock().unwrap(),
        ["listed 1", "MODIFIED Available", "listed 2"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_watch_the_server_ends_goes_on_from_the_last_version_seen() {
    let events = run(
        |mut api| async move {
            let (req, send) = api.expect("GET", MACHINES).await;
            assert!(query(&req).contains("resourceVersion=5"), "{}", query(&req));
            reply_events(
                send,
                &[
                    json!({"type": "ADDED", "object": machine("6", None)}),
                    json!({"type": "BOOKMARK", "object": {"apiVersion": "metalherd.dev/v1alpha1",
                        "kind": "Machine", "metadata": {"resourceVersion": "8"}}}),
                ],
            );
            // timeoutSeconds passed: the client asks again from the bookmark.
            let (req, send) = api.expect("GET", MACHINES).await;
            assert!(query(&req).contains("resourceVersion=8"), "{}", query(&req));
            reply_events(
                send,
                &[json!({"type": "DELETED", "object": machine("9", None)})],
            );
        },
        |store| async move {
            let mut w = store
                .watch(Kind::Machine, &ListOptions::default(), Some("5"))
                .await
                .unwrap();
            let a = w.next().await.unwrap().unwrap();
            let b = w.next().await.unwrap().unwrap();
            vec![a, b]
        },
    )
    .await;
    assert!(matches!(events[0], WatchEvent::Added(_)));
    assert!(matches!(events[1], WatchEvent::Deleted(_)));
    assert_eq!(events[1].resource_version(), Some("9"));
}

#[tokio::test(start_paused = true)]
async fn a_conflict_at_the_moment_of_the_write_is_read_again_and_retried() {
    let (written, changes) = run(
        |mut api| async move {
            let (_, send) = api.expect("GET", M1).await;
            reply(send, 200, machine("5", None));
            // Another writer got in between our read and our write.
            let (req, send) = api.expect("PUT", &format!("{M1}/status")).await;
            assert_eq!(body_json(req).await["metadata"]["resourceVersion"], "5");
            reply(
                send,
                409,
                status(409, "Conflict", "Operation cannot be fulfilled on machines.metalherd.dev \"m1\": the object has been modified; please apply your changes to the latest version and try again"),
            );
            let (_, send) = api.expect("GET", M1).await;
            reply(send, 200, machine("6", Some("Available")));
            let (req, send) = api.expect("PUT", &format!("{M1}/status")).await;
            let body = body_json(req).await;
            assert_eq!(body["metadata"]["resourceVersion"], "6");
            assert_eq!(body["status"]["phase"], "Provisioning");
            reply(send, 200, machine("7", Some("Provisioning")));
        },
        |store| async move {
            let mut changes = 0;
            let written = modify::<StoreError>(
                &store,
                Kind::Machine,
                "default",
                "m1",
                Target::Status,
                10,
                |cur| {
                    changes += 1;
                    let mut m = cur.unwrap();
                    m["status"] = json!({"phase": "Provisioning"});
                    Ok(Some(m))
                },
            )
            .await
            .unwrap();
            (written, changes)
        },
    )
    .await;
    assert_eq!(changes, 2);
    assert_eq!(written.unwrap()["metadata"]["resourceVersion"], "7");
}

#[tokio::test(start_paused = true)]
async fn an_update_without_a_version_is_written_over_the_current_one() {
    let written = run(
        |mut api| async move {
            let (_, send) = api.expect("GET", M1).await;
            reply(send, 200, machine("5", None));
            let (req, send) = api.expect("PUT", M1).await;
            assert_eq!(body_json(req).await["metadata"]["resourceVersion"], "5");
            reply(
                send,
                409,
                status(409, "Conflict", "the object has been modified"),
            );
            let (_, send) = api.expect("GET", M1).await;
            reply(send, 200, machine("6", None));
            let (req, send) = api.expect("PUT", M1).await;
            assert_eq!(body_json(req).await["metadata"]["resourceVersion"], "6");
            reply(send, 200, machine("7", None));
        },
        |store| async move {
            let mut m = machine("", None);
            m["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("resourceVersion");
            store.update(Kind::Machine, m).await
        },
    )
    .await
    .unwrap();
    assert_eq!(written["metadata"]["resourceVersion"], "7");
}

#[tokio::test(start_paused = true)]
async fn delete_answers_map_to_marked_and_gone() {
    let (marked, gone) = run(
        |mut api| async move {
            let (_, send) = api.expect("DELETE", M1).await;
            let mut m = machine("8", None);
            m["metadata"]["finalizers"] = json!(["metalherd.dev/machine"]);
            m["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            reply(send, 200, m);
            // Secrets come back as a Status when deleted at once.
            let (_, send) = api
                .expect("DELETE", "/api/v1/namespaces/default/secrets/bmc")
                .await;
            reply(
                send,
                200,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success",
                       "details": {"name": "bmc", "kind": "secrets", "uid": "u9"}}),
            );
        },
        |store| async move {
            let a = store.delete(Kind::Machine, "default", "m1").await.unwrap();
            let b = store.delete(Kind::Secret, "default", "bmc").await.unwrap();
            (a, b)
        },
    )
    .await;
    assert!(matches!(marked, Deleted::Marked(_)), "{marked:?}");
    let Deleted::Gone(v) = gone else {
        panic!("{gone:?}")
    };
    assert_eq!(v["kind"], "Secret");
    assert_eq!(v["metadata"]["uid"], "u9");
}

#[tokio::test(start_paused = true)]
async fn a_watch_namespace_keeps_lists_and_watches_in_it() {
    const LAB: &str = "/apis/metalherd.dev/v1alpha1/namespaces/lab/machines";
    let n = run_in(
        Some("lab"),
        |mut api| async move {
            let (req, send) = api.expect("GET", LAB).await;
            assert!(
                query(&req).contains("labelSelector=rack%3Dr1"),
                "{}",
                query(&req)
            );
            reply(send, 200, list("3", vec![]));
            // A watch from now: the version of a one-item list, then the watch.
            let (req, send) = api.expect("GET", LAB).await;
            assert!(query(&req).contains("limit=1"), "{}", query(&req));
            reply(send, 200, list("4", vec![]));
            let (req, send) = api.expect("GET", LAB).await;
            let q = query(&req);
            assert!(
                q.contains("watch=true") && q.contains("resourceVersion=4"),
                "{q}"
            );
            reply_events(
                send,
                &[json!({"type": "ADDED", "object": machine("5", None)})],
            );
        },
        |store| async move {
            let opts = ListOptions {
                namespace: None,
                selector: crate::store::Selector::parse("rack=r1").unwrap(),
            };
            let n = store.list(Kind::Machine, &opts).await.unwrap().items.len();
            let mut w = store
                .watch(Kind::Machine, &ListOptions::default(), None)
                .await
                .unwrap();
            assert!(matches!(w.next().await, Some(Ok(WatchEvent::Added(_)))));
            n
        },
    )
    .await;
    assert_eq!(n, 0);
}

#[tokio::test(start_paused = true)]
async fn a_cluster_without_the_crds_is_named_at_start() {
    let e = run(
        |mut api| async move {
            let (_, send) = api.expect("GET", MACHINES).await;
            reply(
                send,
                404,
                status(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ),
            );
        },
        |store| async move { store.check().await.unwrap_err() },
    )
    .await;
    let text = e.to_string();
    assert!(
        text.contains("does not serve machines.metalherd.dev: install the CRDs"),
        "{text}"
    );
}
