//! Recreate a [`Snapshot`] in a store: create each object, then write its
//! status through the status subresource (a create drops status, as a
//! kube-apiserver does), kinds in [`IMPORT_ORDER`].
//!
//! New uids: every created object gets one from the target, and references
//! to the old ones are rewritten ([`remap_uids`]): ownerReferences and
//! Events' `involvedObject.uid`. An ownerReference to an object created
//! later in the import is fixed by an update once that object exists.
//! MachineSets claim Machines by label, not uid, so claims carry over as
//! they are. Per-boot tokens are `HMAC(key, uid | boot id)`: every token
//! minted before the move dies with the old uid, which is why export
//! refuses Machines in the middle of a boot ([`super::objects::unsettled`]);
//! a settled Machine has no token in use, and its next boot mints one with
//! the new uid and the target's key.
//!
//! A Machine is created paused (`metalherd.dev/paused`), gets its status,
//! then loses the annotation again (unless it was paused in the file), so
//! a controller already running on the target never acts on a Machine
//! whose status has not arrived yet. That is three writes per Machine;
//! objects of other kinds take one or two.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::objects::{IMPORT_ORDER, describe, for_create, generation, regenerate, remap_uids, uid};
use super::{BackupError, Snapshot};
use crate::api::{Kind, PAUSED_ANNOTATION};
use crate::store::{ListOptions, Store, key_of};

/// What an import did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Imported {
    /// Objects created, per kind, in import order.
    pub created: Vec<(Kind, usize)>,
    /// Old uid -> new uid.
    pub uids: BTreeMap<String, String>,
}

/// Refuse a target that holds any object of the snapshot already; with
/// `must_be_empty`, one that holds anything at all (a restore).
pub async fn check_target(
    store: &dyn Store,
    snap: &Snapshot,
    must_be_empty: bool,
) -> Result<(), BackupError> {
    let wanted: BTreeSet<(Kind, String, String)> = snap
        .items
        .iter()
        .map(|(k, o)| {
            let (ns, name) = key_of(o);
            (*k, ns, name)
        })
        .collect();
    let mut there = Vec::new();
    let mut total = 0;
    for kind in IMPORT_ORDER {
        let list = store
            .list(kind, &ListOptions::default())
            .await
            .map_err(BackupError::store(format!(
                "list {} in the target",
                kind.plural()
            )))?;
        total += list.items.len();
        for o in &list.items {
            let (ns, name) = key_of(o);
            if wanted.contains(&(kind, ns, name)) {
                there.push(format!("  {}", describe(kind, o)));
            }
        }
    }
    if must_be_empty && total > 0 {
        return Err(BackupError::NotEmpty(total));
    }
    if !there.is_empty() {
        return Err(BackupError::Exists(there));
    }
    Ok(())
}

/// Create every object of `snap` in `store` (checked by [`check_target`]
/// first), status included.
pub async fn import(store: &dyn Store, snap: &Snapshot) -> Result<Imported, BackupError> {
    let old_uids: BTreeSet<String> = snap
        .items
        .iter()
        .filter_map(|(_, o)| uid(o))
        .map(str::to_string)
        .collect();
    let mut done = Imported::default();
    // Objects whose ownerReferences named an owner not yet created.
    let mut late_owners = Vec::new();
    for kind in IMPORT_ORDER {
        let mut n = 0;
        for (_, obj) in snap.items.iter().filter(|(k, _)| *k == kind) {
            let what = describe(kind, obj);
            let created = create_one(store, kind, obj, &done.uids)
                .await
                .map_err(BackupError::store(format!("create {what}")))?;
            if let (Some(old), Some(new)) = (uid(obj), uid(&created)) {
                done.uids.insert(old.to_string(), new.to_string());
            }
            if owner_uids(obj).any(|u| old_uids.contains(u) && !done.uids.contains_key(u)) {
                late_owners.push((kind, key_of(obj)));
            }
            n += 1;
        }
        if n > 0 {
            done.created.push((kind, n));
        }
    }
    for (kind, (ns, name)) in late_owners {
        let uids = &done.uids;
        crate::store::modify::modify(
            store,
            kind,
            &ns,
            &name,
            crate::store::modify::Target::Object,
            crate::store::modify::ATTEMPTS,
            |cur| {
                Ok::<_, crate::store::StoreError>(cur.map(|mut o| {
                    remap_uids(&mut o, uids);
                    o
                }))
            },
        )
        .await
        .map_err(BackupError::store(format!(
            "remap the owners of {} {ns}/{name}",
            kind.singular()
        )))?;
    }
    Ok(done)
}

fn owner_uids(obj: &Value) -> impl Iterator<Item = &str> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uid").and_then(Value::as_str))
}

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a Value> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
}

/// Create one object and write its status; a Machine is paused meanwhile.
async fn create_one(
    store: &dyn Store,
    kind: Kind,
    obj: &Value,
    uids: &BTreeMap<String, String>,
) -> Result<Value, crate::store::StoreError> {
    let (mut create, status) = for_create(kind, obj, uids);
    let pause =
        kind == Kind::Machine && status.is_some() && annotation(obj, PAUSED_ANNOTATION).is_none();
    if pause {
        let meta = &mut create["metadata"];
        if !meta["annotations"].is_object() {
            meta["annotations"] = Value::Object(Default::default());
        }
        meta["annotations"][PAUSED_ANNOTATION] = Value::String("true".into());
    }
    let mut created = store.create(kind, create).await?;
    if let Some(status) = status {
        created["status"] = regenerate(status, generation(obj), generation(&created));
        created = store.update_status(kind, created).await?;
    }
    if pause {
        if let Some(a) = created
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            a.remove(PAUSED_ANNOTATION);
            if a.is_empty()
                && let Some(m) = created["metadata"].as_object_mut()
            {
                m.remove("annotations");
            }
        }
        created = store.update(kind, created).await?;
    }
    Ok(created)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::export::{ExportOptions, from_store};
    use crate::store::memory::MemoryStore;
    use serde_json::json;

    fn machine(name: &str) -> Value {
        json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
            "metadata": {"name": name, "namespace": "default", "uid": format!("old-{name}"),
                "resourceVersion": "3", "generation": 2, "labels": {"rack": "r1"}},
            "spec": {"bmc": {"address": "ipmi://10.0.0.1", "credentialsSecretRef": {"name": "bmc"}}},
            "status": {"phase": "Ready", "observedGeneration": 2}})
    }

    #[tokio::test]
    async fn recreates_with_status_new_uids_and_remapped_references() {
        let event = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "m1.1", "namespace": "default", "uid": "old-ev"},
            "involvedObject": {"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
                "namespace": "default", "name": "m1", "uid": "old-m1"},
            "type": "Normal", "reason": "Ready", "message": "ready", "count": 1});
        let mut set = json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineSet",
            "metadata": {"name": "s", "namespace": "default", "uid": "old-s",
                "ownerReferences": [{"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
                    "name": "m1", "uid": "old-m1"}]},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"rack": "r1"}},
                "template": {"classRef": {"name": "c"}}}});
        set["spec"]["template"] = json!({"spec": {"classRef": {"name": "c"}}});
        let snap = Snapshot {
            resource_version: "9".into(),
            items: vec![(Kind::Event, event), (Kind::Machine, machine("m1"))],
        };
        let target = MemoryStore::new();
        check_target(&target, &snap, true).await.unwrap();
        let done = import(&target, &snap).await.unwrap();
        assert_eq!(done.created, vec![(Kind::Machine, 1), (Kind::Event, 1)]);
        let m = target.get(Kind::Machine, "default", "m1").await.unwrap();
        assert_eq!(m["status"]["phase"], "Ready");
        assert_eq!(
            m["status"]["observedGeneration"],
            m["metadata"]["generation"]
        );
        assert!(m["metadata"].get("annotations").is_none(), "{m}");
        let new_uid = m["metadata"]["uid"].as_str().unwrap();
        assert_ne!(new_uid, "old-m1");
        assert_eq!(done.uids["old-m1"], new_uid);
        let ev = target.get(Kind::Event, "default", "m1.1").await.unwrap();
        assert_eq!(ev["involvedObject"]["uid"], new_uid);
        // Importing again: every object is named as already there.
        let e = check_target(&target, &snap, false).await.unwrap_err();
        assert!(e.to_string().contains("machine default/m1"), "{e}");
        assert!(matches!(
            check_target(&target, &snap, true).await,
            Err(BackupError::NotEmpty(2))
        ));
        // An export of the target holds the same objects.
        let again = from_store(
            &target,
            ExportOptions {
                events: true,
                force: false,
                cluster: false,
            },
        )
        .await
        .unwrap();
        assert_eq!(again.items.len(), 2);
    }

    #[tokio::test]
    async fn a_paused_machine_stays_paused() {
        let mut m = machine("m2");
        m["metadata"]["annotations"] = json!({PAUSED_ANNOTATION: "true"});
        let snap = Snapshot {
            resource_version: String::new(),
            items: vec![(Kind::Machine, m)],
        };
        let target = MemoryStore::new();
        import(&target, &snap).await.unwrap();
        let got = target.get(Kind::Machine, "default", "m2").await.unwrap();
        assert_eq!(got["metadata"]["annotations"][PAUSED_ANNOTATION], "true");
        assert_eq!(got["status"]["phase"], "Ready");
    }
}
