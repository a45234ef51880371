//! Vendor differences, as data. One table keyed by the system's
//! `Manufacturer` (prefix, case-insensitive) or by a key under its `Oem`
//! object; the driver reads fields of [`Quirks`] and never tests vendor
//! names itself.

/// How one vendor's Redfish differs from the standard path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quirks {
    /// Name for logs and metrics labels.
    pub vendor: &'static str,
    /// Send `If-Match` with the resource's ETag on the Boot PATCH up front
    /// (the driver also retries with it after a 412/428 on any vendor).
    pub boot_needs_etag: bool,
    /// Put `BootSourceOverrideMode` in the same PATCH as the target. Some
    /// firmware changes the mode only through a BIOS settings job and rejects
    /// it here; then the mode is left as it is and only read back.
    pub boot_mode_in_patch: bool,
    /// ResetType preferences for a power cycle of a server that is on, best
    /// first; the first one the BMC allows is used.
    pub cycle_reset_types: &'static [&'static str],
    /// ResetType preferences for a graceful power off.
    pub graceful_off_reset_types: &'static [&'static str],
}

/// Standard Redfish: what an unknown vendor (and sushy-tools) gets.
pub const STANDARD: Quirks = Quirks {
    vendor: "generic",
    boot_needs_etag: false,
    boot_mode_in_patch: true,
    cycle_reset_types: &["PowerCycle", "ForceRestart", "GracefulRestart"],
    graceful_off_reset_types: &["GracefulShutdown"],
};

/// `(manufacturer prefix, Oem key, quirks)`; first match wins.
static TABLE: &[(&str, &str, Quirks)] = &[
    (
        "dell",
        "Dell",
        // iDRAC changes the boot mode only through a BIOS job; a PATCH that
        // includes it is rejected on older firmware. It allows PowerCycle
        // from iDRAC 9 4.x; older lists only ForceRestart.
        Quirks {
            vendor: "dell",
            boot_mode_in_patch: false,
            ..STANDARD
        },
    ),
    (
        "hpe",
        "Hpe",
        // iLO 5 offers PushPowerButton next to GracefulShutdown and answers
        // PATCHes with an ETag it then expects in If-Match.
        Quirks {
            vendor: "hpe",
            boot_needs_etag: true,
            cycle_reset_types: &["ForceRestart", "GracefulRestart"],
            graceful_off_reset_types: &["GracefulShutdown", "PushPowerButton"],
            ..STANDARD
        },
    ),
    (
        "hp",
        "Hp",
        // iLO 4 (Oem "Hp") has no BootSourceOverrideMode at all.
        Quirks {
            vendor: "hpe",
            boot_mode_in_patch: false,
            cycle_reset_types: &["ForceRestart"],
            graceful_off_reset_types: &["GracefulShutdown", "PushPowerButton"],
            ..STANDARD
        },
    ),
    (
        "supermicro",
        "Supermicro",
        // X12/X13 firmware refuses a Boot PATCH without If-Match (412).
        Quirks {
            vendor: "supermicro",
            boot_needs_etag: true,
            ..STANDARD
        },
    ),
    (
        "lenovo",
        "Lenovo",
        // XCC: standard path; PowerCycle is not offered, ForceRestart is.
        Quirks {
            vendor: "lenovo",
            cycle_reset_types: &["ForceRestart", "PowerCycle", "GracefulRestart"],
            ..STANDARD
        },
    ),
    (
        "ami",
        "Ami",
        // MegaRAC: Boot changes go to the `@Redfish.Settings` object (/SD)
        // and need If-Match.
        Quirks {
            vendor: "ami",
            boot_needs_etag: true,
            ..STANDARD
        },
    ),
    (
        "american megatrends",
        "AMI",
        Quirks {
            vendor: "ami",
            boot_needs_etag: true,
            ..STANDARD
        },
    ),
];

/// The quirks for a system, from its Manufacturer and the keys of its `Oem`.
pub fn quirks_for<'a>(
    manufacturer: Option<&str>,
    oem_keys: impl IntoIterator<Item = &'a str> + Clone,
) -> &'static Quirks {
    let m = manufacturer.unwrap_or_default().trim().to_ascii_lowercase();
    for (prefix, oem, q) in TABLE {
        // "hp" must not match "hpe": compare whole words of the manufacturer.
        let word_match = m
            .split(|c: char| !c.is_ascii_alphanumeric())
            .next()
            .is_some_and(|first| first == *prefix)
            || (prefix.contains(' ') && m.starts_with(prefix));
        if word_match || oem_keys.clone().into_iter().any(|k| k == *oem) {
            return q;
        }
    }
    &STANDARD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendors_are_found_by_manufacturer_or_oem() {
        assert_eq!(quirks_for(Some("Dell Inc."), []).vendor, "dell");
        assert_eq!(quirks_for(Some("HPE"), []).vendor, "hpe");
        assert!(quirks_for(Some("HPE"), []).boot_needs_etag);
        assert!(!quirks_for(Some("HP"), []).boot_mode_in_patch);
        assert_eq!(quirks_for(Some("Supermicro"), []).vendor, "supermicro");
        assert_eq!(quirks_for(Some("Lenovo"), []).vendor, "lenovo");
        assert_eq!(
            quirks_for(Some("American Megatrends International"), []).vendor,
            "ami"
        );
        assert_eq!(quirks_for(None, ["Ami"]).vendor, "ami");
        assert_eq!(quirks_for(Some("Sushy Emulator"), []).vendor, "generic");
        assert_eq!(quirks_for(None, []).vendor, "generic");
    }
}
