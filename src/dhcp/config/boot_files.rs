//! The boot-file tables: by option-93 architecture, what firmware is
//! handed (`bootFiles`), and what a Secure Boot machine's firmware is
//! handed (`secureBootFiles`); each the defaults with the config's entries
//! over them.

use std::collections::BTreeMap;

use super::arch::*;
use super::{ConfigError, err};

/// The boot-file table used when the config names none for an
/// architecture: only what boot-assets/ holds, each for the architecture
/// it was built for (x86 BIOS and x86-64 UEFI). 32-bit UEFI (6, 15) and
/// arm64 (11, 19) get nothing rather than an x86-64 binary they cannot
/// run: a site with such machines adds its own build under `bootFiles`.
pub fn default_boot_files() -> BTreeMap<u16, String> {
    [
        (X86_BIOS, "undionly.kpxe"),
        (EFI_BC, "ipxe.efi"),
        (EFI_X86_64, "ipxe.efi"),
        (HTTP_X86_64, "ipxe.efi"),
    ]
    .into_iter()
    .map(|(a, f)| (a, f.to_string()))
    .collect()
}

/// The boot file a Secure Boot machine gets by default: the shim signed by
/// Microsoft's UEFI CA, which firmware trusts out of the box; it loads
/// `grubx64.efi` (signed GRUB) from the same place. PXE only: Debian's
/// signed network GRUB reads everything over TFTP, so a Secure Boot
/// machine that asks for UEFI HTTP boot gets nothing (and DHCP warns)
/// unless a site names a loader for it.
pub fn default_secure_boot_files() -> BTreeMap<u16, String> {
    [(EFI_BC, "shimx64.efi"), (EFI_X86_64, "shimx64.efi")]
        .into_iter()
        .map(|(a, f)| (a, f.to_string()))
        .collect()
}

/// `extra` over `files`, each name checked (`field` names the key in
/// errors).
pub(crate) fn merge_files(
    field: &str,
    mut files: BTreeMap<u16, String>,
    extra: BTreeMap<u16, String>,
) -> Result<BTreeMap<u16, String>, ConfigError> {
    for (a, f) in extra {
        if f.is_empty() || f.len() > 127 || f.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(err(
                format!("{field}.{a}"),
                "must be 1..127 bytes without whitespace",
            ));
        }
        files.insert(a, f);
    }
    Ok(files)
}
