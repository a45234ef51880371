use axum::http::HeaderValue;

use super::*;
use crate::http::api::protobuf::{Field, fields};

fn accept(v: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
    h
}

#[test]
fn every_kind_has_its_paths_and_definition_with_its_gvk() {
    let doc = document();
    assert_eq!(doc["swagger"], "2.0");
    let machine =
        &doc["paths"]["/apis/metalherd.dev/v1alpha1/namespaces/{namespace}/machines/{name}"];
    assert_eq!(machine["patch"]["x-kubernetes-action"], "patch");
    assert_eq!(
        machine["patch"]["x-kubernetes-group-version-kind"]["kind"],
        "Machine"
    );
    assert_eq!(
        machine["get"]["responses"]["200"]["schema"]["$ref"],
        "#/definitions/dev.metalherd.v1alpha1.Machine"
    );
    let lease = &doc["paths"]["/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"];
    assert_eq!(
        lease["put"]["responses"]["200"]["schema"]["$ref"],
        "#/definitions/io.k8s.api.coordination.v1.Lease"
    );
    assert!(doc["paths"]["/api/v1/namespaces/{name}"]["delete"].is_object());
    assert!(doc["paths"]["/apis/metalherd.dev/v1alpha1/namespaces/{namespace}/machinesets/{name}/scale"]["put"].is_object());
    let defs = doc["definitions"].as_object().unwrap();
    for (name, kind) in [
        ("dev.metalherd.v1alpha1.Machine", "Machine"),
        ("dev.metalherd.v1alpha1.MachineSet", "MachineSet"),
        ("io.k8s.api.coordination.v1.Lease", "Lease"),
        ("io.k8s.api.core.v1.Namespace", "Namespace"),
        ("io.k8s.api.core.v1.Secret", "Secret"),
        ("io.k8s.api.core.v1.Event", "Event"),
        ("io.k8s.api.autoscaling.v1.Scale", "Scale"),
    ] {
        assert_eq!(
            defs[name]["x-kubernetes-group-version-kind"][0]["kind"], kind,
            "{name}"
        );
    }
    assert!(
        defs["dev.metalherd.v1alpha1.Machine"]["properties"]["spec"]["properties"]["bmc"]
            .is_object()
    );
    // A reference with a description is a plain `$ref` in 2.0 (kubectl
    // follows no `allOf`).
    let spec = &defs["io.k8s.api.coordination.v1.Lease"]["properties"]["spec"];
    assert_eq!(
        spec["$ref"], "#/definitions/io.k8s.api.coordination.v1.LeaseSpec",
        "{spec}"
    );
    assert!(spec.get("allOf").is_none() && spec["description"].is_string());
}

/// Every `$ref`, anywhere in the document, names a definition (kubectl
/// refuses a document with one that does not).
#[test]
fn every_reference_resolves() {
    fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(m) => {
                for (k, c) in m {
                    match (k.as_str(), c) {
                        ("$ref", Value::String(r)) => out.push(r),
                        _ => refs(c, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|c| refs(c, out)),
            _ => {}
        }
    }
    let doc = document();
    let mut all = Vec::new();
    refs(doc, &mut all);
    assert!(all.len() > 20);
    for r in all {
        let name = r
            .strip_prefix("#/definitions/")
            .unwrap_or_else(|| panic!("{r}"));
        assert!(
            doc["definitions"].get(name).is_some(),
            "{r} does not resolve"
        );
    }
    // Nothing 2.0 has no word for is left.
    let text = doc.to_string();
    assert!(!text.contains("\"nullable\"") && !text.contains("\"anyOf\""));
}

#[test]
fn json_or_protobuf_by_accept_else_406() {
    assert_eq!(wants_protobuf(&HeaderMap::new()), Some(false));
    assert_eq!(wants_protobuf(&accept("application/json")), Some(false));
    assert_eq!(wants_protobuf(&accept(PROTOBUF)), Some(true));
    assert_eq!(
        wants_protobuf(&accept(
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf, application/json"
        )),
        Some(true)
    );
    assert_eq!(wants_protobuf(&accept("text/html")), None);
}

/// The protobuf holds what the JSON does: the Swagger version, the info,
/// one `NamedPathItem` per path and one `NamedSchema` per definition, the
/// GVK extension of a schema as YAML text.
#[test]
fn the_protobuf_document_mirrors_the_json_one() {
    let doc = document();
    let bytes = protobuf_bytes();
    let top = fields(bytes).unwrap();
    let bytes_of = |f: &Field<'_>| match f {
        Field::Bytes(b) => b.to_vec(),
        other => panic!("{other:?}"),
    };
    let field = |msg: &[(u64, Field<'_>)], n: u64| -> Vec<Vec<u8>> {
        msg.iter()
            .filter(|(k, _)| *k == n)
            .map(|(_, f)| bytes_of(f))
            .collect()
    };
    assert_eq!(field(&top, 1), [b"2.0".to_vec()]);
    let paths = field(&top, 8).remove(0);
    let paths = fields(&paths).unwrap();
    assert_eq!(
        field(&paths, 2).len(),
        doc["paths"].as_object().unwrap().len()
    );
    let definitions = field(&top, 9).remove(0);
    let definitions = fields(&definitions).unwrap();
    let named: Vec<Vec<u8>> = field(&definitions, 1);
    assert_eq!(named.len(), doc["definitions"].as_object().unwrap().len());
    let lease = named
        .iter()
        .map(|n| fields(n).unwrap())
        .find(|n| field(n, 1) == [b"io.k8s.api.coordination.v1.Lease".to_vec()])
        .expect("the Lease schema");
    let schema = field(&lease, 2).remove(0);
    let schema = fields(&schema).unwrap();
    let ext = field(&schema, 31)
        .into_iter()
        .map(|e| {
            let e = fields(&e).unwrap();
            let any = field(&e, 2).remove(0);
            let any = fields(&any).unwrap();
            (field(&e, 1).remove(0), field(&any, 2).remove(0))
        })
        .find(|(k, _)| k == b"x-kubernetes-group-version-kind")
        .expect("the GVK extension");
    let yaml: Value = serde_yaml::from_slice(&ext.1).unwrap();
    assert_eq!(yaml[0]["group"], "coordination.k8s.io");
}
