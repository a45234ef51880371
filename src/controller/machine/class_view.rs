//! What a Machine installs from its class: the class as the lifecycle
//! sees it ([`ClassView`]) and the revision a machine should run
//! ([`desired_revision`]), compared with `status.provisionedRevision` to
//! tell whether it is up to date.

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::api::{ContainerRuntime, Machine, MachineClass, OsImage};

/// The Machine's class, as far as the lifecycle cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassView {
    pub name: String,
    /// [`desired_revision`] of the machine with this class; for a set's
    /// machine, the hash of its pinned revision's snapshot.
    pub revision: String,
    /// [`desired_revision`] of the machine with this class: what it
    /// installs, whoever decided it. A machine installed outside a set (or
    /// adopted) records this; claimed by a set whose pinned snapshot
    /// installs the same, it is up to date without a reimage.
    pub installs: String,
    /// The kubelet version a node must report after (re)install.
    pub kubelet_version: String,
    pub wipe_on_deprovision: bool,
}

impl ClassView {
    pub fn new(machine: &Machine, class: &MachineClass) -> ClassView {
        let ov = machine.spec.overrides.as_ref();
        ClassView {
            name: class.metadata.name.clone().unwrap_or_default(),
            revision: desired_revision(machine, class),
            installs: desired_revision(machine, class),
            kubelet_version: ov
                .and_then(|o| o.kubelet_version.clone())
                .unwrap_or_else(|| class.spec.kubernetes.version.clone()),
            wipe_on_deprovision: class.spec.wipe_on_deprovision,
        }
    }
}

#[derive(Serialize)]
struct RevisionInput<'a> {
    image: &'a OsImage,
    kubelet: &'a str,
    runtime: &'a ContainerRuntime,
}

/// The revision a machine should run: a hash of its OS image, kubelet
/// version and container runtime, each taken from the machine's overrides
/// when set, else from its class. Equal inputs give equal revisions; any
/// change gives a new one (16 hex characters).
pub fn desired_revision(machine: &Machine, class: &MachineClass) -> String {
    let ov = machine.spec.overrides.as_ref();
    let input = RevisionInput {
        image: ov
            .and_then(|o| o.image.as_ref())
            .unwrap_or(&class.spec.image),
        kubelet: ov
            .and_then(|o| o.kubelet_version.as_deref())
            .unwrap_or(&class.spec.kubernetes.version),
        runtime: ov
            .and_then(|o| o.container_runtime.as_ref())
            .unwrap_or(&class.spec.container_runtime),
    };
    // Plain structs with string keys: serializing cannot fail.
    let bytes = serde_json::to_vec(&input).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    hex::encode(&digest[..8])
}
