//! What a DHCPv6 boot client is handed: which kind of client sent the
//! message (iPXE, UEFI HTTP boot, UEFI PXE, or none of them) and its Boot
//! File URL (option 59) and Vendor Class echo (16). The rules come from what
//! the firmware accepts (EDK2 NetworkPkg, iPXE `dhcpv6.c`):
//!
//! - iPXE says `iPXE` in its User Class (15) but `PXEClient` in its Vendor
//!   Class, so the User Class is looked at first; it gets the script URL;
//! - EDK2 HTTP boot (`HTTPClient`) needs option 16 echoed with
//!   `HTTPClient` and an `http://` URL with an IPv6 literal;
//! - EDK2 PXE (`PXEClient`) needs `tftp://[v6]/file`. It must not be told
//!   `PXEClient` in an offer that carries an address: that makes it send
//!   its Request again to port 4011 and fail unless something answers
//!   there. Only a proxy offer (no address) carries it.
//!
//! Pure: no I/O.

use std::net::Ipv6Addr;

use super::config::Dhcp6Settings;
use super::message::Msg;
use crate::dhcp::config::arch;

/// IANA enterprise number the UEFI clients put in their Vendor Class.
pub const ENTERPRISE_UEFI: u32 = 343;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientKind6 {
    Ipxe,
    HttpBoot,
    Pxe,
    /// No boot client: an OS's DHCPv6 client, or firmware's own address
    /// configuration.
    Plain,
}

impl ClientKind6 {
    pub fn of(m: &Msg) -> ClientKind6 {
        if m.is_ipxe() {
            ClientKind6::Ipxe
        } else if m.is_http_client() {
            ClientKind6::HttpBoot
        } else if m
            .vendor_class
            .as_ref()
            .is_some_and(|(_, d)| d.iter().any(|i| i.starts_with(b"PXEClient")))
        {
            ClientKind6::Pxe
        } else {
            ClientKind6::Plain
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            ClientKind6::Ipxe => "ipxe",
            ClientKind6::HttpBoot => "uefi-http",
            ClientKind6::Pxe => "uefi-pxe",
            ClientKind6::Plain => "plain",
        }
    }

    pub fn is_boot(self) -> bool {
        self != ClientKind6::Plain
    }
}

/// Option 59 and the Vendor Class item to echo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boot6 {
    pub url: String,
    pub vendor_class: Option<&'static [u8]>,
}

/// Why a boot client gets no boot URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoBoot {
    /// Nothing for its architecture in `bootFiles`.
    NoFile,
    /// No `httpBootUrl` / `ipxeScriptUrl` / server address to build it from.
    NoBase,
}

/// The boot URL for a client of `kind`; `Ok(None)` for a plain client.
/// `proxy`: the offer carries no address, so a PXE client may be told
/// `PXEClient` (and then asks on port 4011).
pub fn boot_for(
    kind: ClientKind6,
    m: &Msg,
    mac: Option<[u8; 6]>,
    cfg: &Dhcp6Settings,
    tftp_server: Option<Ipv6Addr>,
    secure: bool,
    proxy: bool,
) -> Result<Option<Boot6>, NoBoot> {
    let files = if secure {
        &cfg.secure_boot_files
    } else {
        &cfg.boot_files
    };
    Ok(Some(match kind {
        ClientKind6::Plain => return Ok(None),
        ClientKind6::Ipxe => {
            let a = m.first_arch().unwrap_or(arch::EFI_X86_64);
            let mac = mac
                .map(|m| crate::api::MacAddr(m).to_string())
                .unwrap_or_default();
            let t = match (&cfg.ipxe_script_url, &cfg.http_boot_url) {
                (Some(t), _) => t.clone(),
                (None, Some(base)) => format!("{base}/boot.ipxe?mac={{mac}}&arch={{arch}}"),
                (None, None) => return Err(NoBoot::NoBase),
            };
            Boot6 {
                url: t.replace("{mac}", &mac).replace("{arch}", &a.to_string()),
                vendor_class: None,
            }
        }
        ClientKind6::HttpBoot => {
            let a = m.first_arch().unwrap_or(arch::HTTP_X86_64);
            let f = files.get(&a).ok_or(NoBoot::NoFile)?;
            let url = if f.starts_with("http://") || f.starts_with("https://") {
                f.clone()
            } else {
                let base = cfg.http_boot_url.as_ref().ok_or(NoBoot::NoBase)?;
                format!("{base}/assets/{f}")
            };
            Boot6 {
                url,
                vendor_class: Some(b"HTTPClient"),
            }
        }
        ClientKind6::Pxe => {
            let a = m.first_arch().unwrap_or(arch::EFI_BC);
            let f = files.get(&a).ok_or(NoBoot::NoFile)?;
            let server = tftp_server.ok_or(NoBoot::NoBase)?;
            Boot6 {
                url: format!("tftp://[{server}]/{}", f.trim_start_matches('/')),
                vendor_class: proxy.then_some(b"PXEClient".as_slice()),
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dhcp::v6::config::Dhcp6Config;

    fn cfg() -> Dhcp6Settings {
        let c: Dhcp6Config = serde_yaml::from_str(
            "interface: eth1\nhttpBootUrl: \"http://[fd00:89::1]:8080\"\nsubnets: [{subnet: \"fd00:89::/64\"}]",
        )
        .unwrap();
        Dhcp6Settings::try_from(c).unwrap()
    }

    fn msg(user: &[&[u8]], vendor: Option<&[u8]>, arch: u16) -> Msg {
        Msg {
            user_class: user.iter().map(|u| u.to_vec()).collect(),
            vendor_class: vendor.map(|v| (343, vec![v.to_vec()])),
            arch: vec![arch],
            ..Msg::default()
        }
    }

    const SERVER: Option<Ipv6Addr> = Some(Ipv6Addr::new(0xfd00, 0x89, 0, 0, 0, 0, 0, 1));
    const MAC: Option<[u8; 6]> = Some([0x52, 0x54, 0, 0, 0, 1]);

    #[test]
    fn each_kind_gets_its_url() {
        let c = cfg();
        let ipxe = msg(&[b"iPXE"], Some(b"PXEClient:Arch:00007:UNDI:003010"), 7);
        assert_eq!(
            ClientKind6::of(&ipxe),
            ClientKind6::Ipxe,
            "user class first"
        );
        let b = boot_for(ClientKind6::Ipxe, &ipxe, MAC, &c, SERVER, false, false)
            .unwrap()
            .unwrap();
        assert_eq!(
            b.url,
            "http://[fd00:89::1]:8080/boot.ipxe?mac=52:54:00:00:00:01&arch=7"
        );
        let http = msg(&[], Some(b"HTTPClient:Arch:00016:UNDI:003000"), 16);
        let b = boot_for(ClientKind6::of(&http), &http, MAC, &c, SERVER, false, false)
            .unwrap()
            .unwrap();
        assert_eq!(b.url, "http://[fd00:89::1]:8080/assets/ipxe.efi");
        assert_eq!(b.vendor_class, Some(b"HTTPClient".as_slice()));
        let pxe = msg(&[], Some(b"PXEClient:Arch:00007:UNDI:003000"), 7);
        let b = boot_for(ClientKind6::of(&pxe), &pxe, MAC, &c, SERVER, false, false)
            .unwrap()
            .unwrap();
        assert_eq!(b.url, "tftp://[fd00:89::1]/ipxe.efi");
        assert_eq!(b.vendor_class, None, "no PXEClient beside an address");
        let b = boot_for(ClientKind6::Pxe, &pxe, MAC, &c, SERVER, false, true)
            .unwrap()
            .unwrap();
        assert_eq!(b.vendor_class, Some(b"PXEClient".as_slice()));
        let plain = msg(&[], None, 7);
        assert_eq!(ClientKind6::of(&plain), ClientKind6::Plain);
        assert_eq!(
            boot_for(ClientKind6::Plain, &plain, MAC, &c, SERVER, false, false),
            Ok(None)
        );
    }

    #[test]
    fn a_missing_file_or_server_is_said() {
        let c = cfg();
        let arm = msg(&[], Some(b"PXEClient:Arch:00011"), 11);
        assert_eq!(
            boot_for(ClientKind6::Pxe, &arm, MAC, &c, SERVER, false, false),
            Err(NoBoot::NoFile)
        );
        let pxe = msg(&[], Some(b"PXEClient"), 7);
        assert_eq!(
            boot_for(ClientKind6::Pxe, &pxe, MAC, &c, None, false, false),
            Err(NoBoot::NoBase)
        );
        let b = boot_for(ClientKind6::Pxe, &pxe, MAC, &c, SERVER, true, false)
            .unwrap()
            .unwrap();
        assert_eq!(b.url, "tftp://[fd00:89::1]/shimx64.efi");
    }
}
