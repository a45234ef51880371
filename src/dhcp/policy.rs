//! The DHCP decision: (request bytes, machine lookups, lease table, config,
//! now) -> reply or nothing, plus the lease writes to commit before the
//! reply is sent and the side notes (boot history, discovered hardware) the
//! driver hands to background tasks. A chain of small steps, each returning
//! `Result<_, DropReason>` so "no reply" always has a counted reason.
//! Pure: no sockets, no store, no clock (time comes in as `now`).

use std::net::Ipv4Addr;
use std::sync::Arc;

use dhcproto::v4::{DhcpOption, Message, MessageType};

use super::config::{DhcpMode, DhcpSettings, Subnet};
use super::lease::{ClientKey, LeaseTable, LeaseWrite};
use super::options::{self, ClientKind};
use super::packet::{DropReason, Request};
use crate::api::BootStep;
use crate::directory::{BootIntent, Directory, MachineEntry};

/// Machine lookups the policy needs (the boot [`Directory`] in production).
pub trait Machines {
    fn by_mac(&self, mac: &[u8; 6]) -> Option<Arc<MachineEntry>>;
    fn by_ip(&self, ip: &Ipv4Addr) -> Option<Arc<MachineEntry>>;
}

impl Machines for Directory {
    fn by_mac(&self, mac: &[u8; 6]) -> Option<Arc<MachineEntry>> {
        Directory::by_mac(self, mac)
    }
    fn by_ip(&self, ip: &Ipv4Addr) -> Option<Arc<MachineEntry>> {
        Directory::by_ip(self, ip)
    }
}

/// Which socket a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The DHCP server port.
    Port67,
    /// The PXE boot-server port (proxyDHCP REQUESTs).
    Port4011,
}

/// Where a reply goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// To the relay at giaddr, port 67.
    Relay(Ipv4Addr),
    /// To 255.255.255.255:68 on the interface.
    Broadcast,
    /// To the client's address, port 68.
    Unicast(Ipv4Addr),
    /// Back to the sender's address and port (port 4011 exchanges).
    Source,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub bytes: Vec<u8>,
    pub to: Dest,
    pub msg_type: MessageType,
}

/// A boot-history step for a known Machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub namespace: String,
    pub name: String,
    pub step: BootStep,
    pub detail: String,
    pub boot_id: Option<String>,
}

/// Something wrong about a known Machine's boot that its owner must fix
/// (a Warning event on the Machine).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    pub namespace: String,
    pub name: String,
    /// CamelCase event reason.
    pub reason: &'static str,
    pub message: String,
}

/// An unknown client seen on the wire (for DiscoveredMachine objects).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovered {
    pub mac: [u8; 6],
    pub arch: Option<u16>,
    pub vendor_class: Option<String>,
    pub address: Option<Ipv4Addr>,
}

/// Everything the driver does after one packet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub request_type: Option<MessageType>,
    pub reply: Option<Reply>,
    /// Send `reply` only if nothing answers a ping of this address (see
    /// [`Policy::probe_until`]); else [`Policy::address_in_use`].
    pub probe: Option<Probe>,
    pub writes: Vec<LeaseWrite>,
    pub notice: Option<Notice>,
    pub discovered: Option<Discovered>,
    pub dropped: Option<DropReason>,
    pub warning: Option<Warning>,
}

/// An offered address to ping before the offer goes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub ip: Ipv4Addr,
    pub client: ClientKey,
    pub mac: [u8; 6],
}

/// The configuration the policy runs with.
#[derive(Clone, Debug)]
pub struct Policy {
    pub cfg: DhcpSettings,
    /// Our address on the interface (option 54).
    pub server_ip: Ipv4Addr,
    /// Until this time (unix seconds) a dynamic offer of an address this
    /// server has no lease record of is pinged first: a previous instance
    /// may have leased it (0: never). The driver sets it at start to the
    /// longest lease time from then when ping checks are on.
    pub probe_until: u64,
}

struct Ctx<'a> {
    p: &'a Policy,
    req: &'a Request,
    via: Via,
    machines: &'a dyn Machines,
    machine: Option<Arc<MachineEntry>>,
    /// Whom leases belong to (see [`client_key`]).
    client: ClientKey,
    now: u64,
}

impl Ctx<'_> {
    /// The client is a Machine whose firmware enforces Secure Boot.
    fn secure_boot(&self) -> bool {
        self.machine.as_ref().is_some_and(|m| m.secure_boot)
    }
}

/// The lease owner of a request: a known Machine by its hardware address
/// (its identity, like a host reservation, so firmware, iPXE, installer and
/// OS share one address whatever client identifier each sends); anyone else
/// by client identifier (option 61) when sent, else by hardware address
/// (RFC 2131 4.2).
fn client_key(req: &Request, known: bool) -> ClientKey {
    if known {
        return ClientKey::from_mac(&req.mac);
    }
    req.client_id()
        .and_then(ClientKey::from_client_id)
        .unwrap_or_else(|| ClientKey::from_mac(&req.mac))
}

impl Policy {
    pub fn new(cfg: DhcpSettings, server_ip: Ipv4Addr) -> Policy {
        Policy {
            cfg,
            server_ip,
            probe_until: 0,
        }
    }

    /// A pinged address answered: someone uses it. Quarantine it (as a
    /// DECLINE would) so the client's next DISCOVER gets another; the
    /// writes persist the quarantine.
    pub fn address_in_use(&self, p: &Probe, leases: &mut LeaseTable, now: u64) -> Vec<LeaseWrite> {
        give_back::quarantine(p, leases, now)
    }

    /// Decide what to do with one packet.
    pub fn handle(
        &self,
        bytes: &[u8],
        via: Via,
        machines: &dyn Machines,
        leases: &mut LeaseTable,
        now: u64,
    ) -> Outcome {
        let req = match Request::parse(bytes) {
            Ok(r) => r,
            Err(d) => {
                return Outcome {
                    dropped: Some(d),
                    ..Outcome::default()
                };
            }
        };
        if !req.giaddr.is_unspecified()
            && !self
                .cfg
                .subnets
                .iter()
                .any(|s| s.relays.contains(&req.giaddr))
        {
            return Outcome {
                request_type: Some(req.msg_type),
                dropped: Some(DropReason::UnlistedRelay),
                ..Outcome::default()
            };
        }
        let machine = machines.by_mac(&req.mac);
        let ctx = Ctx {
            p: self,
            req: &req,
            via,
            machines,
            client: client_key(&req, machine.is_some()),
            machine,
            now,
        };
        let r = match self.cfg.mode {
            DhcpMode::Authoritative => authoritative(&ctx, leases),
            DhcpMode::Proxy => proxy(&ctx),
        };
        let mut out = r.unwrap_or_else(|d| Outcome {
            dropped: Some(d),
            ..Outcome::default()
        });
        out.request_type = Some(req.msg_type);
        if let Some(m) = &ctx.machine
            && matches!(req.msg_type, MessageType::Discover | MessageType::Request)
            && options::boot_info(&req, &self.cfg, self.server_ip, m.secure_boot)
                == Err(DropReason::NoBootFile)
        {
            out.warning = Some(no_boot_file(m, &req));
        }
        if out.discovered.is_none()
            && ctx.machine.is_none()
            && self.cfg.discovery
            && self.cfg.record_discovered
            && ClientKind::of(&req) != ClientKind::Plain
        {
            out.discovered = Some(discovered(&req, None));
        }
        out
    }
}

/// A known Machine's firmware asked for a boot file this server has none
/// for: its architecture is not in `dhcp.bootFiles` (the built-in table
/// holds only x86 binaries, never a wrong one).
fn no_boot_file(m: &MachineEntry, req: &Request) -> Warning {
    let arch = match req.arch() {
        Some(a) => format!("{a} ({})", super::config::arch::name(a)),
        None => "unknown".to_string(),
    };
    let why = if m.secure_boot {
        "its firmware enforces Secure Boot and there is no signed loader for that \
         architecture; add one under dhcp.secureBootFiles"
    } else {
        "there is none for that architecture; add a binary built for it under dhcp.bootFiles"
    };
    Warning {
        namespace: m.namespace.clone(),
        name: m.name.clone(),
        reason: "NoBootFile",
        message: format!(
            "firmware of client architecture {arch} asked to network-boot and got no boot file: {why}"
        ),
    }
}

fn discovered(req: &Request, address: Option<Ipv4Addr>) -> Discovered {
    Discovered {
        mac: req.mac,
        arch: req.arch(),
        vendor_class: req.vendor_class(),
        address,
    }
}

// ---- authoritative mode ----------------------------------------------------

fn authoritative(c: &Ctx, leases: &mut LeaseTable) -> Result<Outcome, DropReason> {
    if c.via == Via::Port4011 {
        return Err(DropReason::Unhandled);
    }
    check_server_id(c, leases)?;
    let subnet = select_subnet(c)?;
    match c.req.msg_type {
        MessageType::Discover => discover(c, subnet, leases),
        MessageType::Request => request(c, subnet, leases),
        MessageType::Decline => decline(c, leases),
        MessageType::Release => release(c, leases),
        MessageType::Inform => inform(c, subnet),
        _ => Err(DropReason::Unhandled),
    }
}

/// A REQUEST naming another server means the client took its offer.
fn check_server_id(c: &Ctx, leases: &mut LeaseTable) -> Result<(), DropReason> {
    match c.req.server_id() {
        Some(sid) if sid != c.p.server_ip => {
            if c.req.msg_type == MessageType::Request {
                leases.withdraw_offer(&c.client);
            }
            Err(DropReason::OtherServer)
        }
        _ => Ok(()),
    }
}

/// Relayed requests by giaddr; local ones by our own address.
fn select_subnet<'a>(c: &Ctx<'a>) -> Result<&'a Subnet, DropReason> {
    let subnets = &c.p.cfg.subnets;
    if !c.req.giaddr.is_unspecified() {
        return subnets
            .iter()
            .find(|s| s.net.contains(&c.req.giaddr))
            .ok_or(DropReason::NoSubnet);
    }
    subnets
        .iter()
        .find(|s| s.net.contains(&c.p.server_ip))
        .or(subnets.first())
        .ok_or(DropReason::NoSubnet)
}

/// Known Machines always; unknown clients only with discovery on.
fn admit(c: &Ctx) -> Result<(), DropReason> {
    if c.machine.is_some() || c.p.cfg.discovery {
        Ok(())
    } else {
        Err(DropReason::UnknownClient)
    }
}

/// The Machine's reserved address, when it lies in this subnet.
fn reservation(c: &Ctx, subnet: &Subnet) -> Option<Ipv4Addr> {
    let a = c.machine.as_ref()?.address?.addr();
    subnet.net.contains(&a).then_some(a)
}

/// Whether the pool address `ip` may go to this client now.
fn usable(c: &Ctx, ip: Ipv4Addr, leases: &LeaseTable) -> bool {
    ip != c.p.server_ip
        && leases.is_free_for(ip, &c.client, &c.req.mac, c.now)
        && c.machines.by_ip(&ip).is_none_or(|m| m.mac == c.req.mac)
}

fn choose_address(c: &Ctx, subnet: &Subnet, leases: &LeaseTable) -> Result<Ipv4Addr, DropReason> {
    if let Some(r) = reservation(c, subnet) {
        return if leases.is_free_for(r, &c.client, &c.req.mac, c.now) {
            Ok(r)
        } else {
            Err(DropReason::ReservationInUse)
        };
    }
    if let Some(l) = leases.of_client(&c.client)
        && subnet.in_pool(l.ip)
        && usable(c, l.ip, leases)
    {
        return Ok(l.ip);
    }
    if let Some(ip) = c.req.requested_ip()
        && subnet.in_pool(ip)
        && usable(c, ip, leases)
    {
        return Ok(ip);
    }
    // Start where the MAC hashes to, so a client tends to get the same
    // address even after its lease is gone, and clients spread out.
    let size = subnet.pool_size();
    if size == 0 {
        return Err(DropReason::PoolExhausted);
    }
    let h = c.req.mac.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    });
    let start = h % size;
    for i in 0..size {
        let ip = nth_in_pool(subnet, (start + i) % size);
        if usable(c, ip, leases) {
            return Ok(ip);
        }
    }
    Err(DropReason::PoolExhausted)
}

fn nth_in_pool(subnet: &Subnet, mut n: u64) -> Ipv4Addr {
    for (s, e) in &subnet.ranges {
        let len = u64::from(e - s) + 1;
        if n < len {
            // n < len <= 2^32, so the sum stays inside the range.
            return Ipv4Addr::from(s.saturating_add(n as u32));
        }
        n -= len;
    }
    Ipv4Addr::UNSPECIFIED
}

fn lease_time(c: &Ctx, subnet: &Subnet) -> u32 {
    if c.machine.is_some() {
        subnet.lease_time
    } else {
        c.p.cfg.discovery_lease_time
    }
}

fn dest(req: &Request, t: MessageType) -> Dest {
    if !req.giaddr.is_unspecified() {
        Dest::Relay(req.giaddr)
    } else if t != MessageType::Nak && !req.ciaddr.is_unspecified() {
        Dest::Unicast(req.ciaddr)
    } else {
        Dest::Broadcast
    }
}

fn finish(c: &Ctx, m: &Message, t: MessageType) -> Result<Reply, DropReason> {
    Ok(Reply {
        bytes: options::encode(m).ok_or(DropReason::BadOption)?,
        to: if c.via == Via::Port4011 {
            Dest::Source
        } else {
            dest(c.req, t)
        },
        msg_type: t,
    })
}

/// Network options (and boot information) for an address reply.
fn address_reply(c: &Ctx, t: MessageType, ip: Option<Ipv4Addr>, subnet: &Subnet) -> Message {
    let mut m = options::reply(c.req, t, c.p.server_ip);
    let entry = c.machine.as_deref();
    let reserved = reservation(c, subnet).is_some();
    if let Some(ip) = ip {
        m.set_yiaddr(ip);
        let lt = lease_time(c, subnet);
        let o = m.opts_mut();
        o.insert(DhcpOption::AddressLeaseTime(lt));
        o.insert(DhcpOption::Renewal(lt / 2));
        o.insert(DhcpOption::Rebinding(lt / 8 * 7));
    }
    let mask = match entry.and_then(|e| e.address) {
        Some(net) if reserved => net.netmask(),
        _ => subnet.net.netmask(),
    };
    let o = m.opts_mut();
    o.insert(DhcpOption::SubnetMask(mask));
    if let Some(r) = entry.and_then(|e| e.gateway).or(subnet.router) {
        o.insert(DhcpOption::Router(vec![r]));
    }
    let dns = match entry {
        Some(e) if !e.dns.is_empty() => e.dns.clone(),
        _ => subnet.dns.clone(),
    };
    if !dns.is_empty() {
        o.insert(DhcpOption::DomainNameServer(dns));
    }
    if let Some(d) = entry
        .and_then(|e| e.domain.clone())
        .or(subnet.domain.clone())
    {
        o.insert(DhcpOption::DomainName(d));
    }
    if let Some(h) = entry.and_then(|e| e.hostname.clone()) {
        o.insert(DhcpOption::Hostname(h));
    }
    if let Ok(Some(b)) = options::boot_info(c.req, &c.p.cfg, c.p.server_ip, c.secure_boot()) {
        options::add_boot(&mut m, c.req, &b);
    }
    // This server hands out the address and the script: no ProxyDHCP offer
    // will follow, and iPXE need not wait for one.
    if c.p.cfg.ipxe_no_proxy_dhcp && ClientKind::of(c.req) == ClientKind::Ipxe {
        options::ipxe_no_proxydhcp(&mut m);
    }
    options::echo_relay_info(&mut m, c.req);
    m
}

fn notice(c: &Ctx, step: BootStep, m: &Message) -> Option<Notice> {
    let e = c.machine.as_ref()?;
    let mut detail = format!("{} via {}", m.yiaddr(), ClientKind::of(c.req).label());
    if let Some(Ok(f)) = m.fname_str() {
        detail.push_str(&format!(" file={}", f.trim_end_matches('\0')));
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

fn discover(c: &Ctx, subnet: &Subnet, leases: &mut LeaseTable) -> Result<Outcome, DropReason> {
    admit(c)?;
    let ip = choose_address(c, subnet, leases)?;
    // A dynamic address unknown to this table, while a previous instance's
    // leases may still run: ping before offering.
    let probe =
        (c.now < c.p.probe_until && reservation(c, subnet).is_none() && leases.get(ip).is_none())
            .then_some(Probe {
                ip,
                client: c.client,
                mac: c.req.mac,
            });
    leases.offer(
        ip,
        c.client,
        c.req.mac,
        c.now + u64::from(c.p.cfg.offer_hold),
    );
    let m = address_reply(c, MessageType::Offer, Some(ip), subnet);
    Ok(Outcome {
        notice: notice(c, BootStep::DhcpOffer, &m),
        discovered: c.machine.is_none().then(|| discovered(c.req, Some(ip))),
        reply: Some(finish(c, &m, MessageType::Offer)?),
        probe,
        ..Outcome::default()
    })
}

fn nak(c: &Ctx) -> Result<Outcome, DropReason> {
    let mut m = options::reply(c.req, MessageType::Nak, c.p.server_ip);
    options::echo_relay_info(&mut m, c.req);
    Ok(Outcome {
        reply: Some(finish(c, &m, MessageType::Nak)?),
        ..Outcome::default()
    })
}

fn request(c: &Ctx, subnet: &Subnet, leases: &mut LeaseTable) -> Result<Outcome, DropReason> {
    admit(c)?;
    let ip = c
        .req
        .requested_ip()
        .or((!c.req.ciaddr.is_unspecified()).then_some(c.req.ciaddr))
        .ok_or(DropReason::NoLease)?;
    let ok = match reservation(c, subnet) {
        Some(r) => ip == r && leases.is_free_for(ip, &c.client, &c.req.mac, c.now),
        None => {
            subnet.in_pool(ip)
                && ((renew::own_lease(c, ip, leases) && usable(c, ip, leases))
                    || renew::adopt(c, ip, leases))
        }
    };
    if !ok {
        return nak(c);
    }
    let until = c.now + u64::from(lease_time(c, subnet));
    let writes = leases.bind(ip, c.client, c.req.mac, until);
    let m = address_reply(c, MessageType::Ack, Some(ip), subnet);
    Ok(Outcome {
        notice: notice(c, BootStep::DhcpAck, &m),
        discovered: c.machine.is_none().then(|| discovered(c.req, Some(ip))),
        reply: Some(finish(c, &m, MessageType::Ack)?),
        writes,
        ..Outcome::default()
    })
}

fn inform(c: &Ctx, subnet: &Subnet) -> Result<Outcome, DropReason> {
    admit(c)?;
    let m = address_reply(c, MessageType::Ack, None, subnet);
    Ok(Outcome {
        reply: Some(finish(c, &m, MessageType::Ack)?),
        ..Outcome::default()
    })
}

/// proxyDHCP mode: boot information only, never an address.
mod proxy;
use proxy::proxy;

/// DECLINE and RELEASE: a client giving an address back.
mod give_back;
mod renew;
use give_back::{decline, release};

#[cfg(test)]
mod tests;
