//! MachineClass: what a node runs (OS image, kubelet, runtime, join settings).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Artifact, ContainerRuntime, SecretReference};
use super::condition::Condition;

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "metalherd.dev",
    version = "v1alpha1",
    kind = "MachineClass",
    namespaced,
    status = "MachineClassStatus",
    shortname = "mc",
    category = "metalherd",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(name = "OS", type_ = "string", json_path = ".spec.image.os"),
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.image.version"),
    printcolumn(
        name = "Kubelet",
        type_ = "string",
        json_path = ".spec.kubernetes.version"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Runtime",
        type_ = "string",
        json_path = ".spec.containerRuntime.name",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachineClassSpec {
    pub image: OsImage,
    pub kubernetes: KubernetesSpec,
    pub container_runtime: ContainerRuntime,
    pub join: JoinSpec,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<UnitSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_authorized_keys: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_args: Vec<String>,
    /// Partitions (by label) kept across reimages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preserve_partitions: Vec<String>,
    /// Extra Ignition fragments merged into the node config.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignition_fragments: Vec<IgnitionFragment>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_taints: Vec<Taint>,
    /// Wipe disks when a machine of this class is deprovisioned.
    #[serde(default)]
    pub wipe_on_deprovision: bool,
    /// BIOS attributes (Redfish `Bios` attribute names and values) set
    /// before each install or reimage: what differs is written to
    /// `Bios/Settings`, the boot applies it, and it is read back after the
    /// install; an attribute the BMC did not apply fails the boot, named.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bios_attributes: BTreeMap<String, String>,
    /// Firmware per component: the version it must run and the update
    /// image. Before each install or reimage a component that reports
    /// another version is updated through Redfish
    /// `UpdateService.SimpleUpdate`, the BMC fetching the image from
    /// metalherd's image cache over boot HTTP; the task is followed to its
    /// end, and after the install the version is read back: a component
    /// still on another version fails the boot, named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub firmware: Vec<FirmwareImage>,
    /// RAID volumes to create before each install or reimage when the BMC
    /// does not report them (by name), through Redfish
    /// `Storage/{id}/Volumes`. A Machine's `rootDeviceHints.volume` names
    /// one as the disk the install writes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeSpec>,
    /// How this class's servers boot the installer (a Machine's own
    /// `spec.boot` wins): `network` (the default) or `virtualMedia`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<super::BootMethod>,
}

/// A RAID volume: its name, level, member drives and size.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeSpec {
    /// The volume's `Name` on the BMC: how metalherd finds it again.
    pub name: String,
    /// Redfish `RAIDType`: `RAID0`, `RAID1`, `RAID5`, `RAID6`, `RAID10`.
    pub raid_type: String,
    /// Which drives of the storage controller become members.
    pub drives: DriveHints,
    /// Capacity in GiB; absent: what the members give.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_gigabytes: Option<u64>,
}

/// Member drives: the first `count` drives, in the BMC's order, that match
/// every hint set (and are in no volume yet).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DriveHints {
    pub count: u32,
    /// `SSD`, `HDD`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size_gigabytes: Option<u64>,
}

/// The RAID levels a volume may have, and the fewest drives each needs.
pub const RAID_TYPES: [(&str, u32); 5] = [
    ("RAID0", 1),
    ("RAID1", 2),
    ("RAID5", 3),
    ("RAID6", 4),
    ("RAID10", 4),
];

/// One firmware component's wanted version and its update image.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FirmwareImage {
    /// `BIOS` (the System's `BiosVersion`), or the `Id` of a member of
    /// the BMC's `UpdateService/FirmwareInventory` (`BMC`, a NIC's, ...).
    pub component: String,
    /// The version the component reports once updated.
    pub version: String,
    /// The update image, pinned by `sha256` or `sha512`.
    pub image: Artifact,
}

/// The `spec.image.os` values metalherd installs: Flatcar Container Linux,
/// Fedora CoreOS, and a CoreOS-style Debian image such as the one
/// `deploy/node-image/` builds.
pub const OS_NAMES: [&str; 3] = ["flatcar", "fedora-coreos", "debian-coreos"];

/// The OS a class installs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OsImage {
    /// `flatcar`, `fedora-coreos` or `debian-coreos` (a CoreOS-style Debian
    /// image built like `deploy/node-image/`).
    pub os: String,
    /// OS release, for example `4230.2.3` (Flatcar) or `42.20250721.3.0` (FCOS).
    pub version: String,
    /// Live kernel the installer boots.
    pub kernel: Artifact,
    /// Live initrd the installer boots.
    pub initrd: Artifact,
    /// The image written to disk (Flatcar `.bin.bz2`, FCOS metal `.raw.xz`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<Artifact>,
    /// Extra live artifacts (FCOS rootfs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<Artifact>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubernetesSpec {
    /// kubelet / kubeadm version, `v1.33.2`.
    pub version: String,
    /// Where the binaries come from: downloaded with sha512 or a sysext image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<Artifact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeadm: Option<Artifact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubectl: Option<Artifact>,
    /// A systemd-sysext image carrying kubelet/kubeadm (Flatcar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sysext: Option<Artifact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containerd: Option<Artifact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cni_plugins: Option<Artifact>,
}

/// How a node joins its cluster with `kubeadm join`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinSpec {
    /// `host:port` of the API server.
    pub api_server_endpoint: String,
    /// `sha256:<hex>` hashes of the cluster CA public key.
    pub ca_cert_hashes: Vec<String>,
    /// Secret holding the bootstrap token (key `token`, `abcdef.0123456789abcdef`).
    pub token_secret_ref: SecretReference,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileSpec {
    pub path: String,
    /// Octal mode as a number (`420` = 0644) .
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contents: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Artifact>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnitSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contents: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropins: Vec<DropinSpec>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DropinSpec {
    pub name: String,
    pub contents: String,
}

/// An Ignition fragment: inline JSON, or a URL pinned by sha512.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IgnitionFragment {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Artifact>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineClassStatus {
    /// Hash of the revision-relevant fields (image, kubelet, runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
