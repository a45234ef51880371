//! What a set-claimed Machine installs: the snapshot of the revision it is
//! pinned to, not the live class. The Machine controller (to decide whether
//! to reimage) and the boot server (to render iPXE and Ignition) both ask
//! here, so a class edited in place reaches a set's machines only through a
//! new revision rolled in batches, and `undo` can return to an old one.
//!
//! Both ask on every look at a pinned machine, so the set is read lean:
//! only its revisions are decoded, its batches (50 members each, the last
//! ten kept, the bulk of a large set's JSON) are skipped unparsed.

use serde::Deserialize;

use super::{Store, StoreError};
use crate::api::machine_set::{REVISION_LABEL, SET_LABEL, SetRevision};
use crate::api::{Kind, Machine, MachineClass};

/// The part of a MachineSet a pinned machine needs: its revisions.
#[derive(Deserialize)]
struct Revisions {
    #[serde(default)]
    status: Option<RevisionsStatus>,
}

#[derive(Deserialize)]
struct RevisionsStatus {
    #[serde(default)]
    revisions: Vec<SetRevision>,
}

/// The set and revision a machine is pinned to, from its labels.
pub fn pin_of(m: &Machine) -> Option<(&str, i64)> {
    let l = m.metadata.labels.as_ref()?;
    let set = l.get(SET_LABEL)?;
    let rev = l.get(REVISION_LABEL)?.parse().ok()?;
    Some((set.as_str(), rev))
}

/// The class a revision snapshotted, as a MachineClass object.
pub fn snapshot_class(namespace: &str, r: &SetRevision) -> MachineClass {
    let mut c = MachineClass::new(&r.class_name, r.class_spec.clone());
    c.metadata.namespace = Some(namespace.to_string());
    c
}

/// For a pinned machine whose set keeps the revision: the snapshot class
/// and the revision's hash. `None` for a machine no set claims (or whose
/// set or revision is gone): it follows its live class.
pub async fn pinned_class(
    store: &dyn Store,
    m: &Machine,
) -> Result<Option<(MachineClass, String)>, StoreError> {
    let Some((set, rev)) = pin_of(m) else {
        return Ok(None);
    };
    let ns = m.metadata.namespace.as_deref().unwrap_or("default");
    let json = match store.get_json(Kind::MachineSet, ns, set).await {
        Ok(j) => j,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    let s: Revisions = serde_json::from_slice(&json)
        .map_err(|e| StoreError::Malformed(format!("{}: {e}", Kind::MachineSet)))?;
    let found = s
        .status
        .as_ref()
        .and_then(|st| st.revisions.iter().find(|r| r.revision == rev));
    Ok(found.map(|r| (snapshot_class(ns, r), r.hash.clone())))
}
