//! Which revision a set's template, with its class as it is now, makes:
//! the snapshot's hash, or the kept revision a `rollout undo` named. The
//! planner finds or makes its update revision from this, and
//! `metalherd rollout status` asks the same question to know which
//! revision's rollout it must follow: a class edited in place changes the
//! answer without changing the set's generation.
//!
//! Pure: no store or clock here.

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::api::machine_set::{MachineSet, UNDO_ANNOTATION};
use crate::api::{MachineClassSpec, MachineOverrides};

#[derive(Serialize)]
struct SnapshotInput<'a> {
    class: &'a str,
    spec: &'a MachineClassSpec,
    overrides: &'a Option<MachineOverrides>,
}

/// Hash of what a revision installs (16 hex characters).
pub fn snapshot_hash(
    class: &str,
    spec: &MachineClassSpec,
    overrides: &Option<MachineOverrides>,
) -> String {
    let input = SnapshotInput {
        class,
        spec,
        overrides,
    };
    // Plain data with string keys: serializing cannot fail.
    let bytes = serde_json::to_vec(&input).unwrap_or_default();
    hex::encode(&Sha256::digest(&bytes)[..8])
}

/// What the template resolves to now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A kept revision named by `rollout undo`, while the template still
    /// equals it (the live class may have moved on since).
    Kept(i64),
    /// The snapshot of the template with the live class: the kept revision
    /// with this hash, or a new one the set will make.
    Snapshot(String),
    /// The class does not exist: nothing new to install.
    ClassMissing,
}

/// The revision the set's template with `class` (the live spec of the class
/// its template names; `None` when it does not exist) makes.
pub fn target(set: &MachineSet, class: Option<&MachineClassSpec>) -> Target {
    let template = &set.spec.template;
    let revisions = set
        .status
        .as_ref()
        .map(|s| s.revisions.as_slice())
        .unwrap_or_default();
    let undo = set
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(UNDO_ANNOTATION))
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|n| {
            revisions.iter().any(|r| {
                r.revision == *n
                    && r.class_name == template.class_ref.name
                    && r.overrides == template.overrides
            })
        });
    match (undo, class) {
        (Some(n), _) => Target::Kept(n),
        (None, Some(spec)) => Target::Snapshot(snapshot_hash(
            &template.class_ref.name,
            spec,
            &template.overrides,
        )),
        (None, None) => Target::ClassMissing,
    }
}

/// Whether the set's recorded status already rolls out `target` (its
/// `updateRevision` is it). A missing class makes nothing new: whatever the
/// status names stands.
pub fn recorded(set: &MachineSet, target: &Target) -> bool {
    let Some(st) = set.status.as_ref() else {
        return matches!(target, Target::ClassMissing);
    };
    match target {
        Target::ClassMissing => true,
        Target::Kept(n) => st.update_revision == Some(*n),
        Target::Snapshot(hash) => st.update_revision.is_some_and(|u| {
            st.revisions
                .iter()
                .any(|r| r.revision == u && &r.hash == hash)
        }),
    }
}
