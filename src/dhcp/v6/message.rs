//! Strict reading of a DHCPv6 message from raw bytes (RFC 8415 sections 8,
//! 9 and 21; the boot options of RFC 5970). A relayed message is read
//! through every Relay-forward around it. A client message must carry the
//! identifiers its type requires (section 16): one with a Server
//! Identifier where none belongs, or without one where it must, is
//! discarded as the RFC says. Every malformation is a [`Drop6`]. Pure: no
//! I/O.

use std::net::Ipv6Addr;

/// Largest message accepted; anything bigger is a counted drop.
pub const MAX_LEN: usize = 2048;
/// Relay agents a message may have passed (RFC 8415 HOP_COUNT_LIMIT).
pub const MAX_RELAYS: usize = 8;

/// Option codes read or written here.
pub mod opt {
    pub const CLIENTID: u16 = 1;
    pub const SERVERID: u16 = 2;
    pub const IA_NA: u16 = 3;
    pub const IAADDR: u16 = 5;
    pub const ORO: u16 = 6;
    pub const PREFERENCE: u16 = 7;
    pub const ELAPSED_TIME: u16 = 8;
    pub const RELAY_MSG: u16 = 9;
    pub const DNS_SERVERS: u16 = 23;
    pub const STATUS_CODE: u16 = 13;
    pub const RAPID_COMMIT: u16 = 14;
    pub const USER_CLASS: u16 = 15;
    pub const VENDOR_CLASS: u16 = 16;
    pub const INTERFACE_ID: u16 = 18;
    pub const BOOTFILE_URL: u16 = 59;
    pub const BOOTFILE_PARAM: u16 = 60;
    pub const CLIENT_ARCH_TYPE: u16 = 61;
    pub const CLIENT_LINKLAYER_ADDR: u16 = 79;
}

/// Why a message got no answer. Variants are metric labels: keep them few.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum Drop6 {
    #[error("truncated")]
    Truncated,
    #[error("oversized")]
    Oversized,
    #[error("malformed option")]
    BadOption,
    #[error("unknown message type")]
    UnknownType,
    #[error("a server's message type")]
    NotFromClient,
    #[error("no client identifier")]
    NoClientId,
    #[error("server identifier where none belongs")]
    UnexpectedServerId,
    #[error("no server identifier")]
    NoServerId,
    #[error("relayed through too many agents")]
    TooManyRelays,
    #[error("relay message without a relayed message")]
    NoRelayMessage,
}

impl Drop6 {
    /// Stable label for metrics.
    pub fn label(self) -> &'static str {
        match self {
            Drop6::Truncated => "truncated",
            Drop6::Oversized => "oversized",
            Drop6::BadOption => "bad_option",
            Drop6::UnknownType => "unknown_type",
            Drop6::NotFromClient => "not_from_client",
            Drop6::NoClientId => "no_client_id",
            Drop6::UnexpectedServerId => "unexpected_server_id",
            Drop6::NoServerId => "no_server_id",
            Drop6::TooManyRelays => "too_many_relays",
            Drop6::NoRelayMessage => "no_relay_message",
        }
    }
}

/// RFC 8415 section 7.3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageType {
    Solicit,
    Advertise,
    Request,
    Confirm,
    Renew,
    Rebind,
    Reply,
    Release,
    Decline,
    Reconfigure,
    InformationRequest,
    RelayForw,
    RelayRepl,
}

impl MessageType {
    pub fn from_code(c: u8) -> Option<MessageType> {
        use MessageType::*;
        Some(match c {
            1 => Solicit,
            2 => Advertise,
            3 => Request,
            4 => Confirm,
            5 => Renew,
            6 => Rebind,
            7 => Reply,
            8 => Release,
            9 => Decline,
            10 => Reconfigure,
            11 => InformationRequest,
            12 => RelayForw,
            13 => RelayRepl,
            _ => return None,
        })
    }

    pub fn code(self) -> u8 {
        use MessageType::*;
        match self {
            Solicit => 1,
            Advertise => 2,
            Request => 3,
            Confirm => 4,
            Renew => 5,
            Rebind => 6,
            Reply => 7,
            Release => 8,
            Decline => 9,
            Reconfigure => 10,
            InformationRequest => 11,
            RelayForw => 12,
            RelayRepl => 13,
        }
    }
}

/// A DHCP Unique Identifier (RFC 8415 section 11), kept as sent.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Duid(pub Vec<u8>);

impl Duid {
    /// DUID-LL of an Ethernet address: what metalherd calls itself.
    pub fn link_layer(mac: [u8; 6]) -> Duid {
        let mut v = vec![0, 3, 0, 1];
        v.extend_from_slice(&mac);
        Duid(v)
    }

    /// The Ethernet address in a DUID-LLT or DUID-LL (hardware type 1),
    /// which is how most firmware builds its DUID from the boot NIC.
    pub fn mac(&self) -> Option<[u8; 6]> {
        let addr = match self.0.as_slice() {
            [0, 1, 0, 1, _, _, _, _, rest @ ..] | [0, 3, 0, 1, rest @ ..] => rest,
            _ => return None,
        };
        <[u8; 6]>::try_from(addr).ok()
    }

    /// As `hex:hex:...`, for logs and reservations.
    pub fn hex(&self) -> String {
        let parts: Vec<String> = self.0.iter().map(|b| format!("{b:02x}")).collect();
        parts.join(":")
    }
}

/// An Identity Association for Non-temporary Addresses and the addresses
/// the client asked for in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IaNa {
    pub iaid: u32,
    pub t1: u32,
    pub t2: u32,
    pub addrs: Vec<Ipv6Addr>,
}

/// A client's message (or a server's, when read by [`Msg::decode`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Msg {
    pub msg_type: Option<MessageType>,
    /// The 24-bit transaction id.
    pub xid: u32,
    pub client_id: Option<Duid>,
    pub server_id: Option<Duid>,
    pub ia_na: Vec<IaNa>,
    /// Option Request Option: the option codes the client wants.
    pub oro: Vec<u16>,
    pub elapsed: Option<u16>,
    pub rapid_commit: bool,
    /// Vendor Class (16): enterprise number and its data items.
    pub vendor_class: Option<(u32, Vec<Vec<u8>>)>,
    pub user_class: Vec<Vec<u8>>,
    /// Client System Architecture Types (61, RFC 5970).
    pub arch: Vec<u16>,
    /// What a server's message carries (read in tests and by the fuzzer).
    pub status: Option<(u16, String)>,
    pub boot_url: Option<String>,
    pub preference: Option<u8>,
    pub dns: Vec<Ipv6Addr>,
}

/// One Relay-forward a message came through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relay {
    pub hop_count: u8,
    pub link_addr: Ipv6Addr,
    pub peer_addr: Ipv6Addr,
    /// Interface-Id (18), echoed in the Relay-reply.
    pub interface_id: Option<Vec<u8>>,
    /// Client Link-Layer Address (79, RFC 6939): the client's MAC as the
    /// relay saw it.
    pub client_mac: Option<[u8; 6]>,
}

/// A client's message as it arrived: the relays it came through, outermost
/// first (empty when it came straight from the link), and the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub relays: Vec<Relay>,
    pub msg: Msg,
}

impl Message {
    /// Read a message from a client or a relay agent; any malformation, or
    /// a client message without the identifiers its type requires, is a
    /// [`Drop6`].
    pub fn parse(b: &[u8]) -> Result<Message, Drop6> {
        if b.len() > MAX_LEN {
            return Err(Drop6::Oversized);
        }
        let mut relays = Vec::new();
        let mut b = b;
        loop {
            let (&code, rest) = b.split_first().ok_or(Drop6::Truncated)?;
            let t = MessageType::from_code(code).ok_or(Drop6::UnknownType)?;
            if t != MessageType::RelayForw {
                let msg = Msg::decode(b)?;
                check_client(&msg, t)?;
                return Ok(Message { relays, msg });
            }
            if relays.len() == MAX_RELAYS {
                return Err(Drop6::TooManyRelays);
            }
            let (relay, inner) = read_relay(rest)?;
            relays.push(relay);
            b = inner;
        }
    }

    /// The client's MAC: from its DUID, else as the nearest relay saw it.
    pub fn mac(&self) -> Option<[u8; 6]> {
        self.msg
            .client_id
            .as_ref()
            .and_then(Duid::mac)
            .or_else(|| self.relays.last().and_then(|r| r.client_mac))
    }
}

/// RFC 8415 section 16: what each client message must and must not carry.
fn check_client(m: &Msg, t: MessageType) -> Result<(), Drop6> {
    use MessageType::*;
    let (client, server) = (m.client_id.is_some(), m.server_id.is_some());
    match t {
        Advertise | Reply | Reconfigure | RelayRepl => Err(Drop6::NotFromClient),
        Solicit | Confirm | Rebind if server => Err(Drop6::UnexpectedServerId),
        Request | Renew | Release | Decline if !server => Err(Drop6::NoServerId),
        Solicit | Confirm | Rebind | Request | Renew | Release | Decline if !client => {
            Err(Drop6::NoClientId)
        }
        _ => Ok(()),
    }
}

/// The fixed part of a Relay-forward after its type, its options, and the
/// message it relays.
fn read_relay(b: &[u8]) -> Result<(Relay, &[u8]), Drop6> {
    let hop_count = *b.first().ok_or(Drop6::Truncated)?;
    let link = b.get(1..17).ok_or(Drop6::Truncated)?;
    let peer = b.get(17..33).ok_or(Drop6::Truncated)?;
    let mut relay = Relay {
        hop_count,
        link_addr: addr(link)?,
        peer_addr: addr(peer)?,
        interface_id: None,
        client_mac: None,
    };
    let mut inner = None;
    for (code, data) in options(&b[33..]) {
        let data = data?;
        match code {
            opt::RELAY_MSG => once(&mut inner, data)?,
            opt::INTERFACE_ID => once(&mut relay.interface_id, data.to_vec())?,
            opt::CLIENT_LINKLAYER_ADDR => {
                let mac = match data {
                    [0, 1, rest @ ..] => <[u8; 6]>::try_from(rest).ok(),
                    _ => None,
                };
                once(&mut relay.client_mac, mac.ok_or(Drop6::BadOption)?)?;
            }
            _ => {}
        }
    }
    Ok((relay, inner.ok_or(Drop6::NoRelayMessage)?))
}

fn addr(b: &[u8]) -> Result<Ipv6Addr, Drop6> {
    <[u8; 16]>::try_from(b)
        .map(Ipv6Addr::from)
        .map_err(|_| Drop6::BadOption)
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|s| u16::from_be_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// Set an option that may appear once; a repeat is malformed.
fn once<T>(slot: &mut Option<T>, v: T) -> Result<(), Drop6> {
    if slot.replace(v).is_some() {
        return Err(Drop6::BadOption);
    }
    Ok(())
}

/// The options (code, data) of `b`, in order; a truncated one ends them
/// with an error.
pub fn options(b: &[u8]) -> impl Iterator<Item = (u16, Result<&[u8], Drop6>)> {
    let mut rest = Some(b);
    std::iter::from_fn(move || {
        let b = rest.take()?;
        if b.is_empty() {
            return None;
        }
        let (Some(code), Some(len)) = (u16_at(b, 0), u16_at(b, 2)) else {
            return Some((0, Err(Drop6::Truncated)));
        };
        let end = 4 + usize::from(len);
        let Some(data) = b.get(4..end) else {
            return Some((code, Err(Drop6::Truncated)));
        };
        rest = Some(&b[end..]);
        Some((code, Ok(data)))
    })
}

/// A list of (u16 length, bytes) items (User Class, Vendor Class data).
fn items(mut b: &[u8]) -> Result<Vec<Vec<u8>>, Drop6> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let len = usize::from(u16_at(b, 0).ok_or(Drop6::BadOption)?);
        let item = b.get(2..2 + len).ok_or(Drop6::BadOption)?;
        out.push(item.to_vec());
        b = &b[2 + len..];
    }
    Ok(out)
}

fn u16s(b: &[u8]) -> Result<Vec<u16>, Drop6> {
    if !b.len().is_multiple_of(2) {
        return Err(Drop6::BadOption);
    }
    Ok(b.chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect())
}

fn ia_na(b: &[u8]) -> Result<IaNa, Drop6> {
    let (Some(iaid), Some(t1), Some(t2)) = (u32_at(b, 0), u32_at(b, 4), u32_at(b, 8)) else {
        return Err(Drop6::BadOption);
    };
    let mut addrs = Vec::new();
    for (code, data) in options(&b[12..]) {
        let data = data.map_err(|_| Drop6::BadOption)?;
        if code == opt::IAADDR {
            // Address, preferred and valid lifetimes, then its options.
            let a = data.get(..16).ok_or(Drop6::BadOption)?;
            if data.len() < 24 {
                return Err(Drop6::BadOption);
            }
            addrs.push(addr(a)?);
        }
    }
    Ok(IaNa {
        iaid,
        t1,
        t2,
        addrs,
    })
}

impl Msg {
    /// Read a (non-relay) message of any direction, without the checks of
    /// what a client's must carry.
    pub fn decode(b: &[u8]) -> Result<Msg, Drop6> {
        if b.len() > MAX_LEN {
            return Err(Drop6::Oversized);
        }
        let head = b.get(..4).ok_or(Drop6::Truncated)?;
        let t = MessageType::from_code(head[0]).ok_or(Drop6::UnknownType)?;
        let mut m = Msg {
            msg_type: Some(t),
            xid: u32::from_be_bytes([0, head[1], head[2], head[3]]),
            ..Msg::default()
        };
        for (code, data) in options(&b[4..]) {
            let data = data?;
            match code {
                opt::CLIENTID if !data.is_empty() => once(&mut m.client_id, Duid(data.to_vec()))?,
                opt::SERVERID if !data.is_empty() => once(&mut m.server_id, Duid(data.to_vec()))?,
                opt::CLIENTID | opt::SERVERID => return Err(Drop6::BadOption),
                opt::IA_NA => m.ia_na.push(ia_na(data)?),
                opt::ORO => m.oro.extend(u16s(data)?),
                opt::ELAPSED_TIME => {
                    let [a, b] = <[u8; 2]>::try_from(data).map_err(|_| Drop6::BadOption)?;
                    once(&mut m.elapsed, u16::from_be_bytes([a, b]))?;
                }
                opt::RAPID_COMMIT if data.is_empty() => m.rapid_commit = true,
                opt::RAPID_COMMIT => return Err(Drop6::BadOption),
                opt::USER_CLASS => m.user_class.extend(items(data)?),
                opt::VENDOR_CLASS => {
                    let e = u32_at(data, 0).ok_or(Drop6::BadOption)?;
                    once(&mut m.vendor_class, (e, items(&data[4..])?))?;
                }
                opt::CLIENT_ARCH_TYPE => m.arch.extend(u16s(data)?),
                opt::STATUS_CODE => {
                    let c = u16_at(data, 0).ok_or(Drop6::BadOption)?;
                    let text = String::from_utf8_lossy(&data[2..]).into_owned();
                    once(&mut m.status, (c, text))?;
                }
                opt::BOOTFILE_URL => {
                    let url = std::str::from_utf8(data).map_err(|_| Drop6::BadOption)?;
                    once(&mut m.boot_url, url.to_string())?;
                }
                opt::DNS_SERVERS => {
                    if data.is_empty() || !data.len().is_multiple_of(16) {
                        return Err(Drop6::BadOption);
                    }
                    for a in data.chunks_exact(16) {
                        m.dns.push(addr(a)?);
                    }
                }
                opt::PREFERENCE => {
                    let [p] = <[u8; 1]>::try_from(data).map_err(|_| Drop6::BadOption)?;
                    once(&mut m.preference, p)?;
                }
                _ => {}
            }
        }
        Ok(m)
    }

    /// The first architecture the client named (option 61).
    pub fn first_arch(&self) -> Option<u16> {
        self.arch.first().copied()
    }

    /// Whether a User Class (option 15) says `iPXE`, as iPXE sends it.
    pub fn is_ipxe(&self) -> bool {
        self.user_class.iter().any(|c| c == b"iPXE")
    }

    /// Whether the Vendor Class data starts with `HTTPClient` (UEFI HTTP
    /// boot), as opposed to `PXEClient`.
    pub fn is_http_client(&self) -> bool {
        self.vendor_class
            .as_ref()
            .is_some_and(|(_, d)| d.iter().any(|i| i.starts_with(b"HTTPClient")))
    }
}

#[cfg(test)]
mod tests;
