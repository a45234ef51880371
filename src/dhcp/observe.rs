//! What the DHCP driver read, for watchers outside the server: `hw-test`
//! runs the driver in proxy mode, answering nothing, to see a server's
//! firmware PXE-boot. One [`Seen`] per well-formed request, read by the
//! same strict [`Request`] parser the policy uses. Pure: no I/O; the
//! driver hands these out without waiting (a slow watcher misses
//! packets, it never slows the server).

use dhcproto::v4::MessageType;

use super::packet::Request;

/// One request as a watcher needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub mac: [u8; 6],
    pub msg_type: MessageType,
    /// Option 60, e.g. `PXEClient:Arch:00007:UNDI:003016`.
    pub vendor_class: Option<String>,
    /// Option 93 (first value).
    pub arch: Option<u16>,
    /// Option 77 names iPXE (a chained iPXE, not the firmware).
    pub ipxe: bool,
}

impl Seen {
    /// Read `bytes` as the policy would; None for what it would drop as
    /// malformed.
    pub fn parse(bytes: &[u8]) -> Option<Seen> {
        Request::parse(bytes).ok().map(|r| Seen::of(&r))
    }

    pub fn of(r: &Request) -> Seen {
        Seen {
            mac: r.mac,
            msg_type: r.msg_type,
            vendor_class: r.vendor_class(),
            arch: r.arch(),
            ipxe: r.is_ipxe(),
        }
    }

    /// A network boot starting: a DHCPDISCOVER with the `PXEClient` vendor
    /// class (RFC 4578; firmware PXE and iPXE both send it).
    pub fn is_pxe_discover(&self) -> bool {
        self.msg_type == MessageType::Discover
            && self
                .vendor_class
                .as_deref()
                .is_some_and(|v| v.starts_with("PXEClient"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dhcp::packet::tests::raw_request;

    const MAC: [u8; 6] = [0x52, 0x54, 0, 0x4d, 0x48, 1];

    #[test]
    fn a_firmware_pxe_discover_is_one() {
        let b = raw_request(
            MAC,
            &[
                (53, &[1]),
                (60, b"PXEClient:Arch:00007:UNDI:003016"),
                (93, &[0, 7]),
            ],
        );
        let s = Seen::parse(&b).unwrap();
        assert_eq!(s.mac, MAC);
        assert_eq!(s.arch, Some(7));
        assert!(!s.ipxe);
        assert!(s.is_pxe_discover());
    }

    #[test]
    fn an_os_dhcp_client_or_a_request_is_not_a_pxe_boot() {
        let os = raw_request(MAC, &[(53, &[1]), (60, b"udhcp 1.35.0")]);
        assert!(!Seen::parse(&os).unwrap().is_pxe_discover());
        let none = raw_request(MAC, &[(53, &[1])]);
        assert!(!Seen::parse(&none).unwrap().is_pxe_discover());
        let req = raw_request(MAC, &[(53, &[3]), (60, b"PXEClient:Arch:00007")]);
        assert!(!Seen::parse(&req).unwrap().is_pxe_discover());
    }

    #[test]
    fn a_malformed_packet_is_not_seen() {
        assert_eq!(Seen::parse(&[1, 2, 3]), None);
        let mut b = raw_request(MAC, &[(53, &[1])]);
        b[236] = 0;
        assert_eq!(Seen::parse(&b), None);
    }
}
