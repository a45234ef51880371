//! [`KubeCluster`] against a tower-test mock API server, as kube-rs's
//! controller-rs tests its reconciler: each test is a named scenario that
//! answers exactly the calls it expects, in order, within a timeout. A
//! missing call times out; an extra one hits a closed mock and fails. Time is
//! paused, so backoff and deadlines run instantly and deterministically.

use std::future::Future;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{Handle, SendResponse};

use super::kube::KubeCluster;
use super::{ClusterError, DrainOptions, TargetCluster};

type ApiHandle = Handle<Request<Body>, Response<Body>>;

/// The mock API server's side of a scenario.
struct ApiServer(ApiHandle);

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

fn reply(send: SendResponse<Response<Body>>, code: u16, body: Value) {
    let resp = Response::builder()
        .status(StatusCode::from_u16(code).unwrap())
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap();
    send.send_response(resp);
}

async fn body_json(req: Request<Body>) -> Value {
    let bytes = req.into_body().collect_bytes().await.unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
           "code": code, "reason": reason, "message": message})
}

fn success() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})
}

fn node(name: &str, ready: &str, unschedulable: bool) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name},
        "spec": {"unschedulable": unschedulable},
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": ready}
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.33.2",
                "containerRuntimeVersion": "containerd://2.0.5",
                "osImage": "Flatcar Container Linux by Kinvolk 4230.2.3",
                "kernelVersion": "6.6.95-flatcar",
                "architecture": "amd64", "bootID": "b", "kubeProxyVersion": "",
                "machineID": "m", "operatingSystem": "linux", "systemUUID": "u"
            }
        }
    })
}

fn pod(name: &str, owner_kind: &str, mirror: bool) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind,
                "name": "owner", "uid": "1", "controller": true}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}
    });
    if mirror {
        p["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "abc"});
        p["metadata"]["ownerReferences"] = json!([]);
    }
    p
}

fn pod_list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": items})
}

/// Expect the field-selected list of pods on `n1`.
async fn expect_pod_list(api: &mut ApiServer, items: Vec<Value>) {
    let (req, send) = api.expect("GET", "/api/v1/pods").await;
    let q = req.uri().query().unwrap_or_default().to_string();
    assert!(q.contains("fieldSelector=spec.nodeName%3Dn1"), "query {q}");
    reply(send, 200, pod_list(items));
}

/// Expect a policy/v1 Eviction POST for `default/name` and answer `code`.
async fn expect_eviction(api: &mut ApiServer, name: &str, code: u16) {
    let path = format!("/api/v1/namespaces/default/pods/{name}/eviction");
    let (req, send) = api.expect("POST", &path).await;
    let body = body_json(req).await;
    assert_eq!(body["apiVersion"], "policy/v1");
    assert_eq!(body["kind"], "Eviction");
    assert_eq!(body["metadata"]["name"], name);
    assert_eq!(body["metadata"]["namespace"], "default");
    match code {
        201 => reply(send, 201, success()),
        429 => reply(
            send,
            429,
            status(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            ),
        ),
        c => reply(send, c, status(c, "NotFound", "pods not found")),
    }
}

/// Run `client_side` against a mock API server that plays `scenario`; both
/// must finish within the (paused-clock) timeout.
async fn run<T, S, F>(
    scenario: impl FnOnce(ApiServer) -> S,
    client_side: impl FnOnce(KubeCluster) -> F,
) -> T
where
    S: Future<Output = ()> + Send + 'static,
    F: Future<Output = T>,
{
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let cluster = KubeCluster::new(Client::new(svc, "default"));
    let server = tokio::spawn(scenario(ApiServer(handle)));
    let out = tokio::time::timeout(Duration::from_secs(3600), client_side(cluster))
        .await
        .expect("client side timed out: the scenario never answered a call");
    tokio::time::timeout(Duration::from_secs(3600), server)
        .await
        .expect("scenario timed out: an expected call never came")
        .expect("scenario failed");
    out
}

#[tokio::test(start_paused = true)]
async fn node_lookup_reads_readiness_and_versions() {
    let n = run(
        |mut api| async move {
            let (_, send) = api.expect("GET", "/api/v1/nodes/n1").await;
            reply(send, 200, node("n1", "True", true));
        },
        |c| async move { c.get_node("n1").await },
    )
    .await
    .unwrap()
    .unwrap();
    assert!(n.ready);
    assert!(n.unschedulable);
    assert_eq!(n.kubelet_version, "v1.33.2");
    assert_eq!(n.container_runtime_version, "containerd://2.0.5");
    assert_eq!(n.os_image, "Flatcar Container Linux by Kinvolk 4230.2.3");
    assert_eq!(n.kernel_version, "6.6.95-flatcar");
}

#[tokio::test(start_paused = true)]
async fn node_lookup_not_ready_and_absent() {
    let (a, b) = run(
        |mut api| async move {
            let (_, send) = api.expect("GET", "/api/v1/nodes/n1").await;
            reply(send, 200, node("n1", "Unknown", false));
            let (_, send) = api.expect("GET", "/api/v1/nodes/n2").await;
            reply(send, 404, status(404, "NotFound", "nodes \"n2\" not found"));
        },
        |c| async move { (c.get_node("n1").await, c.get_node("n2").await) },
    )
    .await;
    let a = a.unwrap().unwrap();
    assert!(!a.ready && !a.unschedulable);
    assert_eq!(b.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn cordon_and_uncordon_patch_spec_unschedulable() {
    let res = run(
        |mut api| async move {
            for want in [true, false] {
                let (req, send) = api.expect("PATCH", "/api/v1/nodes/n1").await;
                let ct = req.headers()["content-type"].to_str().unwrap().to_string();
                assert_eq!(ct, "application/strategic-merge-patch+json");
                assert_eq!(
                    body_json(req).await,
                    json!({"spec": {"unschedulable": want}})
                );
                reply(send, 200, node("n1", "True", want));
            }
        },
        |c| async move { (c.cordon("n1").await, c.uncordon("n1").await) },
    )
    .await;
    res.0.unwrap();
    res.1.unwrap();
}

#[tokio::test(start_paused = true)]
async fn cordon_of_missing_node_and_server_error_are_typed() {
    let (a, b) = run(
        |mut api| async move {
            let (_, send) = api.expect("PATCH", "/api/v1/nodes/ghost").await;
            reply(
                send,
                404,
                status(404, "NotFound", "nodes \"ghost\" not found"),
            );
            let (_, send) = api.expect("PATCH", "/api/v1/nodes/n1").await;
            reply(send, 500, status(500, "InternalError", "etcd is sad"));
        },
        |c| async move { (c.cordon("ghost").await, c.cordon("n1").await) },
    )
    .await;
    assert!(
        matches!(a, Err(ClusterError::NodeNotFound { ref node }) if node == "ghost"),
        "{a:?}"
    );
    match b {
        Err(ClusterError::Api {
            code,
            op,
            ref message,
            ..
        }) => {
            assert_eq!((code, op), (500, "cordon node"));
            assert!(message.contains("etcd"));
        }
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn drain_evicts_all_but_daemonset_and_mirror_pods() {
    let report = run(
        |mut api| async move {
            expect_pod_list(
                &mut api,
                vec![
                    pod("web-0", "ReplicaSet", false),
                    pod("gone-0", "ReplicaSet", false),
                    pod("kube-proxy-x", "DaemonSet", false),
                    pod("etcd-n1", "", true),
                ],
            )
            .await;
            expect_eviction(&mut api, "web-0", 201).await;
            expect_eviction(&mut api, "gone-0", 404).await;
            // Evicted pods are gone: only the skipped ones remain.
            expect_pod_list(
                &mut api,
                vec![
                    pod("kube-proxy-x", "DaemonSet", false),
                    pod("etcd-n1", "", true),
                ],
            )
            .await;
        },
        |c| async move { c.drain("n1", &DrainOptions::default()).await },
    )
    .await
    .unwrap();
    assert_eq!(report.evicted, ["default/web-0", "default/gone-0"]);
    assert_eq!(report.skipped, ["default/kube-proxy-x", "default/etcd-n1"]);
    assert_eq!(report.refusals, 0);
}

#[tokio::test(start_paused = true)]
async fn drain_of_empty_node_lists_once() {
    let report = run(
        |mut api| async move {
            expect_pod_list(&mut api, vec![pod("kube-proxy-x", "DaemonSet", false)]).await;
        },
        |c| async move { c.drain("n1", &DrainOptions::default()).await },
    )
    .await
    .unwrap();
    assert!(report.evicted.is_empty());
}

#[tokio::test(start_paused = true)]
async fn drain_retries_an_eviction_a_pdb_blocks_then_allows() {
    let report = run(
        |mut api| async move {
            expect_pod_list(
                &mut api,
                vec![
                    pod("web-0", "ReplicaSet", false),
                    pod("web-1", "ReplicaSet", false),
                ],
            )
            .await;
            expect_eviction(&mut api, "web-0", 201).await;
            expect_eviction(&mut api, "web-1", 429).await;
            // Only the refused pod is retried, after a backoff.
            expect_eviction(&mut api, "web-1", 429).await;
            expect_eviction(&mut api, "web-1", 201).await;
            // web-1 is still terminating on the first look, gone on the second.
            expect_pod_list(&mut api, vec![pod("web-1", "ReplicaSet", false)]).await;
            expect_pod_list(&mut api, vec![]).await;
        },
        |c| async move { c.drain("n1", &DrainOptions::default()).await },
    )
    .await
    .unwrap();
    assert_eq!(report.evicted, ["default/web-0", "default/web-1"]);
    assert_eq!(report.refusals, 2);
}

#[tokio::test(start_paused = true)]
async fn drain_times_out_naming_the_pods_a_pdb_keeps() {
    let opts = DrainOptions {
        timeout: Duration::from_secs(60),
        ..DrainOptions::default()
    };
    let err = run(
        |mut api| async move {
            expect_pod_list(
                &mut api,
                vec![
                    pod("web-0", "ReplicaSet", false),
                    pod("db-0", "StatefulSet", false),
                ],
            )
            .await;
            expect_eviction(&mut api, "web-0", 201).await;
            // The budget never allows db-0: refuse every retry until the
            // client gives up (and drops its end).
            let mut retries = 0;
            while let Some((req, send)) = api.0.next_request().await {
                assert_eq!(
                    req.uri().path(),
                    "/api/v1/namespaces/default/pods/db-0/eviction"
                );
                reply(
                    send,
                    429,
                    status(429, "TooManyRequests", "disruption budget"),
                );
                retries += 1;
            }
            assert!(retries > 1, "the blocked eviction was retried");
        },
        |c| async move { c.drain("n1", &opts).await },
    )
    .await
    .unwrap_err();
    match err {
        ClusterError::DrainTimeout {
            node,
            after,
            blocking,
        } => {
            assert_eq!(node, "n1");
            assert_eq!(after, Duration::from_secs(60));
            assert_eq!(blocking, ["default/db-0"]);
        }
        other => panic!("expected DrainTimeout, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn drain_times_out_on_pods_that_never_terminate() {
    let opts = DrainOptions {
        timeout: Duration::from_secs(10),
        ..DrainOptions::default()
    };
    let err = run(
        |mut api| async move {
            expect_pod_list(&mut api, vec![pod("web-0", "ReplicaSet", false)]).await;
            expect_eviction(&mut api, "web-0", 201).await;
            while let Some((req, send)) = api.0.next_request().await {
                assert_eq!(req.uri().path(), "/api/v1/pods");
                reply(send, 200, pod_list(vec![pod("web-0", "ReplicaSet", false)]));
            }
        },
        |c| async move { c.drain("n1", &opts).await },
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, ClusterError::DrainTimeout { ref blocking, .. } if blocking == &["default/web-0"]),
        "{err:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn drain_stops_on_an_eviction_error() {
    let err = run(
        |mut api| async move {
            expect_pod_list(&mut api, vec![pod("web-0", "ReplicaSet", false)]).await;
            expect_eviction(&mut api, "web-0", 500).await;
        },
        |c| async move { c.drain("n1", &DrainOptions::default()).await },
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            ClusterError::Api {
                code: 500,
                op: "evict pod",
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn delete_node_and_delete_of_absent_node() {
    let (a, b) = run(
        |mut api| async move {
            let (_, send) = api.expect("DELETE", "/api/v1/nodes/n1").await;
            reply(send, 200, node("n1", "True", true));
            let (_, send) = api.expect("DELETE", "/api/v1/nodes/n1").await;
            reply(send, 404, status(404, "NotFound", "nodes \"n1\" not found"));
        },
        |c| async move { (c.delete_node("n1").await, c.delete_node("n1").await) },
    )
    .await;
    a.unwrap();
    b.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_unexpected_extra_call_fails() {
    // The scenario answers one lookup; the second finds the mock closed.
    let (a, b) = run(
        |mut api| async move {
            let (_, send) = api.expect("GET", "/api/v1/nodes/n1").await;
            reply(send, 200, node("n1", "True", false));
        },
        |c| async move {
            let a = c.get_node("n1").await;
            // Let the scenario finish and drop its end first.
            tokio::time::sleep(Duration::from_secs(1)).await;
            (a, c.get_node("n1").await)
        },
    )
    .await;
    a.unwrap();
    assert!(matches!(b, Err(ClusterError::Transport { .. })), "{b:?}");
}

#[tokio::test]
async fn bad_kubeconfig_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("kubeconfig");
    std::fs::write(&p, "this: [is not a kubeconfig").unwrap();
    let err = KubeCluster::from_kubeconfig(&p).await.err().unwrap();
    assert!(matches!(err, ClusterError::Kubeconfig { .. }), "{err}");
    assert_eq!(err.reason(), "KubeconfigInvalid");
}

#[tokio::test]
async fn kubeconfig_builds_a_client_with_the_ring_provider() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("kubeconfig");
    std::fs::write(
        &p,
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
         clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n\
         users: [{name: u, user: {token: secret-token}}]\n\
         contexts: [{name: c, context: {cluster: k, user: u}}]\n",
    )
    .unwrap();
    KubeCluster::from_kubeconfig(&p).await.unwrap();
    // Installing again is harmless.
    super::kube::install_crypto_provider();
}
