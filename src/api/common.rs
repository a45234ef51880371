//! Small types shared by several objects.

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A reference to another object in the same namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalObjectReference {
    pub name: String,
}

/// A reference to one key of a Secret in the same namespace. When `key` is
/// absent the consumer documents which keys it reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretReference {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A downloadable artifact pinned by its digest: its own `sha256` /
/// `sha512`, or the distribution's checksum file that lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Artifact {
    pub url: String,
    /// Hex sha256 of the content (64 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Hex sha512 of the content (128 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha512: Option<String>,
    /// URL of the distribution's checksum file listing this artifact by
    /// file name, used when neither digest is given: Flatcar's `.DIGESTS`,
    /// a `sha256sum`-style list, or Fedora CoreOS stream metadata JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksums_url: Option<String>,
}

/// The last error a controller hit for an object, readable without logs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastError {
    /// Machine-readable reason, CamelCase (`BmcUnreachable`, `InstallTimeout`).
    pub reason: String,
    pub message: String,
    #[schemars(with = "String")]
    pub time: Timestamp,
}

/// One step of a network boot or install, appended by the boot services and
/// the controller (DHCP offer/ack, TFTP file, script, kernel, initrd,
/// Ignition, call-home).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootEvent {
    #[schemars(with = "String")]
    pub time: Timestamp,
    /// `DHCPOffer`, `DHCPAck`, `TFTP`, `Script`, `Kernel`, `Initrd`,
    /// `Ignition`, `Installed`, `Failed`, `Booted`, ...
    #[schemars(with = "String")]
    pub step: super::BootStep,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The boot this step belongs to (see `MachineStatus::boot`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
}

/// How many boot-history entries a Machine keeps; older ones are dropped.
pub const BOOT_HISTORY_LIMIT: usize = 64;

/// Container runtime selection.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerRuntime {
    /// Only `containerd` is supported today.
    pub name: String,
    pub version: String,
}
