//! Which server a MetalherdMachine claims, and what claiming and releasing
//! change on it. Pure: the caller reads the Machines and writes the one
//! returned, with its resourceVersion as a precondition, so two
//! MetalherdMachines racing for one server cannot both win (the loser's
//! write is refused with a conflict and it picks again).
//!
//! The reuse rule: a server a MetalherdMachine releases keeps its disks
//! and is powered off, labelled [`RELEASED_FROM_LABEL`] with the Cluster
//! API owner of the machine that ran on it (its KubeadmControlPlane or
//! MachineDeployment). A new MetalherdMachine of the same owner takes such
//! a server first, and metalherd reinstalls it in place (a reimage: the
//! class's preserved partitions survive). Then servers never installed,
//! then any other free server; by name within each group.

use std::collections::BTreeMap;

use crate::api::machine::{PAUSED_ANNOTATION as MACHINE_PAUSED, REIMAGE_ANNOTATION};
use crate::api::{LocalObjectReference, Machine, MachinePhase, SET_LABEL, SecretReference};
use crate::store::selector::Selector;

use super::api::{CLAIM_LABEL, MetalherdMachineSpecFields, RELEASED_FROM_LABEL, claim_label_value};

/// Annotation on a claimed server: the full name of its MetalherdMachine.
pub const CLAIMED_BY_ANNOTATION: &str = "infrastructure.cluster.x-k8s.io/claimed-by";
/// Prefix of the reimage requests a claim makes.
pub const REIMAGE_PREFIX: &str = "cluster-api:";

/// Why no server could be claimed (a condition's message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolShort {
    /// Machines the selector matches.
    pub matching: usize,
    /// Of those, claimed by another MetalherdMachine or a MachineSet.
    pub claimed: usize,
    /// Of those, paused or being deleted.
    pub unusable: usize,
}

impl std::fmt::Display for PoolShort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no free server: {} Machines match hostSelector, {} claimed, {} paused or deleting",
            self.matching, self.claimed, self.unusable
        )
    }
}

/// The server already claimed by the MetalherdMachine `name`, if any.
pub fn claimed_by<'a>(machines: &'a [Machine], name: &str) -> Option<&'a Machine> {
    let label = claim_label_value(name);
    machines.iter().find(|m| {
        labels(m).get(CLAIM_LABEL) == Some(&label)
            && annotations(m)
                .get(CLAIMED_BY_ANNOTATION)
                .is_none_or(|full| full == name)
    })
}

/// Pick a server for a MetalherdMachine whose Cluster API owner is
/// `owner` (`KubeadmControlPlane/cp` or `MachineDeployment/md`).
pub fn pick<'a>(
    machines: &'a [Machine],
    selector: &Selector,
    owner: Option<&str>,
) -> Result<&'a Machine, PoolShort> {
    let mut short = PoolShort {
        matching: 0,
        claimed: 0,
        unusable: 0,
    };
    let mut free: Vec<&Machine> = Vec::new();
    for m in machines {
        if !selector.matches_labels(labels(m)) {
            continue;
        }
        short.matching += 1;
        if labels(m).contains_key(CLAIM_LABEL) || labels(m).contains_key(SET_LABEL) {
            short.claimed += 1;
        } else if annotations(m).contains_key(MACHINE_PAUSED)
            || m.metadata.deletion_timestamp.is_some()
            || m.spec.externally_provisioned
        {
            short.unusable += 1;
        } else {
            free.push(m);
        }
    }
    let rank = |m: &Machine| {
        let reuse = owner
            .is_some_and(|o| labels(m).get(RELEASED_FROM_LABEL).map(String::as_str) == Some(o));
        let fresh = m.spec.class_ref.is_none();
        (!reuse, !fresh, m.metadata.name.clone())
    };
    free.sort_by_key(|m| rank(m));
    free.first().copied().ok_or(short)
}

/// Whether the server was installed before (a claim then reinstalls it).
pub fn was_installed(m: &Machine) -> bool {
    m.spec.class_ref.is_some()
        || m.status.as_ref().is_some_and(|s| {
            s.provisioned_revision.is_some()
                || matches!(s.phase, Some(MachinePhase::Ready | MachinePhase::Reimaging))
        })
}

/// The server as claimed by MetalherdMachine `name` (uid-free, so the claim
/// reads the same after `clusterctl move`): class, overrides, bootstrap
/// data, powered on, and a reimage request when it was installed before.
/// Returns whether it reuses a server released by the same owner.
pub fn claim(
    m: &mut Machine,
    name: &str,
    fields: &MetalherdMachineSpecFields,
    bootstrap_secret: &str,
    owner: Option<&str>,
) -> bool {
    let reused =
        owner.is_some_and(|o| labels(m).get(RELEASED_FROM_LABEL).map(String::as_str) == Some(o));
    let reinstall = was_installed(m);
    let l = m.metadata.labels.get_or_insert_with(BTreeMap::new);
    l.insert(CLAIM_LABEL.into(), claim_label_value(name));
    l.remove(RELEASED_FROM_LABEL);
    let a = m.metadata.annotations.get_or_insert_with(BTreeMap::new);
    a.insert(CLAIMED_BY_ANNOTATION.into(), name.into());
    if reinstall {
        a.insert(
            REIMAGE_ANNOTATION.into(),
            format!("{REIMAGE_PREFIX}{name}/{bootstrap_secret}"),
        );
    }
    m.spec.class_ref = Some(LocalObjectReference {
        name: fields.class_ref.name.clone(),
    });
    m.spec.overrides = fields.overrides.clone();
    m.spec.bootstrap_data_secret_ref = Some(SecretReference {
        name: bootstrap_secret.into(),
        key: None,
    });
    m.spec.online = true;
    reused
}

/// The server as released: unclaimed, powered off with its disks as they
/// are, remembered for its owner. The class stays, so metalherd does not
/// wipe it; the bootstrap data goes (it held a join token).
pub fn release(m: &mut Machine, owner: Option<&str>) {
    let l = m.metadata.labels.get_or_insert_with(BTreeMap::new);
    l.remove(CLAIM_LABEL);
    match owner {
        Some(o) => {
            l.insert(RELEASED_FROM_LABEL.into(), o.into());
        }
        None => {
            l.remove(RELEASED_FROM_LABEL);
        }
    }
    if let Some(a) = m.metadata.annotations.as_mut() {
        a.remove(CLAIMED_BY_ANNOTATION);
    }
    m.spec.bootstrap_data_secret_ref = None;
    m.spec.online = false;
}

/// Whether the claimed server finished installing for this claim: Ready,
/// and any reimage the claim asked for already acted on.
pub fn provisioned(m: &Machine) -> bool {
    let Some(s) = m.status.as_ref() else {
        return false;
    };
    if s.phase != Some(MachinePhase::Ready) {
        return false;
    }
    match annotations(m).get(REIMAGE_ANNOTATION) {
        Some(want) if want.starts_with(REIMAGE_PREFIX) => {
            s.progress.reimage_request.as_ref() == Some(want)
        }
        _ => true,
    }
}

/// A label value for an owner: `KubeadmControlPlane.cp` style, cut to
/// a label value's 63 characters.
pub fn owner_label(kind: &str, name: &str) -> String {
    let mut v = format!("{kind}.{name}");
    v.truncate(63);
    v.trim_end_matches(['.', '-', '_']).to_string()
}

fn labels(m: &Machine) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    m.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

fn annotations(m: &Machine) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    m.metadata.annotations.as_ref().unwrap_or(&EMPTY)
}

#[cfg(test)]
mod tests;
