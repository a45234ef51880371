//! The `bmc:` section of the config file as serde wire types
//! ([`BmcConfig`]), turned into validated [`BmcSettings`] with `TryFrom`:
//! the quirk table the drivers use. Errors name the field
//! (`bmc.quirks[2].match.firmware`). No I/O here.
//!
//! ```yaml
//! bmc:
//!   quirks:
//!     - name: contoso-lx2-bmc-2.1     # shown in `describe machine`
//!       protocol: redfish             # redfish, ipmi or any (default)
//!       match:
//!         vendor: Contoso             # Manufacturer's first word, prefix, or Oem key
//!         model: "LX2*"               # optional, `*` is a wildcard
//!         firmware: ">=2.0, <2.10"    # optional version range
//!       onceKeptAsContinuous: true    # one-time override kept as Continuous
//!       powerSettleSeconds: 10        # power state settles this late
//!       onResetTypes: [ForceOn]       # instead of On (Redfish)
//!       cycleResetTypes: [ForceRestart]
//!       gracefulOffResetTypes: [GracefulShutdown]
//!       bootModeWithOverride: always  # whenShown (default), always, never
//!       bootNeedsEtag: true           # If-Match on the Boot PATCH (Redfish)
//! ```

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{
    BootModeWithOverride, Origin, Protocol, QuirkEntry, QuirkMatch, QuirkSet, QuirkTable,
    VersionRange,
};

/// Wire form of the `bmc:` section.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BmcConfig {
    #[serde(default)]
    pub quirks: Vec<QuirkEntryConfig>,
}

/// Wire form of one `bmc.quirks:` entry (also what `hw-test` prints).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuirkEntryConfig {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub protocol: Protocol,
    #[serde(rename = "match", default)]
    pub matches: QuirkMatchConfig,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub once_kept_as_continuous: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_settle_seconds: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_reset_types: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycle_reset_types: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graceful_off_reset_types: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_mode_with_override: Option<BootModeWithOverride>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_needs_etag: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuirkMatchConfig {
    #[serde(default)]
    pub vendor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<String>,
}

/// Validated `bmc:` settings.
#[derive(Clone, Debug)]
pub struct BmcSettings {
    /// Built-in entries followed by the config's.
    pub quirks: Arc<QuirkTable>,
}

impl Default for BmcSettings {
    fn default() -> Self {
        BmcSettings {
            quirks: QuirkTable::builtin().shared(),
        }
    }
}

/// What is wrong with a `bmc:` section; the message names the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bmc.{field}: {message}")]
pub struct QuirkConfigError {
    pub field: String,
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> QuirkConfigError {
    QuirkConfigError {
        field: field.into(),
        message: message.into(),
    }
}

/// Longest settle delay a quirk may ask for.
const MAX_SETTLE_SECONDS: u32 = 600;

/// Redfish `ResetType` values (DSP0268).
const RESET_TYPES: &[&str] = &[
    "On",
    "ForceOff",
    "GracefulShutdown",
    "GracefulRestart",
    "ForceRestart",
    "Nmi",
    "ForceOn",
    "PushPowerButton",
    "PowerCycle",
    "Suspend",
    "Pause",
    "Resume",
    "FullPowerCycle",
];

fn reset_types(
    field: &str,
    protocol: Protocol,
    v: &Option<Vec<String>>,
) -> Result<Option<Vec<String>>, QuirkConfigError> {
    let Some(list) = v else {
        return Ok(None);
    };
    if protocol == Protocol::Ipmi {
        return Err(err(field, "ResetTypes are Redfish; this entry is for ipmi"));
    }
    if list.is_empty() {
        return Err(err(field, "must name at least one ResetType"));
    }
    for (i, t) in list.iter().enumerate() {
        if !RESET_TYPES.contains(&t.as_str()) {
            return Err(err(
                format!("{field}[{i}]"),
                format!(
                    "unknown ResetType {t:?} (one of {})",
                    RESET_TYPES.join(", ")
                ),
            ));
        }
    }
    Ok(Some(list.clone()))
}

impl QuirkEntryConfig {
    /// Validate one entry; `at` is its field path (`quirks[3]`).
    pub fn validate(&self, at: &str) -> Result<QuirkEntry, QuirkConfigError> {
        let name = self.name.trim();
        if name.is_empty() {
            return Err(err(
                format!("{at}.name"),
                "required (shown in describe machine)",
            ));
        }
        if name.chars().any(|c| c.is_whitespace() || c == ',') {
            return Err(err(
                format!("{at}.name"),
                "must not contain spaces or commas",
            ));
        }
        let vendor = self.matches.vendor.trim();
        if vendor.is_empty() {
            return Err(err(
                format!("{at}.match.vendor"),
                "required (the Manufacturer as the BMC reports it, e.g. \"Dell\")",
            ));
        }
        let model = match &self.matches.model {
            Some(m) if m.trim().is_empty() => {
                return Err(err(
                    format!("{at}.match.model"),
                    "empty (leave it out to match every model)",
                ));
            }
            m => m.as_ref().map(|s| s.trim().to_string()),
        };
        let firmware = match &self.matches.firmware {
            Some(f) => Some(
                VersionRange::parse(f)
                    .map_err(|e| err(format!("{at}.match.firmware"), e.to_string()))?,
            ),
            None => None,
        };
        if let Some(s) = self.power_settle_seconds
            && s > MAX_SETTLE_SECONDS
        {
            return Err(err(
                format!("{at}.powerSettleSeconds"),
                format!("must be at most {MAX_SETTLE_SECONDS}"),
            ));
        }
        if self.boot_needs_etag.is_some() && self.protocol == Protocol::Ipmi {
            return Err(err(
                format!("{at}.bootNeedsEtag"),
                "ETags are Redfish; this entry is for ipmi",
            ));
        }
        let set = QuirkSet {
            once_kept_as_continuous: self.once_kept_as_continuous,
            power_settle_seconds: self.power_settle_seconds,
            on_reset_types: reset_types(
                &format!("{at}.onResetTypes"),
                self.protocol,
                &self.on_reset_types,
            )?,
            cycle_reset_types: reset_types(
                &format!("{at}.cycleResetTypes"),
                self.protocol,
                &self.cycle_reset_types,
            )?,
            graceful_off_reset_types: reset_types(
                &format!("{at}.gracefulOffResetTypes"),
                self.protocol,
                &self.graceful_off_reset_types,
            )?,
            boot_mode_with_override: self.boot_mode_with_override,
            boot_needs_etag: self.boot_needs_etag,
        };
        if set.is_empty() {
            return Err(err(at, "sets no quirk (e.g. onceKeptAsContinuous: true)"));
        }
        Ok(QuirkEntry {
            name: name.to_string(),
            protocol: self.protocol,
            matches: QuirkMatch {
                vendor: vendor.to_string(),
                model,
                firmware,
            },
            set,
            origin: Origin::Config,
        })
    }
}

impl From<&QuirkEntry> for QuirkEntryConfig {
    fn from(e: &QuirkEntry) -> Self {
        QuirkEntryConfig {
            name: e.name.clone(),
            protocol: e.protocol,
            matches: QuirkMatchConfig {
                vendor: e.matches.vendor.clone(),
                model: e.matches.model.clone(),
                firmware: e.matches.firmware.as_ref().map(|f| f.as_str().to_string()),
            },
            once_kept_as_continuous: e.set.once_kept_as_continuous,
            power_settle_seconds: e.set.power_settle_seconds,
            on_reset_types: e.set.on_reset_types.clone(),
            cycle_reset_types: e.set.cycle_reset_types.clone(),
            graceful_off_reset_types: e.set.graceful_off_reset_types.clone(),
            boot_mode_with_override: e.set.boot_mode_with_override,
            boot_needs_etag: e.set.boot_needs_etag,
        }
    }
}

impl TryFrom<BmcConfig> for BmcSettings {
    type Error = QuirkConfigError;

    fn try_from(c: BmcConfig) -> Result<Self, QuirkConfigError> {
        let mut names = BTreeSet::new();
        let mut entries = Vec::with_capacity(c.quirks.len());
        for (i, q) in c.quirks.iter().enumerate() {
            let at = format!("quirks[{i}]");
            let e = q.validate(&at)?;
            if !names.insert(e.name.clone()) {
                return Err(err(
                    format!("{at}.name"),
                    format!("{:?} is used twice", e.name),
                ));
            }
            entries.push(e);
        }
        Ok(BmcSettings {
            quirks: QuirkTable::with_entries(entries).shared(),
        })
    }
}
