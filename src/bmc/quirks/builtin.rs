//! The quirks metalherd ships with, in the same shape as the config's
//! `bmc.quirks:` entries (config entries come after these and win). Each
//! entry says why it exists.

use super::{BootModeWithOverride, Origin, Protocol, QuirkEntry, QuirkMatch, QuirkSet};

fn types(v: &[&str]) -> Option<Vec<String>> {
    Some(v.iter().map(|s| (*s).to_string()).collect())
}

fn entry(name: &str, protocol: Protocol, vendor: &str, set: QuirkSet) -> QuirkEntry {
    QuirkEntry {
        name: name.to_string(),
        protocol,
        matches: QuirkMatch {
            vendor: vendor.to_string(),
            model: None,
            firmware: None,
        },
        set,
        origin: Origin::BuiltIn,
    }
}

/// The built-in table.
pub fn entries() -> Vec<QuirkEntry> {
    vec![
        // iDRAC changes the boot mode only through a BIOS job; a PATCH that
        // includes it is rejected on older firmware.
        entry(
            "dell-idrac",
            Protocol::Redfish,
            "dell",
            QuirkSet {
                boot_mode_with_override: Some(BootModeWithOverride::Never),
                ..QuirkSet::default()
            },
        ),
        // iLO 5 offers PushPowerButton next to GracefulShutdown and answers
        // PATCHes with an ETag it then expects in If-Match.
        entry(
            "hpe-ilo5",
            Protocol::Redfish,
            "hpe",
            QuirkSet {
                boot_needs_etag: Some(true),
                cycle_reset_types: types(&["ForceRestart", "GracefulRestart"]),
                graceful_off_reset_types: types(&["GracefulShutdown", "PushPowerButton"]),
                ..QuirkSet::default()
            },
        ),
        // iLO 4 (Oem "Hp") has no BootSourceOverrideMode at all.
        entry(
            "hp-ilo4",
            Protocol::Redfish,
            "hp",
            QuirkSet {
                boot_mode_with_override: Some(BootModeWithOverride::Never),
                cycle_reset_types: types(&["ForceRestart"]),
                graceful_off_reset_types: types(&["GracefulShutdown", "PushPowerButton"]),
                ..QuirkSet::default()
            },
        ),
        // X12/X13 firmware refuses a Boot PATCH without If-Match (412).
        entry(
            "supermicro-etag",
            Protocol::Redfish,
            "supermicro",
            QuirkSet {
                boot_needs_etag: Some(true),
                ..QuirkSet::default()
            },
        ),
        // XCC: PowerCycle is not offered, ForceRestart is.
        entry(
            "lenovo-xcc",
            Protocol::Redfish,
            "lenovo",
            QuirkSet {
                cycle_reset_types: types(&["ForceRestart", "PowerCycle", "GracefulRestart"]),
                ..QuirkSet::default()
            },
        ),
        // MegaRAC: Boot changes go to the `@Redfish.Settings` object (/SD)
        // and need If-Match.
        entry(
            "ami-megarac",
            Protocol::Redfish,
            "ami",
            QuirkSet {
                boot_needs_etag: Some(true),
                ..QuirkSet::default()
            },
        ),
        entry(
            "ami-megarac-long-name",
            Protocol::Redfish,
            "american megatrends",
            QuirkSet {
                boot_needs_etag: Some(true),
                ..QuirkSet::default()
            },
        ),
        // sushy-tools (fake and libvirt drivers) ignores
        // BootSourceOverrideEnabled and always reads back `Continuous`.
        entry(
            "sushy-tools",
            Protocol::Redfish,
            "sushy emulator",
            QuirkSet {
                once_kept_as_continuous: Some(true),
                ..QuirkSet::default()
            },
        ),
    ]
}
