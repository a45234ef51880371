//! Strict reading of a DHCPv4 request from raw bytes. dhcproto decodes a
//! truncated option or a missing magic cookie as Ok and keeps only the first
//! value of option 93, so requests are read here, over the raw buffer, and
//! every malformation is a typed [`DropReason`] reason. Pure: no I/O.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use dhcproto::v4::MessageType;

/// Smallest BOOTP message (RFC 951 header + cookie) we read.
pub const MIN_LEN: usize = 240;
/// Largest request accepted; anything bigger is a counted drop.
pub const MAX_LEN: usize = 1500;
const MAGIC: [u8; 4] = [99, 130, 83, 99];

/// Why a packet got no reply. Variants are metric labels: keep them few.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum DropReason {
    #[error("truncated")]
    Truncated,
    #[error("oversized")]
    Oversized,
    #[error("bad magic cookie")]
    BadCookie,
    #[error("not a BOOTREQUEST")]
    NotRequest,
    #[error("not ethernet")]
    NotEthernet,
    #[error("malformed option")]
    BadOption,
    #[error("no or unknown message type")]
    NoMessageType,
    #[error("addressed to another server")]
    OtherServer,
    #[error("no subnet for this request")]
    NoSubnet,
    #[error("unknown client")]
    UnknownClient,
    #[error("pool exhausted")]
    PoolExhausted,
    #[error("not a PXE client")]
    NotPxe,
    #[error("no boot file for this architecture")]
    NoBootFile,
    #[error("message type not handled")]
    Unhandled,
    #[error("reserved address held by another client")]
    ReservationInUse,
    #[error("no lease to act on")]
    NoLease,
    #[error("relayed (giaddr) by a relay no subnet lists")]
    UnlistedRelay,
    #[error("DECLINE of a declared machine's reserved address (ignored)")]
    DeclinedReservation,
    #[error("over the client's rate limit")]
    RateLimitedClient,
    #[error("over the global rate limit for unknown clients")]
    RateLimited,
}

impl DropReason {
    /// Stable label for metrics.
    pub fn label(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::Oversized => "oversized",
            DropReason::BadCookie => "bad_cookie",
            DropReason::NotRequest => "not_request",
            DropReason::NotEthernet => "not_ethernet",
            DropReason::BadOption => "bad_option",
            DropReason::NoMessageType => "no_message_type",
            DropReason::OtherServer => "other_server",
            DropReason::NoSubnet => "no_subnet",
            DropReason::UnknownClient => "unknown_client",
            DropReason::PoolExhausted => "pool_exhausted",
            DropReason::NotPxe => "not_pxe",
            DropReason::NoBootFile => "no_boot_file",
            DropReason::Unhandled => "unhandled",
            DropReason::ReservationInUse => "reservation_in_use",
            DropReason::NoLease => "no_lease",
            DropReason::UnlistedRelay => "unlisted_relay",
            DropReason::DeclinedReservation => "declined_reservation",
            DropReason::RateLimitedClient => "rate_limited_client",
            DropReason::RateLimited => "rate_limited",
        }
    }
}

/// A request, read strictly. Options keep their raw bytes (repeated
/// options are concatenated, RFC 3396).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub msg_type: MessageType,
    pub xid: u32,
    pub secs: u16,
    pub broadcast: bool,
    pub hops: u8,
    pub ciaddr: Ipv4Addr,
    pub giaddr: Ipv4Addr,
    pub mac: [u8; 6],
    pub opts: BTreeMap<u8, Vec<u8>>,
}

fn ip_at(b: &[u8], at: usize) -> Ipv4Addr {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    Ipv4Addr::from(a)
}

/// Read a list of options (code, len, data) until End, concatenating repeats.
fn read_options(mut b: &[u8], opts: &mut BTreeMap<u8, Vec<u8>>) -> Result<bool, DropReason> {
    loop {
        let Some((&code, rest)) = b.split_first() else {
            // Ran out without an End: tolerated (many clients pad to 300 bytes).
            return Ok(false);
        };
        match code {
            0 => b = rest,
            255 => return Ok(true),
            _ => {
                let Some((&len, rest)) = rest.split_first() else {
                    return Err(DropReason::Truncated);
                };
                let len = usize::from(len);
                let Some(data) = rest.get(..len) else {
                    return Err(DropReason::Truncated);
                };
                opts.entry(code).or_default().extend_from_slice(data);
                b = &rest[len..];
            }
        }
    }
}

/// Where the fixed header keeps the transaction id and the client's
/// hardware address (RFC 2131 section 2).
const XID: std::ops::Range<usize> = 4..8;
const CHADDR: std::ops::Range<usize> = 28..34;

/// The client's Ethernet address from the fixed header, without parsing
/// the rest: what the rate limiter keys on before a packet is read.
/// `None` for a packet too short to hold one.
pub fn peek_mac(b: &[u8]) -> Option<[u8; 6]> {
    b.get(CHADDR).and_then(|m| <[u8; 6]>::try_from(m).ok())
}

/// The transaction id from the fixed header, without parsing the rest.
pub fn peek_xid(b: &[u8]) -> Option<u32> {
    b.get(XID)
        .and_then(|x| <[u8; 4]>::try_from(x).ok())
        .map(u32::from_be_bytes)
}

impl Request {
    /// Read a request; any malformation is a [`DropReason`].
    pub fn parse(b: &[u8]) -> Result<Request, DropReason> {
        if b.len() > MAX_LEN {
            return Err(DropReason::Oversized);
        }
        if b.len() < MIN_LEN {
            return Err(DropReason::Truncated);
        }
        if b[236..240] != MAGIC {
            return Err(DropReason::BadCookie);
        }
        if b[0] != 1 {
            return Err(DropReason::NotRequest);
        }
        if b[1] != 1 || b[2] != 6 {
            return Err(DropReason::NotEthernet);
        }
        let mut opts = BTreeMap::new();
        read_options(&b[240..], &mut opts)?;
        // Option overload (52): options continue in file and/or sname.
        if let Some(o) = opts.get(&52).cloned() {
            let v = o.first().copied().ok_or(DropReason::BadOption)?;
            if v & 1 != 0 {
                read_options(&b[108..236], &mut opts)?;
            }
            if v & 2 != 0 {
                read_options(&b[44..108], &mut opts)?;
            }
        }
        let msg_type = match opts.get(&53).map(Vec::as_slice) {
            Some([t]) => match MessageType::from(*t) {
                MessageType::Unknown(_) => return Err(DropReason::NoMessageType),
                t => t,
            },
            Some(_) => return Err(DropReason::BadOption),
            None => return Err(DropReason::NoMessageType),
        };
        // Both are in the 240 bytes checked above.
        let (Some(mac), Some(xid)) = (peek_mac(b), peek_xid(b)) else {
            return Err(DropReason::Truncated);
        };
        Ok(Request {
            msg_type,
            xid,
            secs: u16::from_be_bytes([b[8], b[9]]),
            broadcast: b[10] & 0x80 != 0,
            hops: b[3],
            ciaddr: ip_at(b, 12),
            giaddr: ip_at(b, 24),
            mac,
            opts,
        })
    }

    pub fn opt(&self, code: u8) -> Option<&[u8]> {
        self.opts.get(&code).map(Vec::as_slice)
    }

    fn opt_ip(&self, code: u8) -> Option<Ipv4Addr> {
        match self.opt(code)? {
            [a, b, c, d] => Some(Ipv4Addr::new(*a, *b, *c, *d)),
            _ => None,
        }
    }

    /// Option 50.
    pub fn requested_ip(&self) -> Option<Ipv4Addr> {
        self.opt_ip(50)
    }

    /// Option 61 (client identifier), when present and not empty.
    pub fn client_id(&self) -> Option<&[u8]> {
        self.opt(61).filter(|v| !v.is_empty())
    }

    /// Option 54.
    pub fn server_id(&self) -> Option<Ipv4Addr> {
        self.opt_ip(54)
    }

    /// First architecture in option 93 (RFC 4578 allows a list).
    pub fn arch(&self) -> Option<u16> {
        match self.opt(93)? {
            [a, b, ..] => Some(u16::from_be_bytes([*a, *b])),
            _ => None,
        }
    }

    /// Option 60 as text (lossy), when present.
    pub fn vendor_class(&self) -> Option<String> {
        self.opt(60)
            .map(|v| String::from_utf8_lossy(v).chars().take(128).collect())
    }

    /// Whether option 77 names `iPXE` (raw text, or one item of an RFC 3004 list).
    pub fn is_ipxe(&self) -> bool {
        let Some(v) = self.opt(77) else { return false };
        if v == b"iPXE" {
            return true;
        }
        let mut rest = v;
        while let Some((&len, r)) = rest.split_first() {
            let len = usize::from(len);
            match r.get(..len) {
                Some(item) if item == b"iPXE" => return true,
                Some(_) => rest = &r[len..],
                None => return false,
            }
        }
        false
    }

    /// MAC as `aa:bb:cc:dd:ee:ff`.
    pub fn mac_str(&self) -> String {
        crate::api::MacAddr(self.mac).to_string()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A request with the given options (code, data), for tests.
    pub fn raw_request(mac: [u8; 6], opts: &[(u8, &[u8])]) -> Vec<u8> {
        let mut b = vec![0u8; 240];
        b[0] = 1;
        b[1] = 1;
        b[2] = 6;
        b[XID].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        b[CHADDR].copy_from_slice(&mac);
        b[236..240].copy_from_slice(&MAGIC);
        for (c, d) in opts {
            b.push(*c);
            b.push(d.len() as u8);
            b.extend_from_slice(d);
        }
        b.push(255);
        b
    }

    #[test]
    fn reads_options_and_classes() {
        let b = raw_request(
            [2, 0, 0, 0, 0, 1],
            &[
                (53, &[1]),
                (93, &[0, 7, 0, 0]),
                (60, b"PXEClient:Arch:00007"),
                (77, &[4, b'i', b'P', b'X', b'E']),
            ],
        );
        let r = Request::parse(&b).unwrap();
        assert_eq!(r.msg_type, MessageType::Discover);
        assert_eq!(r.arch(), Some(7));
        assert!(r.is_ipxe());
        assert_eq!(r.mac_str(), "02:00:00:00:00:01");
    }

    #[test]
    fn rejects_truncation_and_junk() {
        let mut b = raw_request([2, 0, 0, 0, 0, 1], &[(53, &[1]), (12, b"host")]);
        b.truncate(b.len() - 3);
        assert_eq!(Request::parse(&b), Err(DropReason::Truncated));
        assert_eq!(Request::parse(&b[..100]), Err(DropReason::Truncated));
        let mut c = raw_request([2, 0, 0, 0, 0, 1], &[(53, &[1])]);
        c[236] = 0;
        assert_eq!(Request::parse(&c), Err(DropReason::BadCookie));
        let d = raw_request([2, 0, 0, 0, 0, 1], &[]);
        assert_eq!(Request::parse(&d), Err(DropReason::NoMessageType));
        assert_eq!(Request::parse(&vec![0u8; 2000]), Err(DropReason::Oversized));
    }

    #[test]
    fn peeks_read_the_fixed_header_only() {
        let b = raw_request([2, 0, 0, 0, 0, 9], &[]);
        // No message type: the packet does not parse, yet the limiter and
        // the log still see who sent it.
        assert!(Request::parse(&b).is_err());
        assert_eq!(peek_mac(&b), Some([2, 0, 0, 0, 0, 9]));
        assert_eq!(peek_xid(&b), Some(0x1234_5678));
        assert_eq!(peek_mac(&b[..33]), None);
        assert_eq!(peek_xid(&b[..7]), None);
        let r = Request::parse(&raw_request([2, 0, 0, 0, 0, 9], &[(53, &[1])])).unwrap();
        assert_eq!((r.mac, r.xid), ([2, 0, 0, 0, 0, 9], 0x1234_5678));
    }
}
