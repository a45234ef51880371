//! Story: the CRDs checked in under deploy/crds/ are exactly what
//! `metalherd crds` prints, so `kubectl apply -f deploy/crds/` installs the
//! objects this binary serves, and their schemas agree with the API's own
//! validation (checked with a JSON-schema validator).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;

#[test]
fn generated_crds_match_deploy_crds() {
    let out = Command::new(common::metalherd_bin())
        .arg("crds")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).unwrap();
    let checked_in =
        std::fs::read_to_string(common::repo_root().join("deploy/crds/metalherd.yaml")).unwrap();
    assert!(
        generated == checked_in,
        "deploy/crds/metalherd.yaml is stale: regenerate it with\n  cargo run -q -- crds > deploy/crds/metalherd.yaml"
    );
    // Every kind with its printer columns and subresources is there.
    for kind in ["Machine", "MachineClass", "MachineSet", "DiscoveredMachine"] {
        assert!(
            generated.contains(&format!("kind: {kind}\n")),
            "{kind} missing"
        );
    }
    assert!(generated.contains("scale:"), "MachineSet scale subresource");
    assert!(generated.contains("name: Phase"), "Machine printer columns");
}

/// The CRD schemas (what a kube-apiserver checks before the admission
/// webhook) checked with a JSON-schema validator: every example and
/// fixture the API accepts passes them, and the defects they can express
/// (patterns, enums, ranges) are refused at the same field path as the
/// API's own validation; the rest is the webhook's.
#[test]
fn the_crd_schemas_accept_what_the_api_accepts_and_refuse_at_the_same_paths() {
    use common::manifests::{bad_manifests, machine, machine_class, machine_set};
    use serde_json::Value;
    let schema_of = |kind: &str| -> jsonschema::Validator {
        let crd = metalherd::api::crds()
            .iter()
            .find(|c| c.spec.names.kind == kind)
            .unwrap();
        let s = serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        jsonschema::draft4::new(&s).unwrap()
    };
    let kind_of = |v: &Value| v["kind"].as_str().unwrap().to_string();
    // Accepted by the API, so by the schemas.
    let mut good: Vec<Value> = vec![machine("m1"), machine_set("w", 3), machine_class("c")];
    for f in std::fs::read_dir(common::repo_root().join("deploy/examples")).unwrap() {
        let path = f.unwrap().path();
        if path.file_name().unwrap() == "invalid-machine.yaml" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for d in serde_yaml::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(d).unwrap();
            if v["apiVersion"] == "metalherd.dev/v1alpha1" {
                metalherd::api::validate::validate(
                    metalherd::api::Kind::ALL
                        .into_iter()
                        .find(|k| k.as_str() == kind_of(&v))
                        .unwrap(),
                    &v,
                )
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                good.push(v);
            }
        }
    }
    for v in &good {
        let errs: Vec<String> = schema_of(&kind_of(v))
            .iter_errors(v)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(errs.is_empty(), "{}: {errs:?}", v["metadata"]["name"]);
    }
    // Refused by the API: where the schema refuses too, at the same path.
    let mut by_schema = Vec::new();
    for b in bad_manifests() {
        let errs: Vec<String> = schema_of(&kind_of(&b.doc))
            .iter_errors(&b.doc)
            .map(|e| {
                let p = e
                    .instance_path()
                    .as_str()
                    .trim_start_matches('/')
                    .replace('/', ".");
                // A missing field is named by its own path, as
                // kube-apiserver and metalherd name it.
                match e.kind() {
                    jsonschema::error::ValidationErrorKind::Required { property } => {
                        let name = property.as_str().unwrap_or_default();
                        if p.is_empty() {
                            name.to_string()
                        } else {
                            format!("{p}.{name}")
                        }
                    }
                    _ => p,
                }
            })
            .collect();
        if !errs.is_empty() {
            assert!(
                errs.iter().any(|p| p == b.field),
                "{}: the schema refuses at {errs:?}, the API at {}",
                b.case,
                b.field
            );
            by_schema.push(b.case);
        }
    }
    assert_eq!(
        by_schema,
        [
            "malformed MAC",
            "negative replicas",
            "absent credentials reference"
        ],
        "the defects the schema itself refuses"
    );
    // An IPMI cipher suite other than 3 or 17.
    let mut m = machine("m2");
    m["spec"]["bmc"]["cipherSuite"] = 4.into();
    let errs: Vec<String> = schema_of("Machine")
        .iter_errors(&m)
        .map(|e| e.instance_path().to_string())
        .collect();
    assert_eq!(errs, ["/spec/bmc/cipherSuite"]);
}
