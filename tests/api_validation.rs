//! Story: a bad manifest is refused over the API with its field path (HTTP
//! 422, a Kubernetes `Status` with causes), and nothing is stored.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::manifests::{bad_manifests, machine};
use common::server::Server;
use serde_json::Value;

const GROUP: &str = "/apis/metalherd.dev/v1alpha1";

/// What a user's write could change: names, labels, specs, generation.
/// (The machine controller runs in the server and writes status and
/// finalizers.)
fn list_rv(s: &Server, plural: &str) -> Vec<Value> {
    let (code, l) = s.req("GET", &format!("{GROUP}/{plural}"), None);
    assert_eq!(code, 200, "{l}");
    l["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(user_part)
        .collect()
}

fn user_part(o: &Value) -> Value {
    serde_json::json!([
        o["metadata"]["name"],
        o["metadata"]["labels"],
        o["spec"],
        o["metadata"]["generation"]
    ])
}

fn assert_refused(case: &str, code: u16, body: &Value, field: &str, says: &str) {
    assert_eq!(code, 422, "{case}: {body}");
    assert_eq!(body["kind"], "Status", "{case}: {body}");
    assert_eq!(body["reason"], "Invalid", "{case}: {body}");
    assert_eq!(body["code"], 422, "{case}: {body}");
    let causes = body["details"]["causes"].as_array().expect("causes");
    let hit = causes.iter().find(|c| c["field"] == field);
    let hit = hit.unwrap_or_else(|| panic!("{case}: no cause for {field}: {body}"));
    assert!(
        hit["message"].as_str().unwrap().contains(says),
        "{case}: {field} message lacks {says:?}: {body}"
    );
}

#[test]
fn each_bad_manifest_is_refused_with_its_field_path_and_nothing_is_stored() {
    let s = Server::start_isolated();
    for b in bad_manifests() {
        let before = list_rv(&s, b.plural);
        let (code, body) = s.req(
            "POST",
            &format!("{GROUP}/namespaces/default/{}", b.plural),
            Some(&b.doc),
        );
        assert_refused(b.case, code, &body, b.field, b.says);
        assert_eq!(list_rv(&s, b.plural), before, "{}: store changed", b.case);
    }
}

#[test]
fn bad_updates_are_refused_and_the_stored_object_is_unchanged() {
    let s = Server::start_isolated();
    let (code, created) = s.req(
        "POST",
        &format!("{GROUP}/namespaces/default/machines"),
        Some(&machine("m1")),
    );
    assert_eq!(code, 201, "{created}");
    for b in bad_manifests()
        .into_iter()
        .filter(|b| b.plural == "machines")
    {
        // The same defect, written into the existing object by PUT...
        let mut doc = b.doc.clone();
        doc["metadata"]["name"] = "m1".into();
        let (code, body) = s.req(
            "PUT",
            &format!("{GROUP}/namespaces/default/machines/m1"),
            Some(&doc),
        );
        assert_refused(b.case, code, &body, b.field, b.says);
        // ...and by merge patch of the spec.
        let patch = serde_json::json!({"spec": doc["spec"]});
        let (code, body) = s.http(
            "PATCH",
            &format!("{GROUP}/namespaces/default/machines/m1"),
            Some(&s.token),
            Some(&patch),
            "application/merge-patch+json",
        );
        if b.case != "absent credentials reference" {
            // (a merge patch cannot remove a field by leaving it out)
            assert_refused(b.case, code, &body, b.field, b.says);
        }
        let (_, now) = s.req(
            "GET",
            &format!("{GROUP}/namespaces/default/machines/m1"),
            None,
        );
        assert_eq!(
            user_part(&now),
            user_part(&created),
            "{}: stored object changed",
            b.case
        );
    }
}

/// Kubernetes mode: a kube-apiserver asks metalherd's validating webhook
/// (deploy/kubernetes/webhook.yaml) about each create and update. It
/// presents no bearer token. Every bad manifest is denied with the same
/// field path and message as this API's own refusal; a good one is
/// allowed.
#[test]
fn the_admission_webhook_refuses_what_the_api_refuses_with_the_same_field_paths() {
    let s = Server::start_isolated();
    let review = |kind: &str, op: &str, object: &Value| {
        serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "3f2c1b4e-0000-4000-8000-00000000beef",
                        "kind": {"group": "metalherd.dev", "version": "v1alpha1", "kind": kind},
                        "operation": op, "namespace": "default",
                        "userInfo": {"username": "kubernetes-admin"},
                        "object": object}})
    };
    let kind_of = |plural: &str| match plural {
        "machines" => "Machine",
        "machineclasses" => "MachineClass",
        "machinesets" => "MachineSet",
        p => panic!("no kind for {p}"),
    };
    for b in bad_manifests() {
        let (code, direct) = s.req(
            "POST",
            &format!("{GROUP}/namespaces/default/{}", b.plural),
            Some(&b.doc),
        );
        assert_eq!(code, 422, "{}: {direct}", b.case);
        for op in ["CREATE", "UPDATE"] {
            let (code, v) = s.http(
                "POST",
                "/admission/validate",
                None,
                Some(&review(kind_of(b.plural), op, &b.doc)),
                "application/json",
            );
            assert_eq!(code, 200, "{}: {v}", b.case);
            let r = &v["response"];
            assert_eq!(r["uid"], "3f2c1b4e-0000-4000-8000-00000000beef");
            assert_eq!(r["allowed"], false, "{} {op}: {v}", b.case);
            assert_eq!(r["status"]["code"], 422, "{}: {v}", b.case);
            assert_refused(b.case, 422, &r["status"], b.field, b.says);
            assert_eq!(
                r["status"]["details"]["causes"], direct["details"]["causes"],
                "{}: the webhook and the API disagree",
                b.case
            );
        }
    }
    let (code, v) = s.http(
        "POST",
        "/admission/validate",
        None,
        Some(&review("Machine", "CREATE", &machine("good"))),
        "application/json",
    );
    assert_eq!(
        (code, &v["response"]["allowed"]),
        (200, &Value::Bool(true)),
        "{v}"
    );
    // Nothing reached the store through the webhook.
    let (_, l) = s.req("GET", &format!("{GROUP}/namespaces/default/machines"), None);
    assert_eq!(l["items"], serde_json::json!([]), "{l}");
}
