//! `/openapi/v3`: the index of group-version documents and, per group
//! version, an OpenAPI 3 document with each resource's paths (every
//! operation tagged with `x-kubernetes-group-version-kind`, PATCH with the
//! `fieldValidation`, `fieldManager` and `force` query parameters; no
//! `dryRun`, which is refused) and the
//! kinds' schemas under `components.schemas`: the CRD schemas for the
//! metalherd kinds, k8s-openapi's for Kubernetes' own (under the names
//! kube-apiserver gives them, `io.k8s.api.coordination.v1.Lease`).
//!
//! This is what kubectl reads to decide that the server validates fields
//! itself (`kubectl apply` then sends `fieldValidation=Strict` instead of
//! downloading `/openapi/v2` to validate on the client). `/openapi/v2` is
//! built from the same schemas in [`super::openapi_v2`].

use axum::Router;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Map, Value, json};

use super::Group;
use crate::api::{GROUP, Kind, VERSION};

/// The index and a document per group version.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let mut r = Router::new()
        .route("/openapi/v3", get(|| async { json(index()) }))
        .route("/openapi/v2", get(super::openapi_v2::serve));
    for group in Group::ALL {
        r = r.route(
            &format!("/openapi/v3{}", group.prefix()),
            get(move || async move { json(document(group)) }),
        );
    }
    r
}

fn json(v: Value) -> Response {
    axum::Json(v).into_response()
}

/// Changes whenever the documents can: clients cache by it.
fn hash() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

fn index() -> Value {
    let paths: Map<String, Value> = Group::ALL
        .into_iter()
        .map(|g| {
            let gv = g.prefix().trim_start_matches('/');
            let url = format!("/openapi/v3/{gv}?hash={}", hash());
            (gv.to_string(), json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

fn query_param(name: &str, description: &str) -> Value {
    json!({
        "name": name, "in": "query", "description": description,
        "schema": {"type": "string", "uniqueItems": true},
    })
}

/// The GVK of a kind as the `x-kubernetes-group-version-kind` extension.
pub(super) fn gvk(kind: Kind) -> Value {
    json!({"group": kind.group(), "version": kind.version(), "kind": kind.as_str()})
}

fn operation(kind: Kind, action: &str, id: &str, params: Vec<Value>) -> Value {
    json!({
        "operationId": id,
        "parameters": params,
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(kind),
    })
}

fn paths_of(kind: Kind) -> Map<String, Value> {
    let prefix = super::group_prefix(kind);
    let plural = kind.plural();
    let k = kind.as_str();
    let write_params = || {
        vec![
            query_param("fieldManager", "The name of the actor making the change."),
            query_param(
                "fieldValidation",
                "Ignore, Warn or Strict: how unknown or duplicate fields are treated.",
            ),
        ]
    };
    let mut patch_params = write_params();
    patch_params.push(query_param(
        "force",
        "Force is going to \"force\" Apply requests: the conflicting fields change owner.",
    ));
    let mut item = json!({
        "get": operation(kind, "get", &format!("read{k}"), vec![]),
        "put": operation(kind, "put", &format!("replace{k}"), write_params()),
        "patch": operation(kind, "patch", &format!("patch{k}"), patch_params),
        "delete": operation(kind, "delete", &format!("delete{k}"), vec![]),
    });
    let mut params =
        vec![json!({"name": "name", "in": "path", "required": true, "schema": {"type": "string"}})];
    if kind.namespaced() {
        params.push(json!({"name": "namespace", "in": "path", "required": true, "schema": {"type": "string"}}));
    }
    if let Some(o) = item.as_object_mut() {
        o.insert("parameters".into(), json!(params));
    }
    let list = json!({
        "get": operation(kind, "list", &format!("list{k}"), vec![]),
        "post": operation(kind, "post", &format!("create{k}"), write_params()),
    });
    let scope = if kind.namespaced() {
        "/namespaces/{namespace}"
    } else {
        ""
    };
    let mut paths = Map::new();
    paths.insert(format!("{prefix}{scope}/{plural}"), list);
    paths.insert(format!("{prefix}{scope}/{plural}/{{name}}"), item);
    paths
}

/// The definition name kube-apiserver gives a CRD kind's schema.
pub(super) fn schema_name(kind: Kind) -> String {
    let reversed: Vec<&str> = GROUP.rsplit('.').collect();
    format!("{}.{VERSION}.{}", reversed.join("."), kind.as_str())
}

/// The schemas of the Kubernetes kinds of `group` (and every definition
/// they refer to), as k8s-openapi describes them, with `$ref`s into
/// `#/components/schemas/`; the kinds' own schemas carry their GVK.
pub(super) fn builtin_schemas(group: Group) -> Map<String, Value> {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Event, Namespace, Secret};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use schemars::JsonSchema;
    let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
    let mut named = Vec::new();
    match group {
        Group::Core => {
            generator.subschema_for::<Secret>();
            named.push((Kind::Secret, Secret::schema_name()));
            generator.subschema_for::<Namespace>();
            named.push((Kind::Namespace, Namespace::schema_name()));
            generator.subschema_for::<Event>();
            named.push((Kind::Event, Event::schema_name()));
        }
        Group::Coordination => {
            generator.subschema_for::<Lease>();
            named.push((Kind::Lease, Lease::schema_name()));
        }
        Group::Metalherd => {
            // What the CRD schemas' `metadata` refers to.
            generator.subschema_for::<ObjectMeta>();
        }
    }
    let mut defs = generator.take_definitions(true);
    for (kind, name) in named {
        if let Some(s) = defs.get_mut(name.as_ref()) {
            s["x-kubernetes-group-version-kind"] = json!([gvk(kind)]);
            // k8s-openapi's `metadata` is no Option, so the generated
            // schema requires it; Kubernetes' own requires it of Events only
            // (`kubectl explain secret` shows no `-required-` there).
            if kind != Kind::Event
                && let Some(o) = s.as_object_mut()
                && let Some(Value::Array(required)) = o.get_mut("required")
            {
                required.retain(|r| r != "metadata");
                if required.is_empty() {
                    o.remove("required");
                }
            }
        }
    }
    defs
}

const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DESCRIPTION: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// The properties kube-apiserver adds to every published CRD schema (the
/// CRD itself leaves them out): `kubectl explain machine` lists them.
fn type_meta_properties() -> [(&'static str, Value); 3] {
    [
        (
            "apiVersion",
            json!({"description": API_VERSION_DESCRIPTION, "type": "string"}),
        ),
        (
            "kind",
            json!({"description": KIND_DESCRIPTION, "type": "string"}),
        ),
        (
            "metadata",
            json!({"description": METADATA_DESCRIPTION,
                   "allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]}),
        ),
    ]
}

/// The CRD schemas of the metalherd kinds, under kube-apiserver's names,
/// each with its GVK.
pub(super) fn crd_schemas() -> Map<String, Value> {
    let mut schemas = Map::new();
    for crd in crate::api::crds() {
        let Some(kind) = Kind::parse(&crd.spec.names.kind) else {
            continue;
        };
        let schema = crd
            .spec
            .versions
            .iter()
            .find(|v| v.name == VERSION)
            .and_then(|v| v.schema.as_ref())
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| serde_json::to_value(s).ok());
        if let Some(mut schema) = schema {
            schema["x-kubernetes-group-version-kind"] = json!([gvk(kind)]);
            if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
                for (name, p) in type_meta_properties() {
                    props.entry(name).or_insert(p);
                }
            }
            schemas.insert(schema_name(kind), schema);
        }
    }
    schemas
}

fn document(group: Group) -> Value {
    let mut paths = Map::new();
    let mut schemas = builtin_schemas(group);
    for kind in group.kinds() {
        paths.extend(paths_of(kind));
    }
    if group == Group::Metalherd {
        schemas.extend(crd_schemas());
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "metalherd", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_of_each_kind_names_its_gvk_and_field_validation() {
        let doc = document(Group::Metalherd);
        let p = &doc["paths"]["/apis/metalherd.dev/v1alpha1/namespaces/{namespace}/machines/{name}"]
            ["patch"];
        assert_eq!(p["x-kubernetes-group-version-kind"]["kind"], "Machine");
        assert!(
            p["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|q| q["name"] == "fieldValidation" && q["in"] == "query")
        );
        let m = &doc["components"]["schemas"]["dev.metalherd.v1alpha1.Machine"];
        assert!(
            m["properties"]["spec"]["properties"]["bmc"].is_object(),
            "{m}"
        );
        let core = document(Group::Core);
        assert!(
            core["paths"]["/api/v1/namespaces/{namespace}/secrets/{name}"]["patch"].is_object()
        );
        let ns = &core["paths"]["/api/v1/namespaces/{name}"];
        assert_eq!(
            ns["delete"]["x-kubernetes-group-version-kind"]["kind"],
            "Namespace"
        );
        assert_eq!(ns["parameters"].as_array().map(Vec::len), Some(1));
        assert!(core["components"]["schemas"]["io.k8s.api.core.v1.Namespace"].is_object());
        assert!(index()["paths"]["apis/metalherd.dev/v1alpha1"]["serverRelativeURL"].is_string());
        assert!(index()["paths"]["apis/coordination.k8s.io/v1"]["serverRelativeURL"].is_string());
    }

    #[test]
    fn leases_are_described_by_their_kubernetes_schema() {
        let doc = document(Group::Coordination);
        let p = &doc["paths"]["/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"];
        assert_eq!(
            p["put"]["x-kubernetes-group-version-kind"]["group"],
            "coordination.k8s.io"
        );
        let schemas = &doc["components"]["schemas"];
        let lease = &schemas["io.k8s.api.coordination.v1.Lease"];
        assert_eq!(
            lease["x-kubernetes-group-version-kind"][0]["kind"], "Lease",
            "{lease}"
        );
        let spec_ref = lease["properties"]["spec"]["$ref"]
            .as_str()
            .unwrap_or_else(|| {
                lease["properties"]["spec"]["allOf"][0]["$ref"]
                    .as_str()
                    .unwrap_or_default()
            });
        assert_eq!(
            spec_ref,
            "#/components/schemas/io.k8s.api.coordination.v1.LeaseSpec"
        );
        assert!(
            schemas["io.k8s.api.coordination.v1.LeaseSpec"]["properties"]["holderIdentity"]
                .is_object()
        );
        assert!(schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object());
    }
}
