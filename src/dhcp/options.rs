//! What a client is (plain, PXE firmware, UEFI HTTP boot, iPXE) and the
//! boot information it gets; building and encoding replies with dhcproto.
//! Pure: no I/O, no lookups.

use std::net::Ipv4Addr;

use dhcproto::v4::{
    DhcpOption, Flags, HType, Message, MessageType, Opcode, OptionCode, UnknownOption,
};
use dhcproto::{Encodable, Encoder};

use super::config::DhcpSettings;
use super::packet::{DropReason, Request};

/// What kind of network-boot client sent a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientKind {
    /// An ordinary DHCP client: network options only.
    Plain,
    /// PXE firmware (option 60 `PXEClient...`): a TFTP boot file.
    Pxe,
    /// UEFI HTTP boot (option 60 `HTTPClient...`): an http URL.
    HttpBoot,
    /// iPXE (option 77 `iPXE`): the URL of its boot script.
    Ipxe,
}

impl ClientKind {
    pub fn of(req: &Request) -> ClientKind {
        if req.is_ipxe() {
            return ClientKind::Ipxe;
        }
        match req.opt(60) {
            Some(v) if v.starts_with(b"HTTPClient") => ClientKind::HttpBoot,
            Some(v) if v.starts_with(b"PXEClient") => ClientKind::Pxe,
            _ => ClientKind::Plain,
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            ClientKind::Plain => "plain",
            ClientKind::Pxe => "pxe",
            ClientKind::HttpBoot => "http",
            ClientKind::Ipxe => "ipxe",
        }
    }
}

/// Boot information for one reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootInfo {
    /// `file` field and option 67.
    pub file: String,
    /// siaddr (TFTP server), for TFTP boot files.
    pub next_server: Option<Ipv4Addr>,
    /// Option 60 to echo (`PXEClient` / `HTTPClient`).
    pub vendor_class: Option<&'static str>,
}

/// The iPXE script URL for a client: `{mac}` and `{arch}` filled in.
pub fn ipxe_url(cfg: &DhcpSettings, mac: &str, arch: u16) -> Option<String> {
    let t = match (&cfg.ipxe_script_url, &cfg.http_boot_url) {
        (Some(t), _) => t.clone(),
        (None, Some(base)) => format!("{base}/boot.ipxe?mac={{mac}}&arch={{arch}}"),
        (None, None) => return None,
    };
    Some(t.replace("{mac}", mac).replace("{arch}", &arch.to_string()))
}

/// Decide the boot information for a client; `Ok(None)` for plain clients.
/// `secure`: the client is a Machine whose firmware enforces Secure Boot;
/// its firmware gets the signed loader of `secureBootFiles` (iPXE, if a
/// site's signed build runs, still gets its script URL).
pub fn boot_info(
    req: &Request,
    cfg: &DhcpSettings,
    server_ip: Ipv4Addr,
    secure: bool,
) -> Result<Option<BootInfo>, DropReason> {
    let arch = req.arch().unwrap_or(super::config::arch::X86_BIOS);
    let next = cfg.next_server.unwrap_or(server_ip);
    let files = if secure {
        &cfg.secure_boot_files
    } else {
        &cfg.boot_files
    };
    Ok(Some(match ClientKind::of(req) {
        ClientKind::Plain => return Ok(None),
        ClientKind::Ipxe => BootInfo {
            file: ipxe_url(cfg, &req.mac_str(), arch).ok_or(DropReason::NoBootFile)?,
            next_server: Some(next),
            vendor_class: None,
        },
        ClientKind::HttpBoot => {
            let f = files.get(&arch).ok_or(DropReason::NoBootFile)?;
            let file = if f.starts_with("http://") || f.starts_with("https://") {
                f.clone()
            } else {
                // The boot HTTP server serves boot files under /assets/.
                let base = cfg.http_boot_url.as_ref().ok_or(DropReason::NoBootFile)?;
                format!("{base}/assets/{f}")
            };
            BootInfo {
                file,
                next_server: None,
                vendor_class: Some("HTTPClient"),
            }
        }
        ClientKind::Pxe => BootInfo {
            file: files.get(&arch).ok_or(DropReason::NoBootFile)?.clone(),
            next_server: Some(next),
            vendor_class: Some("PXEClient"),
        },
    }))
}

/// A reply skeleton for `req`: BOOTREPLY, same xid, flags, giaddr, chaddr,
/// message type and server identifier.
pub fn reply(req: &Request, t: MessageType, server_ip: Ipv4Addr) -> Message {
    let mut m = Message::new_with_id(
        req.xid,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        req.giaddr,
        &req.mac,
    );
    m.set_opcode(Opcode::BootReply)
        .set_htype(HType::Eth)
        .set_flags(if req.broadcast {
            Flags::default().set_broadcast()
        } else {
            Flags::default()
        });
    let o = m.opts_mut();
    o.insert(DhcpOption::MessageType(t));
    o.insert(DhcpOption::ServerIdentifier(server_ip));
    m
}

/// Put boot information into a reply (file field, siaddr, 66/67, 60, 43, 97).
pub fn add_boot(m: &mut Message, req: &Request, b: &BootInfo) {
    if b.file.len() < 128 {
        m.set_fname_str(&b.file);
    }
    m.opts_mut()
        .insert(DhcpOption::BootfileName(b.file.as_bytes().to_vec()));
    if let Some(n) = b.next_server {
        m.set_siaddr(n);
        m.opts_mut()
            .insert(DhcpOption::TFTPServerName(n.to_string().into_bytes()));
    }
    if let Some(v) = b.vendor_class {
        m.opts_mut()
            .insert(DhcpOption::ClassIdentifier(v.as_bytes().to_vec()));
        if v == "PXEClient" {
            // PXE discovery control: no boot-server discovery, use the file.
            m.opts_mut()
                .insert(DhcpOption::VendorExtensions(vec![6, 1, 8, 255]));
        }
    }
    if let Some(uuid) = req.opt(97) {
        m.opts_mut()
            .insert(DhcpOption::ClientMachineIdentifier(uuid.to_vec()));
    }
}

/// iPXE's encapsulated option 175.176 (`no-pxedhcp` = 1): tells iPXE no
/// ProxyDHCP offer will come. Without it iPXE holds back its REQUEST for
/// up to three seconds, waiting for one, on every boot.
pub fn ipxe_no_proxydhcp(m: &mut Message) {
    m.opts_mut().insert(DhcpOption::Unknown(UnknownOption::new(
        OptionCode::from(175),
        vec![176, 1, 1],
    )));
}

/// Echo option 82 byte for byte (RFC 3046); dhcproto writes it last.
pub fn echo_relay_info(m: &mut Message, req: &Request) {
    if let Some(v) = req.opt(82) {
        m.opts_mut().insert(DhcpOption::Unknown(UnknownOption::new(
            OptionCode::RelayAgentInformation,
            v.to_vec(),
        )));
    }
}

/// Encode a reply, padded to the BOOTP minimum of 300 bytes.
pub fn encode(m: &Message) -> Option<Vec<u8>> {
    let mut buf = Vec::with_capacity(576);
    m.encode(&mut Encoder::new(&mut buf)).ok()?;
    if buf.len() < 300 {
        buf.resize(300, 0);
    }
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dhcp::packet::tests::raw_request;

    fn settings() -> DhcpSettings {
        let c: super::super::config::DhcpConfig = serde_yaml::from_str(
            "interface: eth0\nmode: proxy\nhttpBootUrl: http://10.0.0.1:8080\n",
        )
        .unwrap();
        DhcpSettings::try_from(c).unwrap()
    }

    #[test]
    fn boot_file_by_arch_and_kind() {
        let s = settings();
        let ip = Ipv4Addr::new(10, 0, 0, 1);
        let mac = [2, 0, 0, 0, 0, 1];
        let bios = Request::parse(&raw_request(
            mac,
            &[(53, &[1]), (60, b"PXEClient:Arch:00000"), (93, &[0, 0])],
        ))
        .unwrap();
        assert_eq!(
            boot_info(&bios, &s, ip, false).unwrap().unwrap().file,
            "undionly.kpxe"
        );
        let efi = Request::parse(&raw_request(
            mac,
            &[(53, &[1]), (60, b"PXEClient:Arch:00007"), (93, &[0, 7])],
        ))
        .unwrap();
        assert_eq!(
            boot_info(&efi, &s, ip, false).unwrap().unwrap().file,
            "ipxe.efi"
        );
        let arm = Request::parse(&raw_request(
            mac,
            &[(53, &[1]), (60, b"PXEClient"), (93, &[0, 11])],
        ))
        .unwrap();
        // boot-assets/ holds no arm64 binary: nothing rather than x86-64.
        assert_eq!(boot_info(&arm, &s, ip, false), Err(DropReason::NoBootFile));
        let http = Request::parse(&raw_request(
            mac,
            &[(53, &[1]), (60, b"HTTPClient:Arch:00016"), (93, &[0, 16])],
        ))
        .unwrap();
        let b = boot_info(&http, &s, ip, false).unwrap().unwrap();
        assert_eq!(b.file, "http://10.0.0.1:8080/assets/ipxe.efi");
        assert_eq!(b.vendor_class, Some("HTTPClient"));
        let ipxe = Request::parse(&raw_request(
            mac,
            &[(53, &[1]), (60, b"PXEClient"), (77, b"iPXE"), (93, &[0, 7])],
        ))
        .unwrap();
        assert_eq!(
            boot_info(&ipxe, &s, ip, false).unwrap().unwrap().file,
            "http://10.0.0.1:8080/boot.ipxe?mac=02:00:00:00:00:01&arch=7"
        );
        let plain = Request::parse(&raw_request(mac, &[(53, &[1])])).unwrap();
        assert_eq!(boot_info(&plain, &s, ip, false).unwrap(), None);
    }

    #[test]
    fn secure_boot_machines_get_the_signed_loader() {
        let s = settings();
        let ip = Ipv4Addr::new(10, 0, 0, 1);
        let mac = [2, 0, 0, 0, 0, 1];
        let efi = Request::parse(&raw_request(
            mac,
            &[(53, &[1]), (60, b"PXEClient:Arch:00007"), (93, &[0, 7])],
        ))
        .unwrap();
        assert_eq!(
            boot_info(&efi, &s, ip, true).unwrap().unwrap().file,
            "shimx64.efi"
        );
        let http = Request::parse(&raw_request(
            mac,
            &[(53, &[1]), (60, b"HTTPClient:Arch:00016"), (93, &[0, 16])],
        ))
        .unwrap();
        // Debian's signed GRUB has no HTTP: no signed loader for HTTP boot.
        assert_eq!(boot_info(&http, &s, ip, true), Err(DropReason::NoBootFile));
        // No signed loader for legacy BIOS (there is no Secure Boot there).
        let bios = Request::parse(&raw_request(
            mac,
            &[(53, &[1]), (60, b"PXEClient:Arch:00000"), (93, &[0, 0])],
        ))
        .unwrap();
        assert_eq!(boot_info(&bios, &s, ip, true), Err(DropReason::NoBootFile));
        // A signed iPXE runs as iPXE: it still gets its script URL.
        let ipxe = Request::parse(&raw_request(
            mac,
            &[(53, &[1]), (60, b"PXEClient"), (77, b"iPXE"), (93, &[0, 7])],
        ))
        .unwrap();
        assert!(
            boot_info(&ipxe, &s, ip, true)
                .unwrap()
                .unwrap()
                .file
                .contains("/boot.ipxe?")
        );
        // A site's own signed loader replaces the default.
        let c: super::super::config::DhcpConfig = serde_yaml::from_str(
            "interface: eth0\nmode: proxy\nhttpBootUrl: http://10.0.0.1:8080\n\
             secureBootFiles: {7: ipxe-signed.efi}\n",
        )
        .unwrap();
        let site = DhcpSettings::try_from(c).unwrap();
        assert_eq!(
            boot_info(&efi, &site, ip, true).unwrap().unwrap().file,
            "ipxe-signed.efi"
        );
        assert_eq!(
            boot_info(&efi, &site, ip, false).unwrap().unwrap().file,
            "ipxe.efi"
        );
    }
}
