//! What a Machine installs from its class: the class as the lifecycle
//! sees it ([`ClassView`]) and the revision a machine should run
//! ([`desired_revision`]), compared with `status.provisionedRevision` to
//! tell whether it is up to date.

use std::collections::BTreeMap;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::api::{ContainerRuntime, FirmwareImage, Machine, MachineClass, OsImage, VolumeSpec};

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
    /// BIOS attributes to set before a boot (the class's, the machine's
    /// overrides over them).
    pub bios: BTreeMap<String, String>,
    /// Firmware to update before a boot, per component (the class's).
    pub firmware: Vec<FirmwareImage>,
    /// RAID volumes to create before a boot (the class's).
    pub volumes: Vec<VolumeSpec>,
    /// How the class's servers boot the installer, when it says.
    pub boot: Option<crate::api::BootMethod>,
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
            bios: bios_attributes(machine, class),
            firmware: class.spec.firmware.clone(),
            volumes: class.spec.volumes.clone(),
            boot: class.spec.boot,
        }
    }
}

/// The BIOS attributes a machine wants: its class's, its overrides' over
/// them.
pub fn bios_attributes(machine: &Machine, class: &MachineClass) -> BTreeMap<String, String> {
    let mut all = class.spec.bios_attributes.clone();
    if let Some(o) = &machine.spec.overrides {
        all.extend(o.bios_attributes.clone());
    }
    all
}

#[derive(Serialize)]
struct RevisionInput<'a> {
    image: &'a OsImage,
    kubelet: &'a str,
    runtime: &'a ContainerRuntime,
    /// Absent when empty, so revisions without BIOS settings keep the
    /// names they had before BIOS settings existed.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    bios: BTreeMap<String, String>,
    /// Absent when empty, as `bios`.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    firmware: &'a [FirmwareImage],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    volumes: &'a [VolumeSpec],
}

/// The revision a machine should run: a hash of its OS image, kubelet
/// version, container runtime, BIOS attributes, firmware and volumes, each taken from the machine's overrides
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
        bios: bios_attributes(machine, class),
        firmware: &class.spec.firmware,
        volumes: &class.spec.volumes,
    };
    // Plain structs with string keys: serializing cannot fail.
    let bytes = serde_json::to_vec(&input).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    hex::encode(&digest[..8])
}
