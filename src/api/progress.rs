//! `status.progress`: the step markers the Machine controller leaves so that
//! a restart (or a new leader) resumes a boot where it was instead of
//! repeating a power cycle, a drain or a boot-device change. Boot HTTP
//! reads two of them (`powerCycledFor`, `poweredAt`) to decide whether a
//! server may be handed its config.
//!
//! On the wire it is what it always was: an object of camelCase keys to
//! strings (`"attempts": "2"`, `"poweredAt": "2026-11-26T20:15:00Z"`), so a
//! status written before this type existed reads unchanged, and the CRD
//! schema stays a map of strings. Reading is lenient per field: a value that
//! does not parse (a hand-edited status) reads as absent, as the string map's
//! getters treated it, rather than failing the whole Machine. Keys this
//! version does not know are dropped on the next write.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::MachinePhase;

/// The markers; each is absent until the step it records has happened.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootProgress {
    /// Boot id the server was power-cycled (or powered on) for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_cycled_for: Option<String>,
    /// When that happened; the install deadline runs from here.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "text")]
    pub powered_at: Option<Timestamp>,
    /// When the server was last asked to power off: later looks only look
    /// until a whole `poll` has passed.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "text")]
    pub power_off_at: Option<Timestamp>,
    /// Boot id after whose install the boot device was set to the disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_boot_for: Option<String>,
    /// Boot id whose reimage already cordoned, drained and deleted the Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_removed_for: Option<String>,
    /// The boot that was current when this provisioning or reimage began
    /// (`none` when there was none); only boots other than it belong to
    /// the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_boot: Option<String>,
    /// The reimage annotation value already acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reimage_request: Option<String>,
    /// The power-cycle annotation value already acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_cycle_request: Option<String>,
    /// Boot id before whose power-on the BIOS settings were written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios_written_for: Option<String>,
    /// Boot id before whose power-on the firmware updates ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware_updated_for: Option<String>,
    /// Boot id before whose power-on the missing volumes were created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes_created_for: Option<String>,
    /// Failed boots in a row.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "text")]
    pub attempts: Option<u32>,
    /// Do not retry before this time.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "text")]
    pub retry_at: Option<Timestamp>,
    /// The phase an `Error` returns to when retried.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "text")]
    pub error_from: Option<MachinePhase>,
}

/// One marker and its value: what the controller's plan sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mark {
    PowerCycledFor(String),
    PoweredAt(Timestamp),
    PowerOffAt(Timestamp),
    DiskBootFor(String),
    NodeRemovedFor(String),
    PreviousBoot(String),
    ReimageRequest(String),
    PowerCycleRequest(String),
    BiosWrittenFor(String),
    FirmwareUpdatedFor(String),
    VolumesCreatedFor(String),
    Attempts(u32),
    RetryAt(Timestamp),
    ErrorFrom(MachinePhase),
}

/// A marker's name: what the controller's plan clears.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MarkKey {
    PowerCycledFor,
    PoweredAt,
    PowerOffAt,
    DiskBootFor,
    NodeRemovedFor,
    PreviousBoot,
    ReimageRequest,
    PowerCycleRequest,
    BiosWrittenFor,
    FirmwareUpdatedFor,
    VolumesCreatedFor,
    Attempts,
    RetryAt,
    ErrorFrom,
}

impl MarkKey {
    /// The key in `status.progress`.
    pub fn as_str(self) -> &'static str {
        match self {
            MarkKey::PowerCycledFor => "powerCycledFor",
            MarkKey::PoweredAt => "poweredAt",
            MarkKey::PowerOffAt => "powerOffAt",
            MarkKey::DiskBootFor => "diskBootFor",
            MarkKey::NodeRemovedFor => "nodeRemovedFor",
            MarkKey::PreviousBoot => "previousBoot",
            MarkKey::ReimageRequest => "reimageRequest",
            MarkKey::PowerCycleRequest => "powerCycleRequest",
            MarkKey::BiosWrittenFor => "biosWrittenFor",
            MarkKey::FirmwareUpdatedFor => "firmwareUpdatedFor",
            MarkKey::VolumesCreatedFor => "volumesCreatedFor",
            MarkKey::Attempts => "attempts",
            MarkKey::RetryAt => "retryAt",
            MarkKey::ErrorFrom => "errorFrom",
        }
    }
}

impl fmt::Display for MarkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Mark {
    pub fn key(&self) -> MarkKey {
        match self {
            Mark::PowerCycledFor(_) => MarkKey::PowerCycledFor,
            Mark::PoweredAt(_) => MarkKey::PoweredAt,
            Mark::PowerOffAt(_) => MarkKey::PowerOffAt,
            Mark::DiskBootFor(_) => MarkKey::DiskBootFor,
            Mark::NodeRemovedFor(_) => MarkKey::NodeRemovedFor,
            Mark::PreviousBoot(_) => MarkKey::PreviousBoot,
            Mark::ReimageRequest(_) => MarkKey::ReimageRequest,
            Mark::PowerCycleRequest(_) => MarkKey::PowerCycleRequest,
            Mark::BiosWrittenFor(_) => MarkKey::BiosWrittenFor,
            Mark::FirmwareUpdatedFor(_) => MarkKey::FirmwareUpdatedFor,
            Mark::VolumesCreatedFor(_) => MarkKey::VolumesCreatedFor,
            Mark::Attempts(_) => MarkKey::Attempts,
            Mark::RetryAt(_) => MarkKey::RetryAt,
            Mark::ErrorFrom(_) => MarkKey::ErrorFrom,
        }
    }
}

/// `key=value`, as stored.
impl fmt::Display for Mark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=", self.key())?;
        match self {
            Mark::PowerCycledFor(s)
            | Mark::DiskBootFor(s)
            | Mark::NodeRemovedFor(s)
            | Mark::PreviousBoot(s)
            | Mark::ReimageRequest(s)
            | Mark::PowerCycleRequest(s)
            | Mark::BiosWrittenFor(s)
            | Mark::FirmwareUpdatedFor(s)
            | Mark::VolumesCreatedFor(s) => f.write_str(s),
            Mark::PoweredAt(t) | Mark::PowerOffAt(t) | Mark::RetryAt(t) => write!(f, "{t}"),
            Mark::Attempts(n) => write!(f, "{n}"),
            Mark::ErrorFrom(p) => f.write_str(p.as_str()),
        }
    }
}

impl BootProgress {
    pub fn is_empty(&self) -> bool {
        *self == BootProgress::default()
    }

    /// Record `mark`, replacing its earlier value.
    pub fn set(&mut self, mark: Mark) {
        match mark {
            Mark::PowerCycledFor(s) => self.power_cycled_for = Some(s),
            Mark::PoweredAt(t) => self.powered_at = Some(t),
            Mark::PowerOffAt(t) => self.power_off_at = Some(t),
            Mark::DiskBootFor(s) => self.disk_boot_for = Some(s),
            Mark::NodeRemovedFor(s) => self.node_removed_for = Some(s),
            Mark::PreviousBoot(s) => self.previous_boot = Some(s),
            Mark::ReimageRequest(s) => self.reimage_request = Some(s),
            Mark::PowerCycleRequest(s) => self.power_cycle_request = Some(s),
            Mark::BiosWrittenFor(s) => self.bios_written_for = Some(s),
            Mark::FirmwareUpdatedFor(s) => self.firmware_updated_for = Some(s),
            Mark::VolumesCreatedFor(s) => self.volumes_created_for = Some(s),
            Mark::Attempts(n) => self.attempts = Some(n),
            Mark::RetryAt(t) => self.retry_at = Some(t),
            Mark::ErrorFrom(p) => self.error_from = Some(p),
        }
    }

    /// Whether `mark` is already recorded with this very value.
    pub fn has(&self, mark: &Mark) -> bool {
        match mark {
            Mark::PowerCycledFor(s) => self.power_cycled_for.as_ref() == Some(s),
            Mark::PoweredAt(t) => self.powered_at.as_ref() == Some(t),
            Mark::PowerOffAt(t) => self.power_off_at.as_ref() == Some(t),
            Mark::DiskBootFor(s) => self.disk_boot_for.as_ref() == Some(s),
            Mark::NodeRemovedFor(s) => self.node_removed_for.as_ref() == Some(s),
            Mark::PreviousBoot(s) => self.previous_boot.as_ref() == Some(s),
            Mark::ReimageRequest(s) => self.reimage_request.as_ref() == Some(s),
            Mark::PowerCycleRequest(s) => self.power_cycle_request.as_ref() == Some(s),
            Mark::BiosWrittenFor(s) => self.bios_written_for.as_ref() == Some(s),
            Mark::FirmwareUpdatedFor(s) => self.firmware_updated_for.as_ref() == Some(s),
            Mark::VolumesCreatedFor(s) => self.volumes_created_for.as_ref() == Some(s),
            Mark::Attempts(n) => self.attempts.as_ref() == Some(n),
            Mark::RetryAt(t) => self.retry_at.as_ref() == Some(t),
            Mark::ErrorFrom(p) => self.error_from.as_ref() == Some(p),
        }
    }

    /// Whether the marker `key` is present.
    pub fn contains(&self, key: MarkKey) -> bool {
        match key {
            MarkKey::PowerCycledFor => self.power_cycled_for.is_some(),
            MarkKey::PoweredAt => self.powered_at.is_some(),
            MarkKey::PowerOffAt => self.power_off_at.is_some(),
            MarkKey::DiskBootFor => self.disk_boot_for.is_some(),
            MarkKey::NodeRemovedFor => self.node_removed_for.is_some(),
            MarkKey::PreviousBoot => self.previous_boot.is_some(),
            MarkKey::ReimageRequest => self.reimage_request.is_some(),
            MarkKey::PowerCycleRequest => self.power_cycle_request.is_some(),
            MarkKey::BiosWrittenFor => self.bios_written_for.is_some(),
            MarkKey::FirmwareUpdatedFor => self.firmware_updated_for.is_some(),
            MarkKey::VolumesCreatedFor => self.volumes_created_for.is_some(),
            MarkKey::Attempts => self.attempts.is_some(),
            MarkKey::RetryAt => self.retry_at.is_some(),
            MarkKey::ErrorFrom => self.error_from.is_some(),
        }
    }

    /// Remove the marker `key`.
    pub fn clear(&mut self, key: MarkKey) {
        match key {
            MarkKey::PowerCycledFor => self.power_cycled_for = None,
            MarkKey::PoweredAt => self.powered_at = None,
            MarkKey::PowerOffAt => self.power_off_at = None,
            MarkKey::DiskBootFor => self.disk_boot_for = None,
            MarkKey::NodeRemovedFor => self.node_removed_for = None,
            MarkKey::PreviousBoot => self.previous_boot = None,
            MarkKey::ReimageRequest => self.reimage_request = None,
            MarkKey::PowerCycleRequest => self.power_cycle_request = None,
            MarkKey::BiosWrittenFor => self.bios_written_for = None,
            MarkKey::FirmwareUpdatedFor => self.firmware_updated_for = None,
            MarkKey::VolumesCreatedFor => self.volumes_created_for = None,
            MarkKey::Attempts => self.attempts = None,
            MarkKey::RetryAt => self.retry_at = None,
            MarkKey::ErrorFrom => self.error_from = None,
        }
    }

    /// Failed boots in a row (none recorded: zero).
    pub fn attempts(&self) -> u32 {
        self.attempts.unwrap_or(0)
    }
}

impl FromStr for MachinePhase {
    type Err = UnknownPhase;
    fn from_str(s: &str) -> Result<Self, UnknownPhase> {
        MachinePhase::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownPhase(s.to_string()))
    }
}

impl fmt::Display for MachinePhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no [`MachinePhase`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown machine phase {0:?}")]
pub struct UnknownPhase(pub String);

/// An optional value stored as its text: written with `Display`, read with
/// `FromStr`, and read as absent when the text does not parse.
mod text {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<T: Display, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.collect_str(v),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T: FromStr, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
        let raw = Option::<String>::deserialize(d)?;
        Ok(raw.and_then(|s| s.parse().ok()))
    }
}

#[cfg(test)]
mod tests;
