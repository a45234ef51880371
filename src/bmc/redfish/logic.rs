//! Pure Redfish decisions: which ResetType to send, what Boot PATCH to make
//! and whether its read-back matches, how to read a PowerState, when to
//! retry, and how a system's documents become an [`Inventory`]. Virtual
//! media's decisions are in [`super::vmedia_logic`]. No I/O.

use std::time::Duration;

use serde_json::{Value, json};

use super::model::{Boot, ComputerSystem, Drive, EthernetInterface, SimpleStorage};
use crate::api::{CpuInfo, DiskInfo, Inventory, NicInfo};
use crate::bmc::quirks::{BootModeWithOverride, Quirks};
use crate::bmc::{BootDevice, FirmwareMode, PowerAction, PowerState};

/// A `PowerState` that cannot be read; reported as a malformed answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PowerStateError {
    #[error("unknown PowerState {0:?}")]
    Unknown(String),
    #[error("system has no PowerState")]
    Missing,
}

/// Read a Redfish `PowerState`. Transitional states count as not yet there
/// (`Unknown`); a value outside the schema is an error the caller reports.
pub fn parse_power_state(v: Option<&str>) -> Result<PowerState, PowerStateError> {
    match v {
        Some("On") => Ok(PowerState::On),
        Some("Off") => Ok(PowerState::Off),
        Some("PoweringOn") | Some("PoweringOff") | Some("Paused") => Ok(PowerState::Unknown),
        Some(other) => Err(PowerStateError::Unknown(other.to_string())),
        None => Err(PowerStateError::Missing),
    }
}

/// What a power action does given where the server is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PowerPlan {
    /// Already in the target state; nothing to send.
    Nothing,
    /// POST this ResetType, then poll for the action's target state.
    Reset(String),
}

/// No ResetType fits a power action; reported as `Unsupported`, so the
/// message completes "BMC ... does not support".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoResetType {
    /// Nothing to send for the action: its preference list is empty.
    #[error("no ResetType for {action:?}")]
    NonePreferred { action: PowerAction },
    /// The BMC allows none of the ResetTypes preferred for the action.
    #[error("power {action:?}: none of {preferred:?} is among the allowed ResetTypes {allowed:?}")]
    NoneAllowed {
        action: PowerAction,
        preferred: Vec<String>,
        allowed: Vec<String>,
    },
}

/// Choose the ResetType for `action` from what the BMC allows (empty when it
/// does not say: then the first preference is sent).
pub fn plan_power(
    action: PowerAction,
    current: PowerState,
    allowed: &[String],
    quirks: &Quirks,
) -> Result<PowerPlan, NoResetType> {
    const FORCE_OFF: &[&str] = &["ForceOff"];
    const RESET: &[&str] = &["ForceRestart", "GracefulRestart", "PowerCycle"];
    let on: Vec<&str> = quirks.on_reset_types.iter().map(String::as_str).collect();
    let cycle: Vec<&str> = quirks
        .cycle_reset_types
        .iter()
        .map(String::as_str)
        .collect();
    let graceful: Vec<&str> = quirks
        .graceful_off_reset_types
        .iter()
        .map(String::as_str)
        .collect();
    let prefs: &[&str] = match (action, current) {
        (PowerAction::On, PowerState::On) => return Ok(PowerPlan::Nothing),
        (PowerAction::GracefulOff | PowerAction::ForceOff, PowerState::Off) => {
            return Ok(PowerPlan::Nothing);
        }
        (PowerAction::On, _) => &on,
        // Cycling or resetting a server that is off is powering it on.
        (PowerAction::Cycle | PowerAction::Reset, PowerState::Off) => &on,
        (PowerAction::Cycle, _) => &cycle,
        (PowerAction::Reset, _) => RESET,
        (PowerAction::GracefulOff, _) => &graceful,
        (PowerAction::ForceOff, _) => FORCE_OFF,
    };
    if allowed.is_empty() {
        return prefs
            .first()
            .map(|s| PowerPlan::Reset((*s).to_string()))
            .ok_or(NoResetType::NonePreferred { action });
    }
    prefs
        .iter()
        .find(|p| allowed.iter().any(|a| a == *p))
        .map(|s| PowerPlan::Reset((*s).to_string()))
        .ok_or_else(|| NoResetType::NoneAllowed {
            action,
            preferred: prefs.iter().map(|p| (*p).to_string()).collect(),
            allowed: allowed.to_vec(),
        })
}

/// The Redfish `BootSourceOverrideTarget` for a device.
pub fn boot_target(device: BootDevice) -> &'static str {
    match device {
        BootDevice::Network => "Pxe",
        BootDevice::Disk => "Hdd",
        BootDevice::Cd => "Cd",
    }
}

pub fn boot_mode(mode: FirmwareMode) -> &'static str {
    match mode {
        FirmwareMode::Uefi => "UEFI",
        FirmwareMode::Legacy => "Legacy",
    }
}

/// The PATCH body of a one-time boot override. The mode is sent when the
/// BMC shows the property, unless its quirks say never (or always).
pub fn boot_patch(
    device: BootDevice,
    mode: FirmwareMode,
    current: &Boot,
    quirks: &Quirks,
) -> Value {
    let mut boot = json!({
        "BootSourceOverrideTarget": boot_target(device),
        "BootSourceOverrideEnabled": "Once",
    });
    if send_mode(current, quirks)
        && let Some(m) = boot.as_object_mut()
    {
        m.insert("BootSourceOverrideMode".into(), boot_mode(mode).into());
    }
    json!({ "Boot": boot })
}

fn send_mode(current: &Boot, quirks: &Quirks) -> bool {
    match quirks.boot_mode_with_override {
        BootModeWithOverride::Always => true,
        BootModeWithOverride::Never => false,
        BootModeWithOverride::WhenShown => current.boot_source_override_mode.is_some(),
    }
}

/// Compare a read-back override with what was asked. `Continuous` for
/// `Once` is accepted only when the BMC's quirks say it keeps one-time
/// overrides that way (`kept_as_continuous`; sushy-tools does): elsewhere
/// it means the server would network-boot on every start. A wrong target,
/// `Disabled`, or a mode other than the one sent is a mismatch too: a
/// [`BootMismatch`] for `BootOverrideIgnored`.
pub fn check_boot_readback(
    device: BootDevice,
    mode: FirmwareMode,
    sent_mode: bool,
    kept_as_continuous: bool,
    got: &Boot,
) -> Result<(), BootMismatch> {
    let want_target = boot_target(device);
    let want_mode = boot_mode(mode);
    let target_ok = got.boot_source_override_target.as_deref() == Some(want_target);
    let continuous = got.boot_source_override_enabled.as_deref() == Some("Continuous");
    let enabled_ok = match got.boot_source_override_enabled.as_deref() {
        Some("Once") => true,
        Some("Continuous") => kept_as_continuous,
        _ => false,
    };
    let mode_ok = !sent_mode || got.boot_source_override_mode.as_deref() == Some(want_mode);
    if target_ok && enabled_ok && mode_ok {
        return Ok(());
    }
    let wanted = if sent_mode {
        format!("{want_target}/Once/{want_mode}")
    } else {
        format!("{want_target}/Once")
    };
    Err(BootMismatch {
        wanted,
        got: boot_text(got),
        kept_continuous: target_ok && mode_ok && continuous,
    })
}

/// An override as `target/enabled/mode` (`-` for what is not reported).
pub fn boot_text(b: &Boot) -> String {
    format!(
        "{}/{}/{}",
        b.boot_source_override_target.as_deref().unwrap_or("-"),
        b.boot_source_override_enabled.as_deref().unwrap_or("-"),
        b.boot_source_override_mode.as_deref().unwrap_or("-"),
    )
}

/// Whether an override is in effect (`Once` or `Continuous`).
pub fn override_active(b: &Boot) -> bool {
    matches!(
        b.boot_source_override_enabled.as_deref(),
        Some("Once" | "Continuous")
    )
}

/// A read-back override that is not the one sent (see
/// [`check_boot_readback`]), as `target/enabled/mode` texts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootMismatch {
    pub wanted: String,
    pub got: String,
    /// Everything as asked but kept as `Continuous`: what the
    /// `onceKeptAsContinuous` quirk accepts.
    pub kept_continuous: bool,
}

/// Whether a PATCH of the Boot override should carry the mode.
pub fn boot_sends_mode(current: &Boot, quirks: &Quirks) -> bool {
    send_mode(current, quirks)
}

/// Retry and backoff for answers that may succeed later.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    /// Attempts in all (the first one included).
    pub max_attempts: u32,
    pub base_backoff: Duration,
    pub max_backoff: Duration,
    /// A Retry-After longer than this is cut down to it.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(30),
        }
    }
}

/// After attempt `attempt` (1-based) got HTTP `status`: how long to wait
/// before the next one, or `None` to give up. Only 5xx answers are retried;
/// a 503's `Retry-After` (seconds) is honoured, capped.
pub fn retry_after(
    status: u16,
    retry_after_header: Option<&str>,
    attempt: u32,
    policy: &RetryPolicy,
) -> Option<Duration> {
    if !(500..600).contains(&status) || status == 501 || attempt >= policy.max_attempts {
        return None;
    }
    if let Some(secs) = retry_after_header.and_then(|h| h.trim().parse::<u64>().ok()) {
        return Some(Duration::from_secs(secs).min(policy.max_retry_after));
    }
    Some(backoff(attempt, policy))
}

/// Exponential backoff for attempt `attempt` (1-based).
pub fn backoff(attempt: u32, policy: &RetryPolicy) -> Duration {
    let factor = 1u32 << attempt.saturating_sub(1).min(16);
    policy
        .base_backoff
        .saturating_mul(factor)
        .min(policy.max_backoff)
}

/// Whether a task (monitor body) has finished, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskOutcome {
    Running,
    Completed,
    Failed(String),
}

pub fn task_outcome(task_state: Option<&str>) -> TaskOutcome {
    match task_state {
        Some("Completed") => TaskOutcome::Completed,
        Some(s @ ("Exception" | "Killed" | "Cancelled" | "Interrupted")) => {
            TaskOutcome::Failed(s.to_string())
        }
        // New, Starting, Running, Pending, Suspended, Stopping, Service,
        // unknown values, or no state at all: keep polling until the deadline.
        _ => TaskOutcome::Running,
    }
}

/// Canonical lower-case colon MAC, or `None` when it is not a MAC.
fn normalize_mac(s: &str) -> Option<String> {
    s.trim()
        .parse::<crate::api::MacAddr>()
        .ok()
        .map(|m| m.to_string())
}

pub fn nic_info(n: &EthernetInterface) -> Option<NicInfo> {
    let mac = n
        .mac_address
        .as_deref()
        .and_then(normalize_mac)
        .or_else(|| n.permanent_mac_address.as_deref().and_then(normalize_mac))?;
    let link_up = match n.link_status.as_deref() {
        Some("LinkUp") => Some(true),
        Some("LinkDown") | Some("NoLink") => Some(false),
        _ => None,
    };
    Some(NicInfo {
        name: n.id.clone().or_else(|| n.name.clone()).unwrap_or_default(),
        mac,
        link_up,
        speed_mbps: n.speed_mbps,
    })
}

pub fn disks_from_simple_storage(s: &SimpleStorage) -> Vec<DiskInfo> {
    s.devices
        .iter()
        .map(|d| DiskInfo {
            name: d.name.clone().unwrap_or_default(),
            size_bytes: d.capacity_bytes,
            model: d.model.clone(),
            serial_number: None,
            rotational: None,
        })
        .collect()
}

pub fn disk_from_drive(d: &Drive) -> DiskInfo {
    DiskInfo {
        name: d.id.clone().or_else(|| d.name.clone()).unwrap_or_default(),
        size_bytes: d.capacity_bytes,
        model: d.model.clone(),
        serial_number: d.serial_number.clone(),
        rotational: match d.media_type.as_deref() {
            Some("HDD") | Some("SMR") => Some(true),
            Some("SSD") => Some(false),
            _ => None,
        },
    }
}

/// The system-level part of the inventory (NICs and disks are added by the
/// caller from their own documents).
pub fn system_inventory(s: &ComputerSystem) -> Inventory {
    let cpu = s.processor_summary.count.map(|count| CpuInfo {
        count,
        model: s.processor_summary.model.clone(),
        architecture: None,
    });
    let memory_mib = s
        .memory_summary
        .total_system_memory_gib
        .filter(|g| g.is_finite() && *g >= 0.0)
        .map(|g| (g * 1024.0).round() as u64);
    Inventory {
        manufacturer: s.manufacturer.clone(),
        model: s.model.clone(),
        serial_number: s.serial_number.clone(),
        uuid: s.uuid.clone(),
        firmware_version: s.bios_version.clone(),
        cpu,
        memory_mib,
        nics: Vec::new(),
        disks: Vec::new(),
        secure_boot: None,
    }
}

/// A BIOS attribute's value as text (strings as they are, numbers and
/// booleans as JSON writes them).
pub fn bios_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The `Bios/Settings` PATCH body for `wanted`: each value typed as the
/// attribute's current value is (a number stays a number, a boolean a
/// boolean), else sent as a string.
pub fn bios_patch(
    current: &serde_json::Map<String, serde_json::Value>,
    wanted: &std::collections::BTreeMap<String, String>,
) -> serde_json::Value {
    let typed: serde_json::Map<String, serde_json::Value> = wanted
        .iter()
        .map(|(k, v)| {
            let as_text = serde_json::Value::String(v.clone());
            let value = match current.get(k) {
                Some(serde_json::Value::Number(_)) => v
                    .parse::<i64>()
                    .map(serde_json::Value::from)
                    .unwrap_or(as_text),
                Some(serde_json::Value::Bool(_)) => v
                    .parse::<bool>()
                    .map(serde_json::Value::from)
                    .unwrap_or(as_text),
                _ => as_text,
            };
            (k.clone(), value)
        })
        .collect();
    serde_json::json!({ "Attributes": typed })
}
