use serde_json::{Value, json};

use super::answer;
use crate::http::api::admission::Admission;

/// A Machine as a kube-apiserver sends it: server-set metadata included.
fn machine(mac: &str) -> Value {
    json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
           "metadata": {"name": "m1", "namespace": "metalherd", "uid": "5b3c2d10-0000-4000-8000-000000000001",
                        "resourceVersion": "12", "generation": 1,
                        "creationTimestamp": "2026-11-24T00:00:00Z",
                        "managedFields": [{"manager": "kubectl", "operation": "Update",
                                           "apiVersion": "metalherd.dev/v1alpha1",
                                           "time": "2026-11-24T00:00:00Z",
                                           "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
           "spec": {"bmc": {"address": "redfish+https://10.0.0.5/redfish/v1/Systems/1",
                            "credentialsSecretRef": {"name": "bmc"}},
                    "bootMACAddress": mac,
                    "network": {"address": "10.0.0.7/24", "gateway": "10.0.0.1"}}})
}

fn review(kind: &str, group: &str, operation: &str, sub: Option<&str>, object: Value) -> Vec<u8> {
    let mut req = json!({"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                         "kind": {"group": group, "version": "v1alpha1", "kind": kind},
                         "resource": {"group": group, "version": "v1alpha1", "resource": "machines"},
                         "name": "m1", "namespace": "metalherd", "operation": operation,
                         "userInfo": {"username": "admin"}, "object": object, "dryRun": false});
    if let Some(s) = sub {
        req["subResource"] = json!(s);
    }
    serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                               "request": req}),
    )
    .unwrap()
}

fn response(body: &[u8]) -> Value {
    let v = answer(&Admission::default(), body).unwrap();
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    assert_eq!(
        v["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002",
        "the answer names the request's uid"
    );
    v["response"].clone()
}

#[test]
fn a_valid_machine_is_allowed() {
    let r = response(&review(
        "Machine",
        "metalherd.dev",
        "CREATE",
        None,
        machine("52:54:00:12:34:56"),
    ));
    assert_eq!(r["allowed"], true, "{r}");
}

#[test]
fn an_invalid_machine_is_denied_with_the_field_path() {
    for op in ["CREATE", "UPDATE"] {
        let r = response(&review(
            "Machine",
            "metalherd.dev",
            op,
            None,
            machine("52:54:00:12:34"),
        ));
        assert_eq!(r["allowed"], false, "{r}");
        assert_eq!(r["status"]["code"], 422);
        assert_eq!(r["status"]["reason"], "Invalid");
        let cause = &r["status"]["details"]["causes"][0];
        assert_eq!(cause["field"], "spec.bootMACAddress", "{r}");
        assert!(
            r["status"]["message"]
                .as_str()
                .unwrap()
                .contains("spec.bootMACAddress"),
            "{r}"
        );
    }
}

#[test]
fn unknown_fields_are_denied_as_in_standalone_mode() {
    let mut m = machine("52:54:00:12:34:56");
    m["spec"]["bootMac"] = json!("52:54:00:12:34:56");
    let r = response(&review("Machine", "metalherd.dev", "CREATE", None, m));
    assert_eq!(r["allowed"], false, "{r}");
    assert!(r["status"]["message"].as_str().unwrap().contains("bootMac"));
}

#[test]
fn the_deployments_rules_apply() {
    // In DHCP proxy mode a Machine needs its address.
    let mut m = machine("52:54:00:12:34:56");
    m["spec"]["network"] = json!({});
    let body = review("Machine", "metalherd.dev", "CREATE", None, m);
    assert_eq!(response(&body)["allowed"], true);
    let proxy = Admission { dhcp_proxy: true };
    let v = answer(&proxy, &body).unwrap();
    assert_eq!(v["response"]["allowed"], false);
    assert_eq!(
        v["response"]["status"]["details"]["causes"][0]["field"],
        "spec.network.address"
    );
}

#[test]
fn status_writes_deletes_and_other_kinds_pass_unchecked() {
    let bad = machine("not-a-mac");
    for (kind, group, op, sub) in [
        ("Machine", "metalherd.dev", "UPDATE", Some("status")),
        ("Machine", "metalherd.dev", "DELETE", None),
        ("Machine", "metalherd.dev", "CONNECT", None),
        ("Deployment", "apps", "CREATE", None),
        ("Secret", "", "CREATE", None),
    ] {
        let r = response(&review(kind, group, op, sub, bad.clone()));
        assert_eq!(r["allowed"], true, "{kind} {op} {sub:?}: {r}");
    }
}

#[test]
fn what_is_not_an_admission_review_is_a_bad_request() {
    for body in [
        &b"not json"[..],
        br#"{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}"#,
        br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#,
        br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}}"#,
    ] {
        let e = answer(&Admission::default(), body).unwrap_err();
        assert_eq!(e.body()["code"], 400, "{}", String::from_utf8_lossy(body));
    }
    // A create without an object is answered, not allowed.
    let mut b: Value = serde_json::from_slice(&review(
        "Machine",
        "metalherd.dev",
        "CREATE",
        None,
        Value::Null,
    ))
    .unwrap();
    b["request"].as_object_mut().unwrap().remove("object");
    let v = answer(&Admission::default(), &serde_json::to_vec(&b).unwrap()).unwrap();
    assert_eq!(v["response"]["allowed"], false, "{v}");
}
