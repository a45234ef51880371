//! `/openapi/v2`: one Swagger 2.0 document for every group served, as
//! kube-apiserver serves it: each resource's paths (the collection, across
//! namespaces, one object, `/status`, `/scale`), every operation with its
//! `x-kubernetes-action` and `x-kubernetes-group-version-kind`, and the
//! kinds' schemas under `definitions` (the CRD schemas the v3 documents
//! carry, turned into Swagger 2.0 schemas; k8s-openapi's for Kubernetes'
//! own kinds), each with its GVK.
//!
//! Encodings, chosen by `Accept` as kube-apiserver does: JSON, or the
//! protobuf of gnostic's `openapi.v2.Document` ([`proto`]), which is the
//! only one kubectl asks for (`Accept:
//! application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, for
//! `kubectl explain --output=plaintext-openapiv2` and the patch metadata
//! of `kubectl apply`); anything else is a 406. Both are built once.

pub mod proto;

use std::sync::OnceLock;

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::openapi::{builtin_schemas, crd_schemas, gvk, schema_name};
use super::{ApiError, Group};
use crate::api::Kind;

/// The protobuf media type kubectl asks for.
pub const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// The one kube-apiserver answers it with: Go's MIME parser (client-go's)
/// refuses the `@` in a Content-Type.
const PROTOBUF_ANSWERED: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// The document, as JSON.
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(build)
}

fn protobuf_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| proto::document(document()))
}

/// What the client accepts, in kube-apiserver's order of preference.
fn wants_protobuf(headers: &HeaderMap) -> Option<bool> {
    let accept: Vec<String> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|m| m.split(';').next().unwrap_or_default().trim().to_string())
        .collect();
    if accept.is_empty() {
        return Some(false);
    }
    accept.iter().find_map(|m| match m.as_str() {
        PROTOBUF | PROTOBUF_ANSWERED => Some(true),
        "application/json" | "application/*" | "*/*" => Some(false),
        _ => None,
    })
}

/// GET `/openapi/v2`.
pub async fn serve(headers: HeaderMap) -> Response {
    match wants_protobuf(&headers) {
        Some(true) => (
            [(header::CONTENT_TYPE, PROTOBUF_ANSWERED)],
            protobuf_bytes().to_vec(),
        )
            .into_response(),
        Some(false) => axum::Json(document()).into_response(),
        None => ApiError::new(
            StatusCode::NOT_ACCEPTABLE,
            "NotAcceptable",
            format!(
                "/openapi/v2 is served as application/json or {PROTOBUF}; the request accepts neither"
            ),
        )
        .into_response(),
    }
}

/// A Swagger 2.0 schema from an OpenAPI 3.0 one: `$ref`s into
/// `#/definitions/`, and what 2.0 has no word for (`nullable`, `anyOf`,
/// `oneOf`, `not`) left out, as kube-apiserver does for CRD schemas.
fn to_v2(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            // OpenAPI 3.0 wraps a `$ref` with siblings (a description) in
            // a one-item `allOf`; 2.0 documents, kube-apiserver's too, put
            // the `$ref` beside them, and kubectl reads only that.
            if let Some([only]) = m.get("allOf").and_then(Value::as_array).map(Vec::as_slice)
                && let Some(r) = only.get("$ref")
            {
                let mut m = m.clone();
                m.remove("allOf");
                m.insert("$ref".into(), r.clone());
                return to_v2(&Value::Object(m));
            }
            for (k, child) in m {
                match k.as_str() {
                    "nullable" | "anyOf" | "oneOf" | "not" => {}
                    "$ref" => {
                        let r = child.as_str().unwrap_or_default();
                        let name = r.rsplit('/').next().unwrap_or_default();
                        out.insert(k.clone(), format!("#/definitions/{name}").into());
                    }
                    // Keys here are names, not keywords: keep them all.
                    "properties"
                    | "x-kubernetes-group-version-kind"
                    | "default"
                    | "example"
                    | "enum" => {
                        let kept = match child {
                            Value::Object(p) if k == "properties" => Value::Object(
                                p.iter().map(|(n, s)| (n.clone(), to_v2(s))).collect(),
                            ),
                            other => other.clone(),
                        };
                        out.insert(k.clone(), kept);
                    }
                    _ => {
                        out.insert(k.clone(), to_v2(child));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(to_v2).collect()),
        other => other.clone(),
    }
}

fn param(name: &str, place: &str, description: &str) -> Value {
    let mut p = json!({
        "name": name, "in": place, "type": "string", "uniqueItems": true,
        "description": description,
    });
    if place == "path" {
        p["required"] = true.into();
    }
    p
}

fn body(schema: Value) -> Value {
    json!({"name": "body", "in": "body", "required": true, "schema": schema})
}

/// `coordination.k8s.io` → `CoordinationK8sIo`, as operation ids spell it.
fn camel(s: &str) -> String {
    s.split(['.', '-'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

struct Ops {
    kind: Kind,
    /// `#/definitions/...` of the kind.
    reference: Value,
    tag: String,
    id: String,
}

impl Ops {
    fn new(kind: Kind) -> Ops {
        let def = match kind.is_builtin() {
            true => builtin_name(kind),
            false => schema_name(kind),
        };
        let group = match kind.group() {
            "" => "Core".to_string(),
            g => camel(g),
        };
        let scope = if kind.namespaced() { "Namespaced" } else { "" };
        Ops {
            kind,
            reference: json!({"$ref": format!("#/definitions/{def}")}),
            tag: format!("{group}_{}", kind.version()),
            id: format!("{group}{}{scope}{}", camel(kind.version()), kind.as_str()),
        }
    }

    fn op(&self, action: &str, verb: &str, suffix: &str, params: Vec<Value>, out: Value) -> Value {
        let consumes = if action == "patch" && self.kind.is_builtin() {
            json!([
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
                "application/apply-patch+yaml"
            ])
        } else if action == "patch" {
            // No strategic merge patches for the CRD kinds, as kube-apiserver
            // publishes them: kubectl apply reads this list and would
            // otherwise try one, and warn when it cannot build it.
            json!([
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml"
            ])
        } else {
            json!(["*/*"])
        };
        json!({
            "description": format!("{verb} {} {}", self.kind.as_str(), suffix).trim_end().to_string(),
            "consumes": consumes,
            "produces": ["application/json", "application/yaml"],
            "schemes": ["https"],
            "tags": [self.tag],
            "operationId": format!("{verb}{}{}", self.id, camel(suffix)),
            "parameters": params,
            "responses": {
                "200": {"description": "OK", "schema": out},
                "401": {"description": "Unauthorized"},
            },
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk(self.kind),
        })
    }

    fn writes(&self, with_body: Value) -> Vec<Value> {
        vec![
            body(with_body),
            param(
                "fieldManager",
                "query",
                "The name of the actor making the change.",
            ),
            param(
                "fieldValidation",
                "query",
                "Ignore, Warn or Strict: how unknown or duplicate fields are treated.",
            ),
        ]
    }
}

/// The definition name kube-apiserver gives a built-in kind's schema.
fn builtin_name(kind: Kind) -> String {
    let group = match kind.group() {
        "" => "core".to_string(),
        g => g.split('.').next().unwrap_or(g).to_string(),
    };
    format!("io.k8s.api.{group}.{}.{}", kind.version(), kind.as_str())
}

fn paths_of(kind: Kind, paths: &mut Map<String, Value>) {
    let o = Ops::new(kind);
    let prefix = super::group_prefix(kind);
    let plural = kind.plural();
    let scope = if kind.namespaced() {
        "/namespaces/{namespace}"
    } else {
        ""
    };
    let mut common = vec![param(
        "name",
        "path",
        &format!("name of the {}", kind.as_str()),
    )];
    if kind.namespaced() {
        common.push(param(
            "namespace",
            "path",
            "object name and auth scope, such as for teams and projects",
        ));
    }
    let list = json!({"type": "object"});
    let listed = |verb: &str| {
        o.op(
            "list",
            verb,
            "",
            vec![
                param(
                    "labelSelector",
                    "query",
                    "A selector to restrict the list of returned objects by their labels.",
                ),
                param(
                    "fieldSelector",
                    "query",
                    "A selector to restrict the list of returned objects by their fields.",
                ),
                param(
                    "watch",
                    "query",
                    "Watch for changes to the described resources.",
                ),
                param("resourceVersion", "query", "Where a watch starts."),
            ],
            list.clone(),
        )
    };
    let mut collection = json!({"get": listed("list"), "post": o.op("post", "create", "", o.writes(o.reference.clone()), o.reference.clone())});
    if kind.namespaced() {
        collection["parameters"] = json!([common[1].clone()]);
        paths.insert(
            format!("{prefix}/{plural}"),
            json!({"get": listed("listAll")}),
        );
    }
    paths.insert(format!("{prefix}{scope}/{plural}"), collection);
    let mut patch_params = o.writes(json!({"type": "object"}));
    patch_params.push(param(
        "force",
        "query",
        "Force is going to \"force\" Apply requests.",
    ));
    let item = json!({
        "get": o.op("get", "read", "", vec![], o.reference.clone()),
        "put": o.op("put", "replace", "", o.writes(o.reference.clone()), o.reference.clone()),
        "patch": o.op("patch", "patch", "", patch_params.clone(), o.reference.clone()),
        "delete": o.op("delete", "delete", "", vec![], o.reference.clone()),
        "parameters": common,
    });
    let item_path = format!("{prefix}{scope}/{plural}/{{name}}");
    if kind.has_status() {
        let status = json!({
            "get": o.op("get", "read", "status", vec![], o.reference.clone()),
            "put": o.op("put", "replace", "status", o.writes(o.reference.clone()), o.reference.clone()),
            "patch": o.op("patch", "patch", "status", patch_params.clone(), o.reference.clone()),
            "parameters": item["parameters"].clone(),
        });
        paths.insert(format!("{item_path}/status"), status);
    }
    if kind.has_scale() {
        let scale = json!({"$ref": "#/definitions/io.k8s.api.autoscaling.v1.Scale"});
        let with = |action: &str, verb: &str, params: Vec<Value>| {
            let mut op = o.op(action, verb, "scale", params, scale.clone());
            op["x-kubernetes-group-version-kind"] =
                json!({"group": "autoscaling", "version": "v1", "kind": "Scale"});
            op
        };
        let s = json!({
            "get": with("get", "read", vec![]),
            "put": with("put", "replace", vec![body(scale.clone())]),
            "patch": with("patch", "patch", vec![body(json!({"type": "object"}))]),
            "parameters": item["parameters"].clone(),
        });
        paths.insert(format!("{item_path}/scale"), s);
    }
    paths.insert(item_path, item);
}

fn build() -> Value {
    let mut paths = Map::new();
    let mut definitions = Map::new();
    for group in Group::ALL {
        for kind in group.kinds() {
            paths_of(kind, &mut paths);
        }
        for (name, schema) in builtin_schemas(group) {
            definitions.insert(name, to_v2(&schema));
        }
    }
    for (name, schema) in crd_schemas() {
        definitions.insert(name, to_v2(&schema));
    }
    definitions.extend(scale_schema());
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": format!("v1.{}.0", super::discovery::KUBE_MINOR)},
        "paths": paths,
        "definitions": definitions,
    })
}

/// `autoscaling/v1` Scale (what `/scale` answers) and what it refers to.
fn scale_schema() -> Map<String, Value> {
    use k8s_openapi::api::autoscaling::v1::Scale;
    let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
    generator.subschema_for::<Scale>();
    generator
        .take_definitions(true)
        .into_iter()
        .map(|(name, mut s)| {
            if name == "io.k8s.api.autoscaling.v1.Scale" {
                s["x-kubernetes-group-version-kind"] =
                    json!([{"group": "autoscaling", "version": "v1", "kind": "Scale"}]);
            }
            (name, to_v2(&s))
        })
        .collect()
}

#[cfg(test)]
mod tests;
