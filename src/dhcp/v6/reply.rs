//! The server's DHCPv6 messages as bytes: Advertise and Reply with the
//! client's IA_NA and its address, status codes, and the network boot
//! options (Boot File URL 59 and its parameters 60, Vendor Class 16 naming
//! what the client asked as); wrapped in one Relay-reply per relay the
//! request came through, innermost first. Pure: no I/O.

use std::net::Ipv6Addr;

use super::message::{Duid, MessageType, Relay, opt};

/// RFC 8415 section 21.13.
pub mod status {
    pub const SUCCESS: u16 = 0;
    pub const UNSPEC_FAIL: u16 = 1;
    pub const NO_ADDRS_AVAIL: u16 = 2;
    pub const NO_BINDING: u16 = 3;
    pub const NOT_ON_LINK: u16 = 4;
}

/// The answer to one IA_NA: an address with its lifetimes, or a status
/// saying why there is none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IaAnswer {
    pub iaid: u32,
    pub t1: u32,
    pub t2: u32,
    /// (address, preferred lifetime, valid lifetime)
    pub addr: Option<(Ipv6Addr, u32, u32)>,
    pub status: Option<(u16, String)>,
}

/// What a server's message says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub msg_type: MessageType,
    pub xid: u32,
    pub server_id: Duid,
    pub client_id: Option<Duid>,
    pub ia_na: Vec<IaAnswer>,
    pub status: Option<(u16, String)>,
    pub preference: Option<u8>,
    pub rapid_commit: bool,
    pub boot_url: Option<String>,
    pub boot_params: Vec<String>,
    /// Vendor Class echoed to a boot client: enterprise number and item.
    pub vendor_class: Option<(u32, Vec<u8>)>,
    /// DNS Recursive Name Servers (23), written last (so option 59 is
    /// never the message's last: EDK2 HTTP boot reads it as a C string).
    pub dns: Vec<Ipv6Addr>,
}

fn put(out: &mut Vec<u8>, code: u16, data: &[u8]) {
    out.extend_from_slice(&code.to_be_bytes());
    // Every option written here is far below 64 KiB (the message is
    // bounded by the link's MTU); a longer one is cut, never wrapped.
    let len = u16::try_from(data.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&data[..usize::from(len)]);
}

fn status_data(code: u16, text: &str) -> Vec<u8> {
    let mut d = code.to_be_bytes().to_vec();
    d.extend_from_slice(text.as_bytes());
    d
}

/// Items of (u16 length, bytes), as User Class and Vendor Class carry them.
fn item(out: &mut Vec<u8>, b: &[u8]) {
    let len = u16::try_from(b.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&b[..usize::from(len)]);
}

impl Answer {
    /// The message's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.msg_type.code()];
        out.extend_from_slice(&self.xid.to_be_bytes()[1..]);
        put(&mut out, opt::SERVERID, &self.server_id.0);
        if let Some(c) = &self.client_id {
            put(&mut out, opt::CLIENTID, &c.0);
        }
        if let Some(p) = self.preference {
            put(&mut out, opt::PREFERENCE, &[p]);
        }
        if self.rapid_commit {
            put(&mut out, opt::RAPID_COMMIT, &[]);
        }
        if let Some((code, text)) = &self.status {
            put(&mut out, opt::STATUS_CODE, &status_data(*code, text));
        }
        for ia in &self.ia_na {
            let mut d = Vec::new();
            d.extend_from_slice(&ia.iaid.to_be_bytes());
            d.extend_from_slice(&ia.t1.to_be_bytes());
            d.extend_from_slice(&ia.t2.to_be_bytes());
            if let Some((a, preferred, valid)) = ia.addr {
                let mut iaaddr = a.octets().to_vec();
                iaaddr.extend_from_slice(&preferred.to_be_bytes());
                iaaddr.extend_from_slice(&valid.to_be_bytes());
                put(&mut d, opt::IAADDR, &iaaddr);
            }
            if let Some((code, text)) = &ia.status {
                put(&mut d, opt::STATUS_CODE, &status_data(*code, text));
            }
            put(&mut out, opt::IA_NA, &d);
        }
        if let Some(url) = &self.boot_url {
            put(&mut out, opt::BOOTFILE_URL, url.as_bytes());
        }
        if !self.boot_params.is_empty() {
            let mut d = Vec::new();
            for p in &self.boot_params {
                item(&mut d, p.as_bytes());
            }
            put(&mut out, opt::BOOTFILE_PARAM, &d);
        }
        if let Some((enterprise, data)) = &self.vendor_class {
            let mut d = enterprise.to_be_bytes().to_vec();
            item(&mut d, data);
            put(&mut out, opt::VENDOR_CLASS, &d);
        }
        if !self.dns.is_empty() {
            let d: Vec<u8> = self.dns.iter().flat_map(|a| a.octets()).collect();
            put(&mut out, opt::DNS_SERVERS, &d);
        }
        out
    }
}

/// `inner` wrapped in a Relay-reply for each relay the request came
/// through (`relays` outermost first, as [`super::Message`] reads them),
/// each echoing its relay's addresses and Interface-Id.
pub fn relay_reply(relays: &[Relay], inner: Vec<u8>) -> Vec<u8> {
    relays.iter().rev().fold(inner, |msg, r| {
        let mut out = vec![MessageType::RelayRepl.code(), r.hop_count];
        out.extend_from_slice(&r.link_addr.octets());
        out.extend_from_slice(&r.peer_addr.octets());
        if let Some(id) = &r.interface_id {
            put(&mut out, opt::INTERFACE_ID, id);
        }
        put(&mut out, opt::RELAY_MSG, &msg);
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dhcp::v6::message::{Msg, options};

    fn answer() -> Answer {
        Answer {
            msg_type: MessageType::Advertise,
            xid: 0x00ab_cdef,
            server_id: Duid::link_layer([2, 0, 0, 0, 0, 1]),
            client_id: Some(Duid::link_layer([2, 0, 0, 0, 0, 9])),
            ia_na: vec![IaAnswer {
                iaid: 7,
                t1: 1800,
                t2: 2880,
                addr: Some(("fd00:89::11".parse().unwrap(), 3600, 7200)),
                status: None,
            }],
            status: None,
            preference: Some(255),
            rapid_commit: false,
            boot_url: Some("tftp://[fd00:89::1]/ipxe.efi".into()),
            boot_params: vec![],
            vendor_class: Some((343, b"PXEClient".to_vec())),
            dns: vec![],
        }
    }

    #[test]
    fn an_advertise_reads_back() {
        let b = answer().encode();
        let m = Msg::decode(&b).unwrap();
        assert_eq!(m.msg_type, Some(MessageType::Advertise));
        assert_eq!(m.xid, 0x00ab_cdef);
        assert_eq!(m.server_id, Some(Duid::link_layer([2, 0, 0, 0, 0, 1])));
        assert_eq!(
            m.client_id.as_ref().and_then(Duid::mac),
            Some([2, 0, 0, 0, 0, 9])
        );
        assert_eq!(m.ia_na.len(), 1);
        assert_eq!(m.ia_na[0].iaid, 7);
        assert_eq!(
            m.ia_na[0].addrs,
            vec!["fd00:89::11".parse::<Ipv6Addr>().unwrap()]
        );
        assert_eq!(m.boot_url.as_deref(), Some("tftp://[fd00:89::1]/ipxe.efi"));
        assert_eq!(m.preference, Some(255));
        assert_eq!(m.vendor_class, Some((343, vec![b"PXEClient".to_vec()])));
    }

    #[test]
    fn a_status_and_boot_parameters_are_written() {
        let mut a = answer();
        a.msg_type = MessageType::Reply;
        a.ia_na[0].addr = None;
        a.ia_na[0].status = Some((status::NO_ADDRS_AVAIL, "pool exhausted".into()));
        a.boot_params = vec!["ip=dhcp6".into(), "console=ttyS0".into()];
        let b = a.encode();
        let params = options(&b[4..])
            .find(|(c, _)| *c == opt::BOOTFILE_PARAM)
            .and_then(|(_, d)| d.ok())
            .unwrap();
        assert_eq!(params, b"\0\x08ip=dhcp6\0\x0dconsole=ttyS0");
        let m = Msg::decode(&b).unwrap();
        assert!(m.ia_na[0].addrs.is_empty());
    }

    #[test]
    fn relay_replies_wrap_innermost_first() {
        let relays = [
            Relay {
                hop_count: 1,
                link_addr: "fd00:1::1".parse().unwrap(),
                peer_addr: "fe80::2".parse().unwrap(),
                interface_id: Some(b"outer".to_vec()),
                client_mac: None,
            },
            Relay {
                hop_count: 0,
                link_addr: "fd00:2::1".parse().unwrap(),
                peer_addr: "fe80::9".parse().unwrap(),
                interface_id: Some(b"inner".to_vec()),
                client_mac: None,
            },
        ];
        let inner = answer().encode();
        let b = relay_reply(&relays, inner.clone());
        assert_eq!(b[0], MessageType::RelayRepl.code());
        assert_eq!(b[1], 1, "the outermost relay's hop count");
        let opts: Vec<(u16, Vec<u8>)> = options(&b[34..])
            .map(|(c, d)| (c, d.unwrap().to_vec()))
            .collect();
        assert_eq!(opts[0], (opt::INTERFACE_ID, b"outer".to_vec()));
        let next = &opts[1].1;
        assert_eq!(next[1], 0);
        let deepest = options(&next[34..])
            .find(|(c, _)| *c == opt::RELAY_MSG)
            .and_then(|(_, d)| d.ok())
            .unwrap();
        assert_eq!(deepest, inner.as_slice());
    }
}
