//! Discovery as kube-apiserver answers it for built-in and custom
//! resources: `/version`, `/api` (APIVersions), `/api/v1`,
//! `/apis/coordination.k8s.io/v1` and `/apis/metalherd.dev/v1alpha1`
//! (APIResourceList), `/apis` (APIGroupList) and `/apis/{group}`
//! (APIGroup). The metalherd
//! kinds are described from their CRDs (names, short names, categories,
//! subresources), so what `kubectl` discovers is what `metalherd crds`
//! installs into a cluster.
//!
//! Only the unaggregated documents are served: a client asking for
//! aggregated discovery (`as=APIGroupDiscoveryList`) first gets
//! `application/json` back, which client-go takes as "not supported" and
//! reads as the legacy document.

use axum::Router;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use crate::api::{API_VERSION, COORDINATION_GROUP, GROUP, VERSION};

/// The verbs every served resource supports.
const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The Kubernetes minor version kubectl and kube-rs should expect of us.
pub(super) const KUBE_MINOR: &str = "32";

/// `/version`, `/api`, `/apis` and the group documents. Mounted beside the
/// resource routes (more specific paths win).
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/version", get(version))
        .route("/api", get(api_versions))
        .route("/api/v1", get(|| async { json_response(core_resources()) }))
        .route("/apis", get(|| async { json_response(group_list()) }))
        .route(
            &format!("/apis/{GROUP}"),
            get(|| async { json_response(group(GROUP, VERSION)) }),
        )
        .route(
            &format!("/apis/{GROUP}/{VERSION}"),
            get(|| async { json_response(metalherd_resources()) }),
        )
        .route(
            &format!("/apis/{COORDINATION_GROUP}"),
            get(|| async { json_response(group(COORDINATION_GROUP, "v1")) }),
        )
        .route(
            &format!("/apis/{COORDINATION_GROUP}/v1"),
            get(|| async { json_response(coordination_resources()) }),
        )
}

fn json_response(v: Value) -> Response {
    axum::Json(v).into_response()
}

async fn version() -> Response {
    json_response(json!({
        "major": "1",
        "minor": KUBE_MINOR,
        "gitVersion": format!("v1.{KUBE_MINOR}.0+metalherd.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    }))
}

/// Go's name of this machine's architecture.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

async fn api_versions(headers: HeaderMap) -> Response {
    // kube-apiserver names the address the client reached it by.
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    json_response(json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
    }))
}

fn group_version(group: &str, version: &str) -> Value {
    json!({"groupVersion": format!("{group}/{version}"), "version": version})
}

fn group(name: &str, version: &str) -> Value {
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": [group_version(name, version)],
        "preferredVersion": group_version(name, version),
    })
}

/// `/apis`: the built-in groups first, then the custom resources' group,
/// in kube-apiserver's order.
fn group_list() -> Value {
    let groups: Vec<Value> = [(COORDINATION_GROUP, "v1"), (GROUP, VERSION)]
        .into_iter()
        .map(|(name, version)| {
            let mut g = group(name, version);
            if let Some(o) = g.as_object_mut() {
                o.remove("kind");
                o.remove("apiVersion");
            }
            g
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// A built-in resource as kube-apiserver lists it.
fn builtin(name: &str, singular: &str, kind: &str, short: &[&str]) -> Value {
    let mut r = json!({
        "name": name,
        "singularName": singular,
        "namespaced": kind != "Namespace",
        "kind": kind,
        // Namespaces go one at a time (their contents first).
        "verbs": VERBS.iter().filter(|v| kind != "Namespace" || **v != "deletecollection").collect::<Vec<_>>(),
    });
    if !short.is_empty() {
        r["shortNames"] = json!(short);
    }
    r
}

/// `/api/v1`: Events, Namespaces and Secrets, as kube-apiserver lists
/// them.
pub fn core_resources() -> Value {
    json!({
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            builtin("events", "event", "Event", &["ev"]),
            builtin("namespaces", "namespace", "Namespace", &["ns"]),
            builtin("secrets", "secret", "Secret", &[]),
        ],
    })
}

/// `/apis/coordination.k8s.io/v1`: Leases.
pub fn coordination_resources() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{COORDINATION_GROUP}/v1"),
        "resources": [builtin("leases", "lease", "Lease", &[])],
    })
}

/// `/apis/metalherd.dev/v1alpha1`: each CRD's resource and subresources,
/// as kube-apiserver lists a CRD's, in the order of its (aggregated)
/// discovery, by plural: kubectl expands a category in this order.
pub fn metalherd_resources() -> Value {
    let mut crds: Vec<_> = crate::api::crds().iter().collect();
    crds.sort_by(|a, b| a.spec.names.plural.cmp(&b.spec.names.plural));
    let mut resources = Vec::new();
    for crd in crds {
        resources.extend(crd_resources(crd));
    }
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": API_VERSION,
        "resources": resources,
    })
}

fn crd_resources(crd: &CustomResourceDefinition) -> Vec<Value> {
    let names = &crd.spec.names;
    let namespaced = crd.spec.scope == "Namespaced";
    let mut main = json!({
        "name": names.plural,
        "singularName": names.singular.clone().unwrap_or_else(|| names.kind.to_ascii_lowercase()),
        "namespaced": namespaced,
        "kind": names.kind,
        "verbs": VERBS,
    });
    if let Some(s) = names.short_names.as_ref().filter(|s| !s.is_empty()) {
        main["shortNames"] = json!(s);
    }
    if let Some(c) = names.categories.as_ref().filter(|c| !c.is_empty()) {
        main["categories"] = json!(c);
    }
    let mut out = vec![main];
    let sub = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == VERSION)
        .and_then(|v| v.subresources.as_ref());
    if let Some(sub) = sub {
        if sub.status.is_some() {
            out.push(json!({
                "name": format!("{}/status", names.plural),
                "singularName": "",
                "namespaced": namespaced,
                "kind": names.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if sub.scale.is_some() {
            out.push(json!({
                "name": format!("{}/scale", names.plural),
                "singularName": "",
                "namespaced": namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find<'a>(list: &'a Value, name: &str) -> &'a Value {
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing from {list}"))
    }

    #[test]
    fn crd_resources_carry_names_categories_and_subresources() {
        let list = metalherd_resources();
        assert_eq!(list["kind"], "APIResourceList");
        assert_eq!(list["groupVersion"], "metalherd.dev/v1alpha1");
        let m = find(&list, "machines");
        assert_eq!(m["kind"], "Machine");
        assert_eq!(m["singularName"], "machine");
        assert_eq!(m["namespaced"], true);
        assert_eq!(m["categories"], json!(["metalherd"]));
        assert!(m["verbs"].as_array().unwrap().contains(&json!("watch")));
        assert_eq!(find(&list, "machinesets")["shortNames"], json!(["ms"]));
        let st = find(&list, "machines/status");
        assert_eq!(st["verbs"], json!(["get", "patch", "update"]));
        assert_eq!(st["kind"], "Machine");
        let core = core_resources();
        assert_eq!(find(&core, "events")["shortNames"], json!(["ev"]));
        assert_eq!(find(&core, "secrets")["kind"], "Secret");
        let ns = find(&core, "namespaces");
        assert_eq!(
            (&ns["namespaced"], &ns["shortNames"]),
            (&json!(false), &json!(["ns"]))
        );
        let coordination = coordination_resources();
        assert_eq!(coordination["groupVersion"], "coordination.k8s.io/v1");
        let leases = find(&coordination, "leases");
        assert_eq!(
            (&leases["kind"], &leases["namespaced"]),
            (&json!("Lease"), &json!(true))
        );
    }

    #[test]
    fn group_documents_name_the_preferred_version() {
        let l = group_list();
        assert_eq!(l["kind"], "APIGroupList");
        let g = &l["groups"][1];
        assert_eq!(g["name"], "metalherd.dev");
        assert_eq!(
            g["preferredVersion"]["groupVersion"],
            "metalherd.dev/v1alpha1"
        );
        assert!(g.get("kind").is_none());
        assert_eq!(l["groups"][0]["name"], "coordination.k8s.io");
        assert_eq!(
            l["groups"][0]["preferredVersion"]["groupVersion"],
            "coordination.k8s.io/v1"
        );
        assert_eq!(group(GROUP, VERSION)["kind"], "APIGroup");
    }
}
