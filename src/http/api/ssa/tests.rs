//! Ownership rules on plain values: what each apply and update owns,
//! conflicts, force, removal, sharing, status.

use serde_json::{Value, json};

use super::paths::{self, FieldSet};
use super::*;

const OBJ: Scope = Scope::Object {
    status_apart: false,
};

fn w<'a>(manager: &'a str, now: &'a str) -> Write<'a> {
    Write {
        manager,
        api_version: "coordination.k8s.io/v1",
        scope: OBJ,
        now,
    }
}

fn lease(spec: Value) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": "l", "namespace": "default"}, "spec": spec})
}

fn owned(obj: &Value, manager: &str) -> Vec<String> {
    entries(obj)
        .iter()
        .filter(|e| e.manager == manager)
        .flat_map(|e| e.fields.iter().map(|p| paths::display(p)))
        .collect()
}

#[test]
fn fields_v1_round_trips_and_marks_owned_maps() {
    let p = |s: &str| s.split('.').map(String::from).collect::<Vec<_>>();
    let set: FieldSet = [p("spec.a"), p("metadata.labels"), p("metadata.labels.x")].into();
    let v = paths::to_fields_v1(&set);
    assert_eq!(
        v,
        json!({"f:metadata": {"f:labels": {".": {}, "f:x": {}}}, "f:spec": {"f:a": {}}})
    );
    assert_eq!(paths::from_fields_v1(&v), set);
}

#[test]
fn an_apply_creates_and_owns_what_it_sets() {
    let cfg = lease(json!({"holderIdentity": "a", "leaseDurationSeconds": 15}));
    let obj = apply(None, &cfg, &w("elector", "t1"), false).unwrap();
    assert_eq!(obj["spec"]["holderIdentity"], "a");
    assert_eq!(
        obj["metadata"]["managedFields"],
        json!([{"manager": "elector", "operation": "Apply", "apiVersion": "coordination.k8s.io/v1",
                "time": "t1", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {}}}}])
    );
    // The same apply again is the same object (but for the time).
    let again = apply(Some(&obj), &cfg, &w("elector", "t2"), false).unwrap();
    assert!(same_but_times(&obj, &again));
}

#[test]
fn another_manager_changing_an_owned_field_conflicts_unless_forced() {
    let obj = apply(
        None,
        &lease(json!({"holderIdentity": "a"})),
        &w("a", "t1"),
        false,
    )
    .unwrap();
    let take = lease(json!({"holderIdentity": "b", "leaseTransitions": 1}));
    let c = apply(Some(&obj), &take, &w("b", "t2"), false).unwrap_err();
    assert_eq!(
        c,
        [Conflict {
            manager: "\"a\"".into(),
            field: vec!["spec".into(), "holderIdentity".into()]
        }]
    );
    assert_eq!(
        conflict_message(&c),
        "Apply failed with 1 conflict: conflict with \"a\": .spec.holderIdentity"
    );
    let forced = apply(Some(&obj), &take, &w("b", "t2"), true).unwrap();
    assert_eq!(forced["spec"]["holderIdentity"], "b");
    assert!(owned(&forced, "a").is_empty(), "{forced}");
    assert_eq!(
        owned(&forced, "b"),
        [".spec.holderIdentity", ".spec.leaseTransitions"]
    );
}

#[test]
fn the_same_value_is_shared_and_survives_one_owner_letting_go() {
    let obj = apply(
        None,
        &lease(json!({"holderIdentity": "a", "leaseDurationSeconds": 15})),
        &w("a", "t1"),
        false,
    )
    .unwrap();
    let obj = apply(
        Some(&obj),
        &lease(json!({"leaseDurationSeconds": 15})),
        &w("b", "t2"),
        false,
    )
    .unwrap();
    assert_eq!(owned(&obj, "b"), [".spec.leaseDurationSeconds"]);
    // a stops applying both: holderIdentity (a's alone) goes, the shared
    // duration stays.
    let obj = apply(Some(&obj), &lease(json!({})), &w("a", "t3"), false).unwrap();
    assert_eq!(obj["spec"], json!({"leaseDurationSeconds": 15}), "{obj}");
}

#[test]
fn managers_of_different_labels_do_not_conflict() {
    let with = |labels: Value| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lab", "labels": labels}});
    let obj = apply(None, &with(json!({"team": "a"})), &w("a", "t1"), false).unwrap();
    let obj = apply(
        Some(&obj),
        &with(json!({"tier": "1"})),
        &w("b", "t2"),
        false,
    )
    .unwrap();
    assert_eq!(obj["metadata"]["labels"], json!({"team": "a", "tier": "1"}));
    let obj = apply(Some(&obj), &with(json!({})), &w("b", "t3"), false).unwrap();
    assert_eq!(obj["metadata"]["labels"], json!({"team": "a"}));
}

#[test]
fn updates_take_the_fields_they_change() {
    let created = lease(json!({"holderIdentity": "a", "leaseDurationSeconds": 15}));
    let mut obj = created.clone();
    track_update(None, None, &mut obj, &w("kubectl-create", "t1"));
    assert_eq!(
        owned(&obj, "kubectl-create"),
        [".spec.holderIdentity", ".spec.leaseDurationSeconds"]
    );
    let mut patched = obj.clone();
    patched["spec"]["holderIdentity"] = json!("b");
    track_update(Some(&obj), None, &mut patched, &w("kubectl-patch", "t2"));
    assert_eq!(owned(&patched, "kubectl-patch"), [".spec.holderIdentity"]);
    assert_eq!(
        owned(&patched, "kubectl-create"),
        [".spec.leaseDurationSeconds"]
    );
    // An apply changing it now conflicts with the patcher, named as
    // kube-apiserver names an Update manager.
    let c = apply(
        Some(&patched),
        &lease(json!({"holderIdentity": "c"})),
        &w("elector", "t3"),
        false,
    )
    .unwrap_err();
    assert_eq!(
        conflict_message(&c),
        "Apply failed with 1 conflict: conflict with \"kubectl-patch\" using coordination.k8s.io/v1: .spec.holderIdentity"
    );
    // A removed field leaves every set.
    let mut removed = patched.clone();
    removed["spec"]
        .as_object_mut()
        .unwrap()
        .remove("leaseDurationSeconds");
    track_update(Some(&patched), None, &mut removed, &w("kubectl-edit", "t4"));
    assert!(owned(&removed, "kubectl-create").is_empty(), "{removed}");
    assert!(owned(&removed, "kubectl-edit").is_empty());
}

#[test]
fn status_applies_own_status_only() {
    let machine = json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": "m", "namespace": "default"},
        "spec": {"online": true}, "status": {"phase": "Ready"}});
    let st = Write {
        manager: "health-checker",
        api_version: "metalherd.dev/v1alpha1",
        scope: Scope::Status,
        now: "t1",
    };
    let cfg = json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": "m"}, "spec": {"online": false},
        "status": {"lastError": {"reason": "X", "message": "y", "time": "t"}}});
    let obj = apply(Some(&machine), &cfg, &st, false).unwrap();
    assert_eq!(
        obj["spec"]["online"], true,
        "spec untouched through /status"
    );
    assert_eq!(obj["status"]["phase"], "Ready");
    assert_eq!(obj["status"]["lastError"]["reason"], "X");
    let e = &entries(&obj)[0];
    assert_eq!(e.subresource.as_deref(), Some("status"));
    assert_eq!(
        owned(&obj, "health-checker"),
        [
            ".status.lastError.message",
            ".status.lastError.reason",
            ".status.lastError.time"
        ]
    );
    // The object's own writes never own status when it has a subresource.
    let apart = Scope::Object { status_apart: true };
    assert!(
        paths::fields_of(&cfg, apart)
            .iter()
            .all(|p| p[0] != "status")
    );
}

#[test]
fn managers_are_named_by_field_manager_or_user_agent() {
    assert_eq!(manager_of(Some("elector"), Some("kube-rs/5")), "elector");
    assert_eq!(
        manager_of(
            None,
            Some("kubectl/v1.32.4 (linux/amd64) kubernetes/4cb5f07")
        ),
        "kubectl"
    );
    assert_eq!(manager_of(Some(""), None), "unknown");
}

/// After a client-side `kubectl apply`, kubectl's first `apply
/// --server-side` takes over the fields the last-applied annotation names
/// (while they still hold its values), and the annotation follows what it
/// applies; another manager, or a field changed since, still conflicts.
#[test]
fn kubectl_moves_from_client_side_apply_as_with_kube_apiserver() {
    let old = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"annotations":{},"name":"l","namespace":"default"},"spec":{"holderIdentity":"a"}}"#;
    let mut live = lease(json!({"holderIdentity": "a"}));
    live["metadata"]["annotations"] = json!({LAST_APPLIED: format!("{old}\n")});
    track_update(None, None, &mut live, &w("kubectl-client-side-apply", "t0"));
    let config = lease(json!({"holderIdentity": "b"}));
    let other = apply(Some(&live), &config, &w("elector", "t1"), false).unwrap_err();
    assert_eq!(paths::display(&other[0].field), ".spec.holderIdentity");
    let out = apply(Some(&live), &config, &w("kubectl", "t1"), false).unwrap();
    assert_eq!(out["spec"]["holderIdentity"], "b");
    assert_eq!(owned(&out, "kubectl"), [".spec.holderIdentity"]);
    assert_eq!(
        out["metadata"]["annotations"][LAST_APPLIED],
        "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{\"name\":\"l\",\"namespace\":\"default\"},\"spec\":{\"holderIdentity\":\"b\"}}\n"
    );
    // Changed by hand since the client-side apply: no longer forgiven.
    let mut edited = live.clone();
    edited["spec"]["holderIdentity"] = json!("c");
    assert!(apply(Some(&edited), &config, &w("kubectl", "t1"), false).is_err());
}

/// A record a client writes (kubectl's move to server-side apply drops its
/// client-side manager) replaces the server's; a malformed or empty one
/// is no record and the server's stays.
#[test]
fn a_record_the_client_sends_replaces_the_servers() {
    let mut obj = lease(json!({"holderIdentity": "a"}));
    track_update(None, None, &mut obj, &w("kubectl-client-side-apply", "t0"));
    let obj = apply(Some(&obj), &obj, &w("kubectl", "t1"), true).unwrap();
    let mut rewritten = obj.clone();
    rewritten["metadata"]["managedFields"]
        .as_array_mut()
        .unwrap()
        .retain(|e| e["manager"] == "kubectl");
    let sent_list = sent(&rewritten);
    assert_eq!(sent_list.as_ref().map(Vec::len), Some(1));
    let mut next = rewritten.clone();
    track_update(Some(&obj), sent_list, &mut next, &w("kubectl", "t2"));
    let managers: Vec<String> = entries(&next).into_iter().map(|e| e.manager).collect();
    assert_eq!(managers, ["kubectl"]);
    for bad in [json!([]), json!([{}]), json!("x")] {
        let mut o = obj.clone();
        o["metadata"]["managedFields"] = bad;
        assert!(sent(&o).is_none());
    }
}

/// Entries in kube-apiserver's order: applies first, then oldest first,
/// then by manager (two writes in one second are in name order).
#[test]
fn entries_are_kept_in_kube_apiservers_order() {
    let mut obj = lease(json!({"holderIdentity": "a"}));
    track_update(None, None, &mut obj, &w("kubectl-create", "t0"));
    let obj = apply(
        Some(&obj),
        &lease(json!({"leaseDurationSeconds": 5})),
        &w("z", "t1"),
        false,
    )
    .unwrap();
    let obj = apply(
        Some(&obj),
        &lease(json!({"leaseTransitions": 1})),
        &w("c", "t0"),
        false,
    )
    .unwrap();
    let order: Vec<String> = entries(&obj).into_iter().map(|e| e.manager).collect();
    assert_eq!(order, ["c", "z", "kubectl-create"]);
}
