//! Vendor quirks as data: how one BMC model differs from the standard path,
//! for Redfish and IPMI. A [`QuirkTable`] holds the built-in entries
//! ([`builtin`]) followed by the operator's entries from the config file
//! (`bmc.quirks:`, see [`config`]); every entry whose match fits a BMC's
//! vendor, model and firmware version applies, in order, so a config entry
//! overrides a built-in one field by field. The drivers read fields of the
//! resulting [`Quirks`] and never test vendor names themselves.
//!
//! No I/O here: the drivers pass what they read from the BMC.

pub mod builtin;
pub mod config;
#[cfg(test)]
mod tests;
mod version;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

pub use config::{BmcConfig, BmcSettings, QuirkConfigError};
pub use version::{VersionRange, VersionRangeError};

/// Which driver an entry is for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Both drivers.
    #[default]
    Any,
    Redfish,
    Ipmi,
}

impl Protocol {
    fn covers(self, other: Protocol) -> bool {
        self == Protocol::Any || self == other
    }
}

/// Whether a one-time boot override carries the firmware mode
/// (Redfish `BootSourceOverrideMode`, the IPMI EFI bit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum BootModeWithOverride {
    /// Only when the BMC shows the property (Redfish); always for IPMI.
    #[default]
    WhenShown,
    /// Always: firmware that falls back to Legacy unless told each time.
    Always,
    /// Never: firmware that changes the mode only through a BIOS job and
    /// rejects it in the override.
    Never,
}

/// What identifies a BMC model. Every field given must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuirkMatch {
    /// Manufacturer: its first word, the whole name as a prefix, or (Redfish)
    /// a key of the System's `Oem` object; case-insensitive.
    pub vendor: String,
    /// Model: case-insensitive, `*` matches any run of characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Firmware version range, e.g. `>=4.0, <4.40`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub firmware: Option<VersionRange>,
}

/// The quirks an entry sets; `None` keeps what earlier entries (or the
/// standard path) say.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuirkSet {
    /// The BMC keeps a one-time override as `Continuous` (reads back
    /// Continuous, or still shows it after the server booted). metalherd
    /// then accepts the read-back, and the disk override it sets before
    /// booting the installed OS replaces the kept one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub once_kept_as_continuous: Option<bool>,
    /// The reported power state settles this many seconds late (reports the
    /// target state, then the old one again): a power action is done only
    /// once the state has held this long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_settle_seconds: Option<u32>,
    /// Redfish ResetTypes to power on with, best first (instead of `On`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_reset_types: Option<Vec<String>>,
    /// Redfish ResetTypes for a power cycle of a server that is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycle_reset_types: Option<Vec<String>>,
    /// Redfish ResetTypes for a graceful power off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graceful_off_reset_types: Option<Vec<String>>,
    /// Whether the override carries the firmware mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_mode_with_override: Option<BootModeWithOverride>,
    /// Redfish: send `If-Match` with the ETag on the Boot PATCH up front
    /// (the driver also retries with it after a 412/428 on any vendor).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_needs_etag: Option<bool>,
}

impl QuirkSet {
    fn apply_to(&self, q: &mut Quirks) {
        if let Some(v) = self.once_kept_as_continuous {
            q.once_kept_as_continuous = v;
        }
        if let Some(v) = self.power_settle_seconds {
            q.power_settle = Duration::from_secs(u64::from(v));
        }
        if let Some(v) = &self.on_reset_types {
            q.on_reset_types = v.clone();
        }
        if let Some(v) = &self.cycle_reset_types {
            q.cycle_reset_types = v.clone();
        }
        if let Some(v) = &self.graceful_off_reset_types {
            q.graceful_off_reset_types = v.clone();
        }
        if let Some(v) = self.boot_mode_with_override {
            q.boot_mode_with_override = v;
        }
        if let Some(v) = self.boot_needs_etag {
            q.boot_needs_etag = v;
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == QuirkSet::default()
    }
}

/// One row of the table: a name, what it matches, what it sets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuirkEntry {
    pub name: String,
    pub protocol: Protocol,
    #[serde(rename = "match")]
    pub matches: QuirkMatch,
    #[serde(flatten)]
    pub set: QuirkSet,
    /// Where the entry comes from (`built-in` or `config`), for display.
    #[serde(skip)]
    pub origin: Origin,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Origin {
    #[default]
    BuiltIn,
    Config,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Origin::BuiltIn => "built-in",
            Origin::Config => "config",
        })
    }
}

/// What a driver knows about the BMC it talks to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BmcIdentity<'a> {
    pub protocol: Protocol,
    pub manufacturer: Option<&'a str>,
    /// Redfish: keys of the System's `Oem` object.
    pub oem_keys: Vec<&'a str>,
    pub model: Option<&'a str>,
    pub firmware: Option<&'a str>,
}

impl QuirkEntry {
    /// Whether this entry applies to `id`.
    pub fn matches(&self, id: &BmcIdentity<'_>) -> bool {
        if !self.protocol.covers(id.protocol) {
            return false;
        }
        let m = &self.matches;
        if !vendor_matches(&m.vendor, id.manufacturer, &id.oem_keys) {
            return false;
        }
        if let Some(pattern) = &m.model
            && !id.model.is_some_and(|model| glob_matches(pattern, model))
        {
            return false;
        }
        if let Some(range) = &m.firmware
            && !id.firmware.is_some_and(|fw| range.contains(fw))
        {
            return false;
        }
        true
    }
}

fn vendor_matches(vendor: &str, manufacturer: Option<&str>, oem_keys: &[&str]) -> bool {
    let want = vendor.trim().to_ascii_lowercase();
    if want.is_empty() {
        return false;
    }
    if oem_keys.iter().any(|k| k.eq_ignore_ascii_case(&want)) {
        return true;
    }
    let m = manufacturer.unwrap_or_default().trim().to_ascii_lowercase();
    // "hp" must not match "hpe": compare the first word, or the whole
    // vendor string as a prefix when it has several words.
    let first = m.split(|c: char| !c.is_ascii_alphanumeric()).next();
    first == Some(want.as_str()) || (want.contains(' ') && m.starts_with(&want)) || m == want
}

/// Case-insensitive match with `*` for any run of characters.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let p = pattern.to_ascii_lowercase();
    let t = text.trim().to_ascii_lowercase();
    let parts: Vec<&str> = p.split('*').collect();
    if parts.len() == 1 {
        return p == t;
    }
    let mut rest = t.as_str();
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(part) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            let Some(at) = rest.find(part) else {
                return false;
            };
            rest = &rest[at + part.len()..];
        }
    }
    true
}

/// The quirks in effect for one BMC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quirks {
    /// Names of the entries that applied, in order (empty: standard path).
    pub applied: Vec<String>,
    pub once_kept_as_continuous: bool,
    pub power_settle: Duration,
    pub on_reset_types: Vec<String>,
    pub cycle_reset_types: Vec<String>,
    pub graceful_off_reset_types: Vec<String>,
    pub boot_mode_with_override: BootModeWithOverride,
    pub boot_needs_etag: bool,
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_string()).collect()
}

impl Quirks {
    /// The standard path: what an unknown BMC gets.
    pub fn standard() -> Quirks {
        Quirks {
            applied: Vec::new(),
            once_kept_as_continuous: false,
            power_settle: Duration::ZERO,
            on_reset_types: strings(&["On", "ForceOn", "PushPowerButton"]),
            cycle_reset_types: strings(&["PowerCycle", "ForceRestart", "GracefulRestart"]),
            graceful_off_reset_types: strings(&["GracefulShutdown"]),
            boot_mode_with_override: BootModeWithOverride::WhenShown,
            boot_needs_etag: false,
        }
    }

    /// A short label for logs: the applied entries, or `standard`.
    pub fn label(&self) -> String {
        if self.applied.is_empty() {
            "standard".into()
        } else {
            self.applied.join(",")
        }
    }
}

impl Default for Quirks {
    fn default() -> Self {
        Quirks::standard()
    }
}

/// Built-in entries followed by the config's. Cheap to share (`Arc`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuirkTable {
    entries: Vec<QuirkEntry>,
}

impl Default for QuirkTable {
    fn default() -> Self {
        QuirkTable::builtin()
    }
}

impl QuirkTable {
    /// Only the built-in entries.
    pub fn builtin() -> QuirkTable {
        QuirkTable {
            entries: builtin::entries(),
        }
    }

    /// The built-in entries, then `extra` (which win where both set a field).
    pub fn with_entries(extra: Vec<QuirkEntry>) -> QuirkTable {
        let mut entries = builtin::entries();
        entries.extend(extra);
        QuirkTable { entries }
    }

    pub fn shared(self) -> Arc<QuirkTable> {
        Arc::new(self)
    }

    pub fn entries(&self) -> &[QuirkEntry] {
        &self.entries
    }

    /// The entries that match `id`, in order.
    pub fn matching<'a>(&'a self, id: &'a BmcIdentity<'_>) -> impl Iterator<Item = &'a QuirkEntry> {
        self.entries.iter().filter(move |e| e.matches(id))
    }

    /// The quirks in effect for `id`.
    pub fn resolve(&self, id: &BmcIdentity<'_>) -> Quirks {
        let mut q = Quirks::standard();
        for e in self.matching(id) {
            e.set.apply_to(&mut q);
            q.applied.push(e.name.clone());
        }
        q
    }
}
