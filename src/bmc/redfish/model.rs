//! The few Redfish resources metalherd reads, as lenient serde structs:
//! every field defaulted, every enum kept open (a `String`), so a BMC that
//! adds properties or enum values does not fail a whole document. A field of
//! the wrong JSON type still fails, as a typed `Protocol` error with its path.
//!
//! Pure data and pure decoding; no HTTP here.

use serde::Deserialize;
use serde::de::DeserializeOwned;

/// A link: `{"@odata.id": "/redfish/v1/..."}`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Link {
    #[serde(rename = "@odata.id")]
    pub odata_id: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct ServiceRoot {
    pub redfish_version: Option<String>,
    pub vendor: Option<String>,
    pub product: Option<String>,
    pub systems: Option<Link>,
    pub session_service: Option<Link>,
    pub links: RootLinks,
    pub oem: serde_json::Map<String, serde_json::Value>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct RootLinks {
    pub sessions: Option<Link>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct Collection {
    pub members: Vec<Link>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct ComputerSystem {
    #[serde(rename = "@odata.id")]
    pub odata_id: String,
    pub id: Option<String>,
    pub manufacturer: Option<String>,
    pub model: Option<String>,
    pub serial_number: Option<String>,
    #[serde(rename = "UUID")]
    pub uuid: Option<String>,
    pub bios_version: Option<String>,
    pub power_state: Option<String>,
    pub boot: Boot,
    pub processor_summary: ProcessorSummary,
    pub memory_summary: MemorySummary,
    pub ethernet_interfaces: Option<Link>,
    pub simple_storage: Option<Link>,
    pub storage: Option<Link>,
    pub bios: Option<Link>,
    pub secure_boot: Option<Link>,
    pub virtual_media: Option<Link>,
    pub links: SystemLinks,
    pub actions: SystemActions,
    #[serde(rename = "@Redfish.Settings")]
    pub settings: Option<Settings>,
    pub oem: serde_json::Map<String, serde_json::Value>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct SystemLinks {
    /// The Managers (BMCs) of the System; the first one is asked for
    /// virtual media when the System links none.
    pub managed_by: Vec<Link>,
}

/// A Manager (the parts metalherd reads).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct Manager {
    pub virtual_media: Option<Link>,
}

/// A `VirtualMedia` member: one virtual drive and what it holds.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, rename_all = "PascalCase")]
pub struct VirtualMedia {
    #[serde(rename = "@odata.id")]
    pub odata_id: String,
    pub id: Option<String>,
    /// `CD`, `DVD`, `Floppy`, `USBStick`, ...; open.
    pub media_types: Vec<String>,
    pub image: Option<String>,
    pub inserted: Option<bool>,
    pub write_protected: Option<bool>,
    pub actions: VirtualMediaActions,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct VirtualMediaActions {
    #[serde(rename = "#VirtualMedia.InsertMedia")]
    pub insert: Option<ActionTarget>,
    #[serde(rename = "#VirtualMedia.EjectMedia")]
    pub eject: Option<ActionTarget>,
}

/// An action's `target` URI.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct ActionTarget {
    pub target: Option<String>,
}

/// A System's `SecureBoot` resource (the parts metalherd reads).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, rename_all = "PascalCase")]
pub struct SecureBoot {
    pub secure_boot_enable: Option<bool>,
}

/// The boot override, as read and as patched.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, rename_all = "PascalCase")]
pub struct Boot {
    pub boot_source_override_target: Option<String>,
    pub boot_source_override_enabled: Option<String>,
    pub boot_source_override_mode: Option<String>,
    #[serde(rename = "BootSourceOverrideTarget@Redfish.AllowableValues")]
    pub target_allowable_values: Vec<String>,
}

/// A resource that only carries a `Boot` (a settings object may be sparse).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct BootHolder {
    pub boot: Boot,
}

/// A `Bios` resource: its attributes and where changes go.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct Bios {
    pub attributes: serde_json::Map<String, serde_json::Value>,
    #[serde(rename = "@Redfish.Settings")]
    pub settings: Option<Settings>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct Settings {
    pub settings_object: Option<Link>,
}

/// Where changes to a resource go: the settings object its
/// `@Redfish.Settings` names, when it names one.
pub fn settings_path(settings: &Option<Settings>) -> Option<String> {
    settings
        .as_ref()
        .and_then(|s| s.settings_object.as_ref())
        .map(|l| l.odata_id.clone())
        .filter(|p| !p.is_empty())
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct ProcessorSummary {
    pub count: Option<u32>,
    pub model: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct MemorySummary {
    #[serde(rename = "TotalSystemMemoryGiB")]
    pub total_system_memory_gib: Option<f64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct SystemActions {
    #[serde(rename = "#ComputerSystem.Reset")]
    pub reset: Option<ResetAction>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ResetAction {
    pub target: Option<String>,
    #[serde(rename = "ResetType@Redfish.AllowableValues")]
    pub allowable_values: Vec<String>,
    #[serde(rename = "@Redfish.ActionInfo")]
    pub action_info: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct ActionInfo {
    pub parameters: Vec<ActionParameter>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct ActionParameter {
    pub name: String,
    pub allowable_values: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct EthernetInterface {
    pub id: Option<String>,
    pub name: Option<String>,
    #[serde(rename = "MACAddress")]
    pub mac_address: Option<String>,
    #[serde(rename = "PermanentMACAddress")]
    pub permanent_mac_address: Option<String>,
    pub link_status: Option<String>,
    pub speed_mbps: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct SimpleStorage {
    pub devices: Vec<SimpleStorageDevice>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct SimpleStorageDevice {
    pub name: Option<String>,
    pub model: Option<String>,
    pub capacity_bytes: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct Storage {
    pub drives: Vec<Link>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct Drive {
    pub id: Option<String>,
    pub name: Option<String>,
    pub model: Option<String>,
    pub serial_number: Option<String>,
    pub capacity_bytes: Option<u64>,
    /// `HDD`, `SSD`, `SMR`; open.
    pub media_type: Option<String>,
}

/// A task (what a task monitor returns while running, or when done).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct Task {
    /// `New`, `Running`, `Completed`, `Exception`, `Killed`, ...; open.
    pub task_state: Option<String>,
    pub task_status: Option<String>,
    pub messages: Vec<Message>,
}

impl Task {
    /// Its messages, joined: what a failed task says.
    pub fn detail(&self) -> String {
        self.messages
            .iter()
            .filter_map(|m| m.message.as_deref())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct Message {
    pub message: Option<String>,
    pub message_id: Option<String>,
}

/// A Redfish error body: `{"error": {"code", "message", "@Message.ExtendedInfo"}}`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ErrorDetail {
    pub code: Option<String>,
    pub message: Option<String>,
    #[serde(rename = "@Message.ExtendedInfo")]
    pub extended_info: Vec<Message>,
}

impl ErrorBody {
    /// A short, single-line description for an error message.
    pub fn summary(body: &[u8]) -> String {
        Self::summary_hiding(body, None)
    }

    /// [`Self::summary`] with every quote of `hide` (an image URL the
    /// request carried, with a token in it) scrubbed before the text is
    /// cut, so no part of it survives the cut.
    pub fn summary_hiding(body: &[u8], hide: Option<&str>) -> String {
        let parsed: Option<ErrorBody> = serde_json::from_slice(body).ok();
        let text = parsed
            .and_then(|b| {
                b.error
                    .extended_info
                    .iter()
                    .find_map(|m| m.message.clone())
                    .or(b.error.message)
                    .or(b.error.code)
            })
            .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
        let text = match hide {
            Some(h) => crate::bmc::image_url::scrub(&text, h),
            None => text,
        };
        let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        truncate(&one_line, 200)
    }
}

/// A body that does not decode as the document asked for. The message
/// names the JSON path of the first problem (when there is one) and is cut
/// at 200 bytes: BMC bodies can be large.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct DecodeError {
    /// Where in the document (`Boot.BootSourceOverrideTarget`); `None` for
    /// the body as a whole.
    pub path: Option<String>,
    /// What serde found wrong there.
    pub detail: String,
}

impl DecodeError {
    fn message(&self) -> String {
        match &self.path {
            None => truncate(&self.detail, 200),
            Some(path) => truncate(&format!("at {path}: {}", self.detail), 200),
        }
    }
}

/// Decode a body, naming the JSON path of the first problem.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, DecodeError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let detail = e.into_inner().to_string();
        if path.is_empty() || path == "." {
            DecodeError { path: None, detail }
        } else {
            DecodeError {
                path: Some(path),
                detail,
            }
        }
    })
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}
