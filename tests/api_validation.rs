//! Story: a bad manifest is refused over the API with its field path (HTTP
//! 422, a Kubernetes `Status` with causes), and nothing is stored.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::manifests::{bad_manifests, machine};
use common::server::Server;
use serde_json::Value;

const GROUP: &str = "/apis/metalherd.dev/v1alpha1";

fn list_rv(s: &Server, plural: &str) -> (String, usize) {
    let (code, l) = s.req("GET", &format!("{GROUP}/{plural}"), None);
    assert_eq!(code, 200, "{l}");
    (
        l["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string(),
        l["items"].as_array().unwrap().len(),
    )
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
    let s = Server::start();
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
    let s = Server::start();
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
        assert_eq!(now, created, "{}: stored object changed", b.case);
    }
}
