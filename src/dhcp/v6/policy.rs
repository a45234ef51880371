//! The DHCPv6 decision: (message bytes, how it arrived, machine lookups,
//! lease table, now) -> reply or nothing, plus the lease writes to commit
//! before the reply is sent and the boot-history notes for known Machines.
//! A chain of small steps, each returning `Result<_, Skip6>`, so "no
//! reply" always has a counted reason. Pure: no sockets, no store, no
//! clock.
//!
//! Identity: a client is a known Machine when its MAC (from its DUID, from
//! the nearest relay's Client Link-Layer Address, or from the EUI-64 of
//! its link-local source) is one; then its leases belong to the MAC, as in
//! DHCPv4, so firmware, iPXE and the OS share the Machine's reserved
//! address. Anyone else's leases belong to its DUID. Leases are per
//! (owner, IAID): EDK2 runs a second DHCPv6 client (its IPv6 stack's, no
//! boot options, same DUID, another IAID) beside PXE; it gets a pool
//! address, never the reservation the boot client holds.

use std::net::{Ipv6Addr, SocketAddrV6};
use std::sync::Arc;

use super::boot::{self, Boot6, ClientKind6, ENTERPRISE_UEFI, NoBoot};
use super::config::{Dhcp6Settings, ReservedFor, Subnet6};
use super::lease::{LeaseTable6, LeaseWrite6, duid_key};
use super::message::{Drop6, Duid, Message, MessageType};
use super::reply::{Answer, IaAnswer, relay_reply};
use crate::dhcp::config::DhcpMode;
use crate::dhcp::lease::ClientKey;
use crate::dhcp::policy::{Notice, Warning};
use crate::directory::{BootIntent, Directory, MachineEntry};

mod address;
mod proxy;

/// Identity associations answered in one message at most (firmware sends
/// one, EDK2's two clients one each).
pub const MAX_IAS: usize = 8;

/// A known Machine as DHCPv6 sees it: its entry and its reserved IPv6
/// address (`spec.network.address` when that is IPv6).
#[derive(Clone, Debug)]
pub struct Known6 {
    pub entry: Arc<MachineEntry>,
    pub address: Option<Ipv6Addr>,
}

/// Machine lookups the policy needs (the boot [`Directory`] in production).
pub trait Machines6 {
    fn by_mac(&self, mac: &[u8; 6]) -> Option<Known6>;
    /// The MAC of the Machine an address is reserved for.
    fn reserved_for(&self, addr: &Ipv6Addr) -> Option<[u8; 6]>;
}

impl Machines6 for Directory {
    fn by_mac(&self, mac: &[u8; 6]) -> Option<Known6> {
        Directory::by_mac(self, mac).map(|entry| Known6 {
            address: entry.address6.map(|n| n.addr()),
            entry,
        })
    }
    fn reserved_for(&self, addr: &Ipv6Addr) -> Option<[u8; 6]> {
        Directory::by_ip6(self, addr).map(|e| e.mac)
    }
}

/// Which socket a message came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via6 {
    /// The DHCPv6 server port.
    Port547,
    /// The PXE boot-service port (EDK2's Request after a proxy offer).
    Port4011,
}

/// Where a reply goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest6 {
    /// The client's (link-local) source address, port 546.
    Client,
    /// The relay that sent it, port 547, as a Relay-reply.
    Relay,
    /// Back to the sender's address and port (port 4011 exchanges).
    Source,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply6 {
    pub bytes: Vec<u8>,
    pub to: Dest6,
    pub msg_type: MessageType,
}

/// Why a message got no reply. Variants are metric labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Skip6 {
    #[error("malformed: {0}")]
    Malformed(Drop6),
    #[error("relayed by an agent no subnet lists")]
    UnlistedRelay,
    #[error("meant for another server")]
    OtherServer,
    #[error("unknown client and discovery is off")]
    UnknownClient,
    #[error("no subnet for the client's link")]
    NoSubnet,
    #[error("not a network boot client")]
    NotBootClient,
    #[error("message type not handled in this mode")]
    Unhandled,
    #[error("no boot file for the client")]
    NoBootFile,
    #[error("more identity associations than answered")]
    TooManyIas,
}

impl Skip6 {
    pub fn label(self) -> &'static str {
        match self {
            Skip6::Malformed(d) => d.label(),
            Skip6::UnlistedRelay => "unlisted_relay",
            Skip6::OtherServer => "other_server",
            Skip6::UnknownClient => "unknown_client",
            Skip6::NoSubnet => "no_subnet",
            Skip6::NotBootClient => "not_boot_client",
            Skip6::Unhandled => "unhandled",
            Skip6::NoBootFile => "no_boot_file",
            Skip6::TooManyIas => "too_many_ias",
        }
    }
}

/// Everything the driver does after one message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome6 {
    pub request_type: Option<MessageType>,
    pub reply: Option<Reply6>,
    pub writes: Vec<LeaseWrite6>,
    pub notice: Option<Notice>,
    pub warning: Option<Warning>,
    pub dropped: Option<Skip6>,
}

/// The configuration the policy runs with.
#[derive(Clone, Debug)]
pub struct Policy6 {
    pub cfg: Dhcp6Settings,
    pub server_duid: Duid,
    /// The address in `tftp://` URLs and the subnet of direct clients.
    pub server_address: Option<Ipv6Addr>,
}

struct Ctx<'a> {
    p: &'a Policy6,
    m: &'a Message,
    via: Via6,
    machines: &'a dyn Machines6,
    mac: Option<[u8; 6]>,
    known: Option<Known6>,
    kind: ClientKind6,
    /// Whom leases belong to.
    owner: ClientKey,
    /// The DUID's own key.
    duid: ClientKey,
    now: u64,
}

/// The MAC inside an EUI-64 link-local address (RFC 4291 appendix A); the
/// universal/local bit is flipped back whatever it says (QEMU's MACs are
/// locally administered).
pub fn eui64_mac(a: &Ipv6Addr) -> Option<[u8; 6]> {
    let o = a.octets();
    if !a.is_unicast_link_local() || o[11] != 0xff || o[12] != 0xfe {
        return None;
    }
    Some([o[8] ^ 0x02, o[9], o[10], o[13], o[14], o[15]])
}

impl Policy6 {
    pub fn new(cfg: Dhcp6Settings, server_duid: Duid, server_address: Option<Ipv6Addr>) -> Self {
        Policy6 {
            cfg,
            server_duid,
            server_address,
        }
    }

    /// Decide what to do with one datagram from `src`.
    pub fn handle(
        &self,
        bytes: &[u8],
        via: Via6,
        src: SocketAddrV6,
        machines: &dyn Machines6,
        leases: &mut LeaseTable6,
        now: u64,
    ) -> Outcome6 {
        let m = match Message::parse(bytes) {
            Ok(m) => m,
            Err(d) => {
                return Outcome6 {
                    dropped: Some(Skip6::Malformed(d)),
                    ..Outcome6::default()
                };
            }
        };
        let t = m.msg.msg_type;
        let r = self.decide(&m, via, src, machines, leases, now);
        let mut out = r.unwrap_or_else(|d| Outcome6 {
            dropped: Some(d),
            ..Outcome6::default()
        });
        out.request_type = t;
        out
    }

    fn decide(
        &self,
        m: &Message,
        via: Via6,
        src: SocketAddrV6,
        machines: &dyn Machines6,
        leases: &mut LeaseTable6,
        now: u64,
    ) -> Result<Outcome6, Skip6> {
        // An answer per IA is about three times the IA's size: without a
        // bound a small message would get an answer past any link's MTU.
        if m.msg.ia_na.len() > MAX_IAS {
            return Err(Skip6::TooManyIas);
        }
        if let Some(r) = m.relays.last()
            && !self
                .cfg
                .subnets
                .iter()
                .any(|s| s.relays.contains(&r.link_addr))
        {
            return Err(Skip6::UnlistedRelay);
        }
        let mac = m
            .mac()
            .or_else(|| m.relays.is_empty().then(|| eui64_mac(src.ip())).flatten());
        let known = mac.and_then(|mac| machines.by_mac(&mac));
        let duid = m
            .msg
            .client_id
            .as_ref()
            .map(|d| duid_key(&d.0))
            .unwrap_or(ClientKey([0; 16]));
        let mac_reserved = mac.is_some_and(|mac| {
            self.cfg.subnets.iter().any(|s| {
                s.reservations
                    .iter()
                    .any(|(w, _)| *w == ReservedFor::Mac(mac))
            })
        });
        let owner = match mac {
            Some(mac) if known.is_some() || mac_reserved => ClientKey::from_mac(&mac),
            _ => duid,
        };
        let c = Ctx {
            p: self,
            m,
            via,
            machines,
            mac,
            kind: ClientKind6::of(&m.msg),
            known,
            owner,
            duid,
            now,
        };
        match self.cfg.mode {
            DhcpMode::Authoritative => authoritative(&c, leases),
            DhcpMode::Proxy => proxy::proxy(&c),
        }
    }
}

impl Ctx<'_> {
    fn secure_boot(&self) -> bool {
        self.known.as_ref().is_some_and(|k| k.entry.secure_boot)
    }

    fn subnet(&self) -> Result<&Subnet6, Skip6> {
        let subnets = &self.p.cfg.subnets;
        if let Some(r) = self.m.relays.last() {
            return subnets
                .iter()
                .find(|s| s.relays.contains(&r.link_addr))
                .ok_or(Skip6::NoSubnet);
        }
        self.p
            .server_address
            .and_then(|a| subnets.iter().find(|s| s.net.contains(&a)))
            .or(subnets.first())
            .ok_or(Skip6::NoSubnet)
    }

    /// The address reserved for this client in `subnet`: its Machine's,
    /// else one of the subnet's reservations by DUID or MAC.
    fn reserved(&self, subnet: &Subnet6) -> Option<Ipv6Addr> {
        if let Some(a) = self.known.as_ref().and_then(|k| k.address) {
            return subnet.net.contains(&a).then_some(a);
        }
        subnet.reservations.iter().find_map(|(w, a)| {
            let hit = match w {
                ReservedFor::Duid(d) => self.m.msg.client_id.as_ref() == Some(d),
                ReservedFor::Mac(m) => self.mac.as_ref() == Some(m),
            };
            hit.then_some(*a)
        })
    }

    /// A known Machine's DNS servers, else the subnet's.
    fn dns(&self, subnet: &Subnet6) -> Vec<Ipv6Addr> {
        match &self.known {
            Some(k) if !k.entry.dns6.is_empty() => k.entry.dns6.clone(),
            _ => subnet.dns.clone(),
        }
    }

    /// Known Machines and reserved clients always; others only with
    /// discovery on.
    fn admit(&self, subnet: Option<&Subnet6>) -> Result<(), Skip6> {
        let reserved = subnet.is_some_and(|s| self.reserved(s).is_some());
        if self.known.is_some() || reserved || self.p.cfg.discovery {
            Ok(())
        } else {
            Err(Skip6::UnknownClient)
        }
    }

    /// The boot URL for this client, if it is a boot client.
    fn boot(&self, proxy: bool) -> Result<Option<Boot6>, NoBoot> {
        boot::boot_for(
            self.kind,
            &self.m.msg,
            self.mac,
            &self.p.cfg,
            self.p.server_address,
            self.secure_boot(),
            proxy,
        )
    }

    /// An answer of type `t` with the identifiers, and the boot options
    /// for a boot client.
    fn answer(&self, t: MessageType, proxy: bool, dns: &[Ipv6Addr]) -> Answer {
        let boot = self.boot(proxy).ok().flatten();
        Answer {
            msg_type: t,
            xid: self.m.msg.xid,
            server_id: self.p.server_duid.clone(),
            client_id: self.m.msg.client_id.clone(),
            ia_na: Vec::new(),
            status: None,
            preference: if t == MessageType::Advertise {
                self.p.cfg.preference
            } else {
                None
            },
            rapid_commit: false,
            boot_url: boot.as_ref().map(|b| b.url.clone()),
            boot_params: Vec::new(),
            vendor_class: boot
                .and_then(|b| b.vendor_class)
                .map(|v| (ENTERPRISE_UEFI, v.to_vec())),
            dns: dns.to_vec(),
        }
    }

    fn finish(&self, a: &Answer) -> Reply6 {
        let inner = a.encode();
        let (bytes, to) = match (self.via, self.m.relays.is_empty()) {
            (Via6::Port4011, _) => (inner, Dest6::Source),
            (_, true) => (inner, Dest6::Client),
            (_, false) => (relay_reply(&self.m.relays, inner), Dest6::Relay),
        };
        Reply6 {
            bytes,
            to,
            msg_type: a.msg_type,
        }
    }

    /// A boot-history step for a known Machine.
    fn notice(&self, step: crate::api::BootStep, addr: Option<Ipv6Addr>) -> Option<Notice> {
        let e = &self.known.as_ref()?.entry;
        let mut detail = match addr {
            Some(a) => format!("{a} via {} (DHCPv6)", self.kind.label()),
            None => format!("boot options via {} (DHCPv6)", self.kind.label()),
        };
        if let Ok(Some(b)) = self.boot(false) {
            detail.push_str(&format!(" url={}", b.url));
        }
        Some(Notice {
            namespace: e.namespace.clone(),
            name: e.name.clone(),
            step,
            detail,
            boot_id: match &e.intent {
                BootIntent::Install { boot_id, .. } => Some(boot_id.clone()),
                _ => None,
            },
        })
    }

    /// A known Machine's firmware asked to boot and there is no boot file
    /// for its architecture.
    fn warning(&self) -> Option<Warning> {
        let e = &self.known.as_ref()?.entry;
        if self.boot(false) != Err(NoBoot::NoFile) {
            return None;
        }
        let arch = self.m.msg.first_arch().unwrap_or_default();
        Some(Warning {
            namespace: e.namespace.clone(),
            name: e.name.clone(),
            reason: "NoBootFile",
            message: format!(
                "firmware of client architecture {arch} ({}) asked to network-boot over DHCPv6 \
                 and got no boot file: add one for that architecture under dhcp6.bootFiles",
                crate::dhcp::config::arch::name(arch)
            ),
        })
    }
}

// ---- authoritative mode ----------------------------------------------------

fn authoritative(c: &Ctx, leases: &mut LeaseTable6) -> Result<Outcome6, Skip6> {
    if c.via == Via6::Port4011 {
        return Err(Skip6::Unhandled);
    }
    let t = c.m.msg.msg_type.ok_or(Skip6::Unhandled)?;
    if let Some(sid) = &c.m.msg.server_id
        && *sid != c.p.server_duid
    {
        if t == MessageType::Request {
            for ia in &c.m.msg.ia_na {
                leases.withdraw_offer(&c.owner, ia.iaid);
            }
        }
        return Err(Skip6::OtherServer);
    }
    let subnet = c.subnet()?;
    let mut out = match t {
        MessageType::Solicit if c.m.msg.rapid_commit && c.p.cfg.rapid_commit => {
            address::assign(c, subnet, leases, MessageType::Reply)
        }
        MessageType::Solicit => address::assign(c, subnet, leases, MessageType::Advertise),
        MessageType::Request => address::assign(c, subnet, leases, MessageType::Reply),
        MessageType::Renew | MessageType::Rebind => address::renew(c, subnet, leases, t),
        MessageType::Confirm => address::confirm(c, subnet),
        MessageType::Release => address::give_back(c, subnet, leases, false),
        MessageType::Decline => address::give_back(c, subnet, leases, true),
        MessageType::InformationRequest => inform(c, subnet),
        _ => Err(Skip6::Unhandled),
    }?;
    if matches!(t, MessageType::Solicit | MessageType::Request) {
        out.warning = c.warning();
    }
    Ok(out)
}

/// Information-Request (stateless, as iPXE does when the RA says O and
/// not M): boot options and DNS, no address.
fn inform(c: &Ctx, subnet: &Subnet6) -> Result<Outcome6, Skip6> {
    c.admit(Some(subnet))?;
    let a = c.answer(MessageType::Reply, false, &c.dns(subnet));
    Ok(Outcome6 {
        notice: c.notice(crate::api::BootStep::DhcpAck, None),
        reply: Some(c.finish(&a)),
        ..Outcome6::default()
    })
}

/// The IA answers' lifetimes: (preferred, valid, t1, t2).
fn lifetimes(c: &Ctx, subnet: &Subnet6) -> (u32, u32, u32, u32) {
    let (preferred, valid) = if c.known.is_some() || c.reserved(subnet).is_some() {
        (subnet.preferred, subnet.valid)
    } else {
        let v = c.p.cfg.discovery_valid;
        (subnet.preferred.min(v / 6 * 5), v)
    };
    (preferred, valid, preferred / 2, preferred / 5 * 4)
}

fn ia_status(iaid: u32, code: u16, text: &str) -> IaAnswer {
    IaAnswer {
        iaid,
        t1: 0,
        t2: 0,
        addr: None,
        status: Some((code, text.to_string())),
    }
}

#[cfg(test)]
mod tests;
