//! What the DHCP server tells the rest of metalherd about clients it does
//! not know: a plain [`DiscoveredClient`] value on a bounded channel. The
//! packet path only does a non-blocking send and counts a full queue; the
//! composition root connects the receiving end to the store
//! (`crate::discovery`). No store here.

use std::net::Ipv4Addr;
use std::time::Duration;

use super::policy::Discovered;

/// How often a client that keeps asking is reported again.
pub const REFRESH: Duration = Duration::from_secs(60);

/// An unknown client as DHCP saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveredClient {
    pub mac: [u8; 6],
    /// Client architecture (option 93) by name, e.g. `efi-x86_64`.
    pub architecture: Option<String>,
    pub vendor_class: Option<String>,
    pub address: Option<Ipv4Addr>,
}

impl From<Discovered> for DiscoveredClient {
    fn from(d: Discovered) -> Self {
        DiscoveredClient {
            mac: d.mac,
            architecture: d.arch.map(arch_name),
            vendor_class: d.vendor_class,
            address: d.address,
        }
    }
}

/// Object name for a MAC: `mac-525400123456`.
pub fn object_name(mac: &[u8; 6]) -> String {
    format!("mac-{}", hex::encode(mac))
}

fn arch_name(a: u16) -> String {
    use super::config::arch::*;
    match a {
        X86_BIOS => "x86-bios".into(),
        EFI_IA32 => "efi-ia32".into(),
        EFI_BC | EFI_X86_64 => "efi-x86_64".into(),
        EFI_ARM64 => "efi-arm64".into(),
        HTTP_X86 => "http-x86".into(),
        HTTP_X86_64 => "http-x86_64".into(),
        HTTP_ARM64 => "http-arm64".into(),
        n => format!("arch-{n}"),
    }
}
