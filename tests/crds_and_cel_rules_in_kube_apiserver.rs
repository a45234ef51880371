//! Story: a cluster admin installs metalherd's CRDs (deploy/crds/) on a
//! real kube-apiserver (tests/common/control_plane.rs). Every CRD is
//! accepted as a structural schema and served; the CEL rules
//! (`x-kubernetes-validations`) refuse what they describe, each on its
//! field with the same words standalone metalherd uses, and change
//! nothing; objects that keep the rules are stored. What the schema
//! itself refuses (an unknown field, a malformed MAC) is refused too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::control_plane::{ControlPlane, Options};
use common::manifests::{machine, machine_set};
use serde_json::{Value, json};

const GROUP: &str = "/apis/metalherd.dev/v1alpha1/namespaces/default";

/// The refusal of `doc` by kube-apiserver: 422, `Invalid`, a cause on
/// `field` whose message holds `says`.
fn assert_refused(cp: &ControlPlane, plural: &str, doc: &Value, field: &str, says: &str) {
    let (code, body) = cp.req("POST", &format!("{GROUP}/{plural}"), Some(doc));
    assert_eq!(code, 422, "{field}: {body}");
    assert_eq!(body["reason"], "Invalid", "{body}");
    let causes = body["details"]["causes"].as_array().expect("causes");
    let hit = causes
        .iter()
        .find(|c| c["field"] == field)
        .unwrap_or_else(|| panic!("no cause on {field}: {body}"));
    assert!(
        hit["message"].as_str().unwrap_or("").contains(says),
        "{field}: message lacks {says:?}: {body}"
    );
    // Nothing stored.
    let name = doc["metadata"]["name"].as_str().unwrap();
    let (code, _) = cp.req("GET", &format!("{GROUP}/{plural}/{name}"), None);
    assert_eq!(code, 404, "{name} was stored");
}

#[test]
fn crds_and_cel_rules_in_kube_apiserver() {
    let cp = ControlPlane::start(Options::default());
    cp.install_crds();

    // Every CRD is structural (no NonStructuralSchema condition), its names
    // accepted, and established.
    let (ok, out, err) = cp.kubectl(&["get", "crd", "-o", "json"]);
    assert!(ok, "{err}");
    let crds: Value = serde_json::from_str(&out).unwrap();
    let ours: Vec<&Value> = crds["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["spec"]["group"] == "metalherd.dev")
        .collect();
    assert_eq!(ours.len(), 4, "{out}");
    for crd in &ours {
        let conds = crd["status"]["conditions"].as_array().unwrap();
        let is = |t: &str| {
            conds
                .iter()
                .any(|c| c["type"] == t && c["status"] == "True")
        };
        assert!(is("Established") && is("NamesAccepted"), "{crd:#}");
        assert!(!is("NonStructuralSchema"), "{crd:#}");
    }
    // Served: kubectl explain reads the published schema.
    let (ok, out, err) = cp.kubectl(&["explain", "machine.spec.network"]);
    assert!(ok && out.contains("gateway"), "{out}{err}");

    // CEL: a gateway outside the subnet, with standalone's words.
    let mut m = machine("cel-gateway");
    m["spec"]["network"]["gateway"] = json!("10.9.0.1");
    assert_refused(
        &cp,
        "machines",
        &m,
        "spec.network.gateway",
        "10.9.0.1 is outside the subnet of spec.network.address 10.0.0.7/24",
    );
    // CEL: Replace is not implemented.
    let mut s = machine_set("cel-replace", 1);
    s["spec"]["updateStrategy"] = json!({"type": "Replace"});
    assert_refused(
        &cp,
        "machinesets",
        &s,
        "spec.updateStrategy.type",
        "Replace is not implemented yet",
    );
    // CEL: the set's own label is not a pool selector.
    let mut s = machine_set("cel-selector", 1);
    s["spec"]["selector"]["matchLabels"]["metalherd.dev/machineset"] = json!("x");
    assert_refused(
        &cp,
        "machinesets",
        &s,
        "spec.selector.matchLabels",
        "metalherd.dev/machineset is set by metalherd when a set claims a machine",
    );
    // The schema: an unknown field and a malformed MAC.
    let mut m = machine("schema-unknown");
    m["spec"]["bmc"]["adress"] = json!("x");
    let (code, body) = cp.req("POST", &format!("{GROUP}/machines"), Some(&m));
    // kube-apiserver drops unknown fields of a structural schema unless the
    // request asks for strict field validation, as kubectl does.
    assert!(code < 300, "{body}");
    let (code, body) = cp.raw(
        "POST",
        &format!("{GROUP}/machines?fieldValidation=Strict"),
        Some(&cp.token),
        Some(
            &json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
            "metadata": {"name": "schema-unknown-strict", "namespace": "default"},
            "spec": m["spec"]}),
        ),
        "application/json",
    );
    assert_eq!(code, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("unknown field \"spec.bmc.adress\""),
        "{body}"
    );
    let mut m = machine("schema-mac");
    m["spec"]["bootMACAddress"] = json!("52:54:00:zz:34:56");
    assert_refused(&cp, "machines", &m, "spec.bootMACAddress", "should match");

    // What keeps the rules is stored: a gateway inside the subnet, an
    // InPlace set selecting by its own labels.
    let (code, body) = cp.req(
        "POST",
        &format!("{GROUP}/machines"),
        Some(&machine("cel-good")),
    );
    assert!(code < 300, "{body}");
    let mut s = machine_set("cel-good", 1);
    s["spec"]["updateStrategy"] = json!({"type": "InPlace", "maxUnavailable": 1});
    let (code, body) = cp.req("POST", &format!("{GROUP}/machinesets"), Some(&s));
    assert!(code < 300, "{body}");
    // An update that breaks a rule is refused and the stored object stays.
    let mut got = body;
    got["spec"]["updateStrategy"]["type"] = json!("Replace");
    let (code, body) = cp.req("PUT", &format!("{GROUP}/machinesets/cel-good"), Some(&got));
    assert_eq!(code, 422, "{body}");
    let (_, now) = cp.req("GET", &format!("{GROUP}/machinesets/cel-good"), None);
    assert_eq!(now["spec"]["updateStrategy"]["type"], "InPlace");
}
