//! Machine: one physical server and its BMC.

use std::collections::BTreeMap;

use jiff::Timestamp;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    BootEvent, ContainerRuntime, LastError, LocalObjectReference, SecretReference,
};
use super::condition::Condition;
use super::machine_class::OsImage;
use super::progress::BootProgress;

/// Finalizer that keeps a Machine until it is deprovisioned.
pub const FINALIZER: &str = "metalherd.dev/machine";
/// Annotation asking for a reimage; a new value asks again.
pub const REIMAGE_ANNOTATION: &str = "metalherd.dev/reimage";
/// Annotation asking for a power cycle through the BMC of a Ready machine;
/// a new value asks again. A MachineSet's remediation sets it (the value
/// says why); so may a person.
pub const POWER_CYCLE_ANNOTATION: &str = "metalherd.dev/power-cycle";
/// Annotation that pauses a Machine (as Metal3's `baremetalhost.metal3.io/
/// paused` and Cluster API's `cluster.x-k8s.io/paused` do): while it is
/// present, whatever its value, the Machine is validated and shown but the
/// controller makes no BMC call and no boot for it.
pub const PAUSED_ANNOTATION: &str = "metalherd.dev/paused";

impl Machine {
    /// Whether [`PAUSED_ANNOTATION`] is set.
    pub fn is_paused(&self) -> bool {
        self.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(PAUSED_ANNOTATION))
    }
}

/// A physical server: how to reach its BMC, how it boots, which class it runs.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "metalherd.dev",
    version = "v1alpha1",
    kind = "Machine",
    namespaced,
    status = "MachineStatus",
    shortname = "mach",
    category = "metalherd",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Power", type_ = "string", json_path = ".status.powerState"),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.nodeRef.name"),
    printcolumn(name = "Class", type_ = "string", json_path = ".spec.classRef.name"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "BMC",
        type_ = "string",
        json_path = ".spec.bmc.address",
        priority = 1
    ),
    printcolumn(
        name = "MAC",
        type_ = "string",
        json_path = ".spec.bootMACAddress",
        priority = 1
    ),
    printcolumn(
        name = "Address",
        type_ = "string",
        json_path = ".spec.network.address",
        priority = 1
    ),
    printcolumn(
        name = "Error",
        type_ = "string",
        json_path = ".status.lastError.reason",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachineSpec {
    pub bmc: BmcSpec,
    /// MAC address of the NIC the server PXE-boots from. Learned from
    /// Redfish inventory when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "bootMACAddress")]
    #[schemars(regex(pattern = r"^[0-9A-Fa-f]{2}([:-][0-9A-Fa-f]{2}){5}$"))]
    pub boot_mac_address: Option<String>,
    /// Firmware boot mode used for network boot overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_mode: Option<BootMode>,
    /// Whether the server's firmware enforces Secure Boot. A Secure Boot
    /// server is handed the boot DHCP's `secureBootFiles` (the signed shim,
    /// then signed GRUB and a signed kernel) instead of iPXE. Absent: as the
    /// BMC reports it (`status.inventory.secureBoot`, from Redfish's
    /// SecureBoot resource), off when it reports nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_boot: Option<bool>,
    /// How the server boots its installer: over the network (DHCP, then
    /// iPXE or the signed shim) or from an ISO metalherd builds and inserts
    /// into the BMC's Redfish virtual CD (`virtualMedia`: no DHCP or PXE
    /// needed; the live system takes `spec.network`'s static address).
    /// Absent: as the class says, else `network`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<BootMethod>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<MachineNetwork>,
    /// The MachineClass this server should run; absent means "keep it
    /// Available".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_ref: Option<LocalObjectReference>,
    /// Per-machine overrides of the class's versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<MachineOverrides>,
    /// The node's join comes from this Secret, written by a Cluster API
    /// bootstrap provider (keys `value` and `format`, `format: ignition`):
    /// merged into the node config instead of metalherd's own `kubeadm
    /// join` and the class's `join`. Set by metalherd's Cluster API
    /// provider when a MetalherdMachine claims this server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_data_secret_ref: Option<SecretReference>,
    /// Desired power state while the machine is not being provisioned.
    #[serde(default)]
    pub online: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_device_hints: Option<RootDeviceHints>,
    /// The server already runs its OS, installed outside metalherd
    /// (adoption): metalherd registers it (inventory, power state) and
    /// records its class's revision as installed, without a power action,
    /// a boot or an install; a later class or revision change reimages it
    /// as any other.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub externally_provisioned: bool,
    /// Power-cycle, then reimage, this machine when its Node stays
    /// NotReady (a standalone Machine; a MachineSet's policy rules the
    /// machines it claims). `maxUnhealthy` and `ProbeFailing` are a set's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<super::RemediationPolicy>,
}

/// How to reach a server's BMC.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BmcSpec {
    /// `redfish+https://host[:port]/redfish/v1/Systems/ID`,
    /// `redfish+http://...` or `ipmi://host[:port]`.
    pub address: String,
    /// Secret with keys `username` and `password`.
    pub credentials_secret_ref: SecretReference,
    /// PEM CA bundle that signs the BMC's certificate (Redfish over https).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// Skip TLS verification. Off by default; an explicit, visible choice.
    #[serde(default)]
    pub insecure_skip_verify: bool,
    /// IPMI cipher suite (3 or 17); 17 by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = [3, 17]))]
    pub cipher_suite: Option<u8>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum BootMode {
    #[default]
    #[serde(rename = "UEFI")]
    Uefi,
    Legacy,
}

/// How a server boots its installer (`spec.boot` of a Machine or class).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum BootMethod {
    /// DHCP and PXE (iPXE, or shim and GRUB under Secure Boot).
    #[default]
    Network,
    /// An ISO inserted through Redfish `VirtualMedia`, booted once from CD.
    VirtualMedia,
}

/// Static network settings of the provisioned server.
// The CEL rule repeats the gateway check of src/api/validate/machine.rs, so
// a cluster's API server refuses a gateway outside the subnet with the same
// words (the syntax of each field is left to the webhook).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.address) || !has(self.gateway) || !isCIDR(self.address) || !isIP(self.gateway) || cidr(self.address).containsIP(self.gateway)",
    "fieldPath": ".gateway",
    "messageExpression": "self.gateway + ' is outside the subnet of spec.network.address ' + self.address",
}]))]
pub struct MachineNetwork {
    /// Address with prefix length, `10.0.0.7/24`.
    // The length bounds keep the CEL rule's estimated cost within
    // kube-apiserver's budget; the longest IPv6 address with a prefix is 43
    // characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub gateway: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

/// Per-machine overrides of what the class says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachineOverrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<OsImage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<ContainerRuntime>,
    /// BIOS attributes over the class's (same name: this value wins).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bios_attributes: BTreeMap<String, String>,
}

/// Which disk to install to; all given hints must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RootDeviceHints {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size_gigabytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotational: Option<bool>,
    /// The name of a RAID volume the class creates: the install writes the
    /// disk that is that volume (found by the WWN the BMC reports for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
}

/// Lifecycle phase of a Machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MachinePhase {
    #[default]
    Registering,
    Available,
    Provisioning,
    Provisioned,
    Ready,
    Reimaging,
    Deprovisioning,
    Error,
}

impl MachinePhase {
    /// Every phase, in lifecycle order.
    pub const ALL: [MachinePhase; 8] = [
        MachinePhase::Registering,
        MachinePhase::Available,
        MachinePhase::Provisioning,
        MachinePhase::Provisioned,
        MachinePhase::Ready,
        MachinePhase::Reimaging,
        MachinePhase::Deprovisioning,
        MachinePhase::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MachinePhase::Registering => "Registering",
            MachinePhase::Available => "Available",
            MachinePhase::Provisioning => "Provisioning",
            MachinePhase::Provisioned => "Provisioned",
            MachinePhase::Ready => "Ready",
            MachinePhase::Reimaging => "Reimaging",
            MachinePhase::Deprovisioning => "Deprovisioning",
            MachinePhase::Error => "Error",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PowerState {
    On,
    Off,
    #[default]
    Unknown,
}

/// What the controller and the boot services observed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<MachinePhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_state: Option<PowerState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<Inventory>,
    /// Names of the BMC quirk entries (built-in or from the config's
    /// `bmc.quirks`) the driver applies to this Machine's BMC.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bmc_quirks: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<MachineAddress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ref: Option<LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<ObservedVersions>,
    /// Hash of the revision (image, kubelet, runtime + overrides) last installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned_revision: Option<String>,
    /// What that install put on the server (image, versions, BIOS), as a
    /// hash, whatever named the revision (a set names it by its snapshot):
    /// a machine a deleted set leaves behind still runs what its class
    /// installs and is not reimaged for the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<LastError>,
    /// The BIOS attributes as the BMC last reported them (read before and
    /// after each install or reimage whose class sets some).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios: Option<BiosStatus>,
    /// Firmware versions as the BMC last reported them, per component
    /// (read before and after each install or reimage whose class names
    /// firmware).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<FirmwareStatus>,
    /// The storage volumes the BMC last reported (read before and after
    /// each install or reimage whose class creates some).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<VolumesStatus>,
    /// Under `spec.remediation`: since when the machine is unhealthy, why,
    /// and the actions taken (gone once it recovered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<super::MachineRemediation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub boot_history: Vec<BootEvent>,
    /// The network boot in progress (or last completed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<BootRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    // Stored as a map of strings: see `super::progress`.
    /// Controller bookkeeping that must survive restarts (step markers).
    #[serde(default, skip_serializing_if = "BootProgress::is_empty")]
    #[schemars(with = "BTreeMap<String, String>")]
    pub progress: BootProgress,
}

/// BIOS attributes read from the BMC (values as text).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BiosStatus {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
    #[schemars(with = "String")]
    pub read_at: Timestamp,
}

/// Firmware versions read from the BMC, per component.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FirmwareStatus {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub versions: BTreeMap<String, String>,
    #[schemars(with = "String")]
    pub read_at: Timestamp,
}

/// Storage volumes read from the BMC.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumesStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeInfo>,
    #[schemars(with = "String")]
    pub read_at: Timestamp,
}

/// One volume as the BMC reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeInfo {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raid_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    /// The WWN (NAA durable name) the host sees the volume's disk by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn: Option<String>,
}

/// One network boot: minted by the controller before it powers the server,
/// so a restart never mints a second one for the same boot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootRecord {
    /// Unique id of this boot.
    pub id: String,
    /// `install`, `reimage`, `deprovision`.
    #[schemars(with = "String")]
    pub purpose: super::BootPurpose,
    /// The revision this boot installs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    #[schemars(with = "String")]
    pub minted_at: Timestamp,
    /// Set when the Ignition config was handed out for this boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub ignition_served_at: Option<Timestamp>,
    /// Set when the boot completed (installed or failed); the token dies then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub completed_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub outcome: Option<super::BootOutcome>,
    /// Set when the installed OS of this boot called home `booted` (taken
    /// once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub booted_at: Option<Timestamp>,
    /// The configs of this boot handed out in full (`install`, `node`, `wipe`):
    /// each is served once, so a second complete fetch is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub configs_served: Vec<ServedConfig>,
}

/// One config of a boot, handed out in full.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServedConfig {
    /// `install`, `node` or `wipe`.
    pub stage: String,
    /// The address it went to.
    pub address: String,
    #[schemars(with = "String")]
    pub at: Timestamp,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineAddress {
    /// `InternalIP`, `Hostname`, `BMC`.
    #[serde(rename = "type")]
    pub type_: String,
    pub address: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservedVersions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_image: Option<String>,
}

/// Hardware inventory as read from the BMC.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<NicInfo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<DiskInfo>,
    /// Whether the firmware enforces Secure Boot (Redfish `SecureBoot`:
    /// `SecureBootEnable`); absent when the BMC does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_boot: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuInfo {
    #[serde(default)]
    pub count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NicInfo {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub mac: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_up: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_mbps: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskInfo {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotational: Option<bool>,
}
