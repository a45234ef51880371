//! What export and import do to single objects, without any I/O: whether a
//! Machine has settled enough to be moved, which metadata the server sets
//! (and import therefore drops), the order kinds are recreated in, and the
//! rewriting of references to old uids.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::api::Kind;

/// Metadata fields the API server sets on create, so a recreated object
/// has new ones: import drops them, and two exports of the same objects
/// differ only in them (see [`without_server_set`]).
pub const SERVER_SET_METADATA: [&str; 6] = [
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "managedFields",
    "generation",
    "selfLink",
];

/// Kinds in the order import recreates them: what others refer to first
/// (Secrets before the Machines naming them, classes before Machines and
/// sets, Machines before the sets that claim them), Events last, since
/// they refer to the uids the objects before them got.
pub const IMPORT_ORDER: [Kind; 6] = [
    Kind::Secret,
    Kind::MachineClass,
    Kind::Machine,
    Kind::MachineSet,
    Kind::DiscoveredMachine,
    Kind::Event,
];

/// `kind namespace/name`, as the CLI names an object.
pub fn describe(kind: Kind, obj: &Value) -> String {
    let (ns, name) = crate::store::key_of(obj);
    format!("{} {ns}/{name}", kind.singular())
}

/// Why an object cannot be moved now, or `None` when it has settled.
///
/// A per-boot token is `HMAC(key, uid | boot id)` and a recreated Machine
/// has a new uid (and, in another process, another key), so every token of
/// an open boot would be refused after the move and the boot would fail
/// half-way: such Machines are refused until their boot ends. The same for
/// a Machine between phases that power or boot it, and for any object
/// being deleted (its finalizers' work is in flight).
pub fn unsettled(kind: Kind, obj: &Value) -> Option<String> {
    if obj
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        return Some("being deleted".into());
    }
    if kind != Kind::Machine {
        return None;
    }
    let status = obj.get("status")?;
    let phase = status.get("phase").and_then(Value::as_str).unwrap_or("");
    if matches!(phase, "Provisioning" | "Reimaging" | "Deprovisioning") {
        return Some(format!("phase {phase}"));
    }
    let boot = status.get("boot").filter(|b| b.is_object())?;
    let id = boot.get("id").and_then(Value::as_str).unwrap_or("?");
    let purpose = boot.get("purpose").and_then(Value::as_str).unwrap_or("?");
    let set = |f: &str| boot.get(f).is_some_and(|v| !v.is_null());
    if !set("completedAt") {
        return Some(format!("network boot {id} ({purpose}) is open"));
    }
    // An installed OS calls home `booted` with the boot's token after the
    // boot completed.
    if purpose != "deprovision"
        && boot.get("outcome").and_then(Value::as_str) == Some("installed")
        && !set("bootedAt")
    {
        return Some(format!(
            "network boot {id} ({purpose}) installed; waiting for the OS to call home"
        ));
    }
    None
}

/// A copy of `obj` without the metadata the server sets.
pub fn without_server_set(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in SERVER_SET_METADATA {
            meta.remove(f);
        }
    }
    o
}

/// Split an exported object into what a create sends (no server-set
/// metadata, no status for kinds with a status subresource, references to
/// old uids rewritten) and the status to write after it.
pub fn for_create(
    kind: Kind,
    obj: &Value,
    uids: &BTreeMap<String, String>,
) -> (Value, Option<Value>) {
    let mut o = without_server_set(obj);
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
    }
    remap_uids(&mut o, uids);
    let status = if kind.has_status() {
        o.as_object_mut()
            .and_then(|m| m.remove("status"))
            .filter(|s| !s.is_null())
    } else {
        None
    };
    (o, status)
}

/// Rewrite references to the old uids: `metadata.ownerReferences[].uid`
/// and an Event's `involvedObject.uid`. A uid not in `uids` (an owner that
/// was not exported) is left as it is: the garbage collector of a cluster
/// then treats the owner as gone, as it would have been.
pub fn remap_uids(obj: &mut Value, uids: &BTreeMap<String, String>) {
    let swap = |v: Option<&mut Value>| {
        if let Some(v) = v
            && let Some(new) = v.as_str().and_then(|old| uids.get(old))
        {
            *v = Value::String(new.clone());
        }
    };
    if let Some(refs) = obj
        .pointer_mut("/metadata/ownerReferences")
        .and_then(Value::as_array_mut)
    {
        for r in refs {
            swap(r.get_mut("uid"));
        }
    }
    swap(obj.pointer_mut("/involvedObject/uid"));
}

/// Status with its `observedGeneration`s (the object's and each
/// condition's) moved to the recreated object's generation: an object
/// whose status had caught up with its spec (`observedGeneration ==
/// generation`) has caught up after the move too, and one that lagged
/// still lags (by one).
pub fn regenerate(
    mut status: Value,
    old_generation: Option<i64>,
    new_generation: Option<i64>,
) -> Value {
    let (Some(old), Some(new)) = (old_generation, new_generation) else {
        return status;
    };
    let fix = |m: &mut Map<String, Value>| {
        if let Some(g) = m.get("observedGeneration").and_then(Value::as_i64) {
            let moved = if g >= old { new } else { (new - 1).max(0) };
            m.insert("observedGeneration".into(), moved.into());
        }
    };
    if let Some(s) = status.as_object_mut() {
        fix(s);
        if let Some(conds) = s.get_mut("conditions").and_then(Value::as_array_mut) {
            for c in conds.iter_mut().filter_map(Value::as_object_mut) {
                fix(c);
            }
        }
    }
    status
}

/// `metadata.generation` of an object.
pub fn generation(obj: &Value) -> Option<i64> {
    obj.pointer("/metadata/generation").and_then(Value::as_i64)
}

/// `metadata.uid` of an object.
pub fn uid(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/uid").and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine(status: Value) -> Value {
        json!({"metadata": {"name": "m", "namespace": "default"}, "status": status})
    }

    #[test]
    fn settled_and_unsettled_machines() {
        let settled = [
            json!({"phase": "Available"}),
            json!({"phase": "Ready", "boot": {"id": "b", "purpose": "install",
                "completedAt": "t", "outcome": "installed", "bootedAt": "t"}}),
            json!({"phase": "Error", "boot": {"id": "b", "purpose": "install",
                "completedAt": "t", "outcome": "failed"}}),
            json!({"phase": "Available", "boot": {"id": "b", "purpose": "deprovision",
                "completedAt": "t", "outcome": "wiped"}}),
        ];
        for s in settled {
            assert_eq!(unsettled(Kind::Machine, &machine(s.clone())), None, "{s}");
        }
        assert!(unsettled(Kind::Machine, &json!({"metadata": {"name": "m"}})).is_none());
        let cases = [
            (json!({"phase": "Provisioning"}), "phase Provisioning"),
            (json!({"phase": "Reimaging"}), "phase Reimaging"),
            (
                json!({"phase": "Error", "boot": {"id": "b1", "purpose": "install"}}),
                "network boot b1 (install) is open",
            ),
            (
                json!({"phase": "Provisioned", "boot": {"id": "b1", "purpose": "install",
                    "completedAt": "t", "outcome": "installed"}}),
                "network boot b1 (install) installed; waiting for the OS to call home",
            ),
        ];
        for (s, why) in cases {
            assert_eq!(unsettled(Kind::Machine, &machine(s)).as_deref(), Some(why));
        }
        let deleting = json!({"metadata": {"name": "c", "deletionTimestamp": "t"}});
        assert_eq!(
            unsettled(Kind::MachineClass, &deleting).as_deref(),
            Some("being deleted")
        );
    }

    #[test]
    fn create_drops_server_fields_and_status_and_remaps() {
        let obj = json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineSet",
            "metadata": {"name": "s", "uid": "old", "resourceVersion": "9", "generation": 3,
                "creationTimestamp": "t", "managedFields": [], "labels": {"a": "b"},
                "ownerReferences": [{"uid": "owner-old", "name": "o"}, {"uid": "gone", "name": "g"}]},
            "spec": {"replicas": 2}, "status": {"observedGeneration": 3}});
        let uids = BTreeMap::from([("owner-old".to_string(), "owner-new".to_string())]);
        let (create, status) = for_create(Kind::MachineSet, &obj, &uids);
        assert_eq!(
            create,
            json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineSet",
                "metadata": {"name": "s", "labels": {"a": "b"},
                    "ownerReferences": [{"uid": "owner-new", "name": "o"}, {"uid": "gone", "name": "g"}]},
                "spec": {"replicas": 2}})
        );
        assert_eq!(status, Some(json!({"observedGeneration": 3})));
        let (secret, none) = for_create(
            Kind::Secret,
            &json!({"metadata": {"name": "x"}, "data": {}}),
            &uids,
        );
        assert_eq!(none, None);
        assert_eq!(secret["data"], json!({}));
    }

    #[test]
    fn events_follow_their_object() {
        let uids = BTreeMap::from([("m-old".to_string(), "m-new".to_string())]);
        let mut ev = json!({"involvedObject": {"kind": "Machine", "name": "m", "uid": "m-old"}});
        remap_uids(&mut ev, &uids);
        assert_eq!(ev["involvedObject"]["uid"], "m-new");
    }

    #[test]
    fn observed_generations_keep_their_relation() {
        let st = json!({"observedGeneration": 4, "conditions": [
            {"type": "Ready", "observedGeneration": 4}, {"type": "Old", "observedGeneration": 2}]});
        let got = regenerate(st, Some(4), Some(1));
        assert_eq!(
            got,
            json!({"observedGeneration": 1, "conditions": [
                {"type": "Ready", "observedGeneration": 1}, {"type": "Old", "observedGeneration": 0}]})
        );
        let same = json!({"phase": "Ready"});
        assert_eq!(regenerate(same.clone(), Some(2), Some(1)), same);
    }
}
