//! Authoritative mode's address steps: choosing an address per IA
//! (reservation, the IA's own lease, the address asked for, then the pool
//! from a hash of the IA), Advertise and Reply with it, Renew and Rebind,
//! Confirm, Release and Decline (RFC 8415 section 18.3).

use std::net::Ipv6Addr;

use super::{Ctx, Outcome6, Skip6, ia_status, lifetimes};
use crate::api::BootStep;
use crate::dhcp::v6::config::{ReservedFor, Subnet6};
use crate::dhcp::v6::lease::{Lease6, LeaseTable6};
use crate::dhcp::v6::message::{IaNa, MessageType};
use crate::dhcp::v6::reply::{IaAnswer, status};

/// Pool addresses looked at, at most, per allocation: the pool of a /64
/// range cannot be scanned, and a hash start finds a free one at once
/// unless the pool is nearly full.
const MAX_SCAN: u128 = 1 << 16;

/// Whether a pool address may go to this IA: free for it, not reserved for
/// anyone else, not our own.
fn usable(c: &Ctx, subnet: &Subnet6, a: Ipv6Addr, iaid: u32, leases: &LeaseTable6) -> bool {
    Some(a) != c.p.server_address
        && leases.is_free_for(a, &c.owner, iaid, c.now)
        && !subnet.reservations.iter().any(|(w, r)| {
            *r == a
                && match w {
                    ReservedFor::Mac(m) => c.mac.as_ref() != Some(m),
                    ReservedFor::Duid(d) => c.m.msg.client_id.as_ref() != Some(d),
                }
        })
        && c.machines
            .reserved_for(&a)
            .is_none_or(|m| c.mac.as_ref() == Some(&m))
}

/// What the client's reservation means for one IA.
enum Reserved {
    /// No reservation: pick from the pool.
    None,
    /// This IA gets it.
    Take(Ipv6Addr),
    /// The boot client of the same firmware holds it: this plain IA (EDK2's
    /// IPv6 stack asking beside its PXE client, same DUID) gets a pool
    /// address.
    GiveWay,
    /// Someone else holds it.
    Taken,
}

/// The reservation for this IA: free, or this IA's, or held by another IA
/// of the same owner that gives way (it does unless this is a plain client
/// with the DUID of the boot client holding it).
fn reservation_for(c: &Ctx, subnet: &Subnet6, iaid: u32, leases: &LeaseTable6) -> Reserved {
    let Some(r) = c.reserved(subnet) else {
        return Reserved::None;
    };
    match leases.live(r, c.now) {
        None => Reserved::Take(r),
        Some(l) if l.owner != c.owner => Reserved::Taken,
        Some(l) if l.iaid == iaid || c.kind.is_boot() || !l.boot || l.duid != c.duid => {
            Reserved::Take(r)
        }
        Some(_) => Reserved::GiveWay,
    }
}

fn choose(c: &Ctx, subnet: &Subnet6, ia: &IaNa, leases: &LeaseTable6) -> Option<Ipv6Addr> {
    match reservation_for(c, subnet, ia.iaid, leases) {
        Reserved::Take(r) => return Some(r),
        // Rather than an address the Machine's config does not name.
        Reserved::Taken => return None,
        Reserved::None | Reserved::GiveWay => {}
    }
    if let Some(l) = leases.of_ia(&c.owner, ia.iaid, c.now)
        && subnet.in_pool(l.addr)
        && usable(c, subnet, l.addr, ia.iaid, leases)
    {
        return Some(l.addr);
    }
    for a in &ia.addrs {
        if subnet.in_pool(*a) && usable(c, subnet, *a, ia.iaid, leases) {
            return Some(*a);
        }
    }
    let size = subnet.pool_size();
    if size == 0 {
        return None;
    }
    // Start where the IA hashes to, so a client tends to get the same
    // address again and clients spread out.
    let h = c
        .owner
        .0
        .iter()
        .chain(ia.iaid.to_be_bytes().iter())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
        });
    let start = u128::from(h) % size;
    (0..size.min(MAX_SCAN))
        .filter_map(|i| subnet.nth((start + i) % size))
        .find(|a| usable(c, subnet, *a, ia.iaid, leases))
}

fn lease(c: &Ctx, addr: Ipv6Addr, iaid: u32, expires: u64) -> Lease6 {
    Lease6 {
        addr,
        owner: c.owner,
        iaid,
        duid: c.duid,
        mac: c.mac,
        boot: c.kind.is_boot(),
        expires,
        state: crate::dhcp::v6::lease::State6::Offered,
    }
}

/// Solicit (Advertise, or Reply with Rapid Commit) and Request (Reply):
/// an address for each IA, held for an Advertise, bound for a Reply.
pub(super) fn assign(
    c: &Ctx,
    subnet: &Subnet6,
    leases: &mut LeaseTable6,
    t: MessageType,
) -> Result<Outcome6, Skip6> {
    c.admit(Some(subnet))?;
    let (preferred, valid, t1, t2) = lifetimes(c, subnet);
    let mut a = c.answer(t, false, &c.dns(subnet));
    let mut writes = Vec::new();
    let mut first = None;
    for ia in &c.m.msg.ia_na {
        let Some(addr) = choose(c, subnet, ia, leases) else {
            a.ia_na.push(ia_status(
                ia.iaid,
                status::NO_ADDRS_AVAIL,
                "no address available",
            ));
            continue;
        };
        if t == MessageType::Advertise {
            let hold = c.now + u64::from(c.p.cfg.offer_hold);
            leases.offer(lease(c, addr, ia.iaid, hold));
        } else {
            writes.extend(leases.bind(lease(c, addr, ia.iaid, c.now + u64::from(valid))));
        }
        first.get_or_insert(addr);
        a.ia_na.push(IaAnswer {
            iaid: ia.iaid,
            t1,
            t2,
            addr: Some((addr, preferred, valid)),
            status: None,
        });
    }
    a.rapid_commit = t == MessageType::Reply && c.m.msg.msg_type == Some(MessageType::Solicit);
    let step = if t == MessageType::Advertise {
        BootStep::DhcpOffer
    } else {
        BootStep::DhcpAck
    };
    Ok(Outcome6 {
        notice: first.and_then(|addr| c.notice(step, Some(addr))),
        reply: Some(c.finish(&a)),
        writes,
        ..Outcome6::default()
    })
}

/// Renew and Rebind: extend what the IA holds. An address that is not the
/// IA's (any more) gets NoBinding on Renew and lifetimes 0 on Rebind.
pub(super) fn renew(
    c: &Ctx,
    subnet: &Subnet6,
    leases: &mut LeaseTable6,
    t: MessageType,
) -> Result<Outcome6, Skip6> {
    c.admit(Some(subnet))?;
    let (preferred, valid, t1, t2) = lifetimes(c, subnet);
    let mut a = c.answer(MessageType::Reply, false, &c.dns(subnet));
    let mut writes = Vec::new();
    for ia in &c.m.msg.ia_na {
        let want = choose(c, subnet, ia, leases);
        let ours = ia
            .addrs
            .iter()
            .copied()
            .find(|x| Some(*x) == want)
            .or_else(|| leases.of_ia(&c.owner, ia.iaid, c.now).map(|l| l.addr))
            .filter(|x| Some(*x) == want);
        match ours {
            Some(addr) => {
                writes.extend(leases.bind(lease(c, addr, ia.iaid, c.now + u64::from(valid))));
                a.ia_na.push(IaAnswer {
                    iaid: ia.iaid,
                    t1,
                    t2,
                    addr: Some((addr, preferred, valid)),
                    status: None,
                });
            }
            None if t == MessageType::Renew => {
                a.ia_na.push(ia_status(
                    ia.iaid,
                    status::NO_BINDING,
                    "no binding for this IA",
                ));
            }
            None => {
                // Rebind: tell the client its addresses are no longer valid.
                for x in &ia.addrs {
                    a.ia_na.push(IaAnswer {
                        iaid: ia.iaid,
                        t1: 0,
                        t2: 0,
                        addr: Some((*x, 0, 0)),
                        status: None,
                    });
                }
            }
        }
    }
    Ok(Outcome6 {
        reply: Some(c.finish(&a)),
        writes,
        ..Outcome6::default()
    })
}

/// Confirm: are the client's addresses on this link?
pub(super) fn confirm(c: &Ctx, subnet: &Subnet6) -> Result<Outcome6, Skip6> {
    let addrs: Vec<Ipv6Addr> =
        c.m.msg
            .ia_na
            .iter()
            .flat_map(|ia| ia.addrs.clone())
            .collect();
    if addrs.is_empty() {
        // RFC 8415 18.3.3: nothing to confirm, no reply.
        return Err(Skip6::Unhandled);
    }
    let mut a = c.answer(MessageType::Reply, false, &[]);
    a.boot_url = None;
    a.vendor_class = None;
    a.status = Some(if addrs.iter().all(|x| subnet.net.contains(x)) {
        (status::SUCCESS, "all addresses on link".into())
    } else {
        (status::NOT_ON_LINK, "not on this link".into())
    });
    Ok(Outcome6 {
        reply: Some(c.finish(&a)),
        ..Outcome6::default()
    })
}

/// Release and Decline: the client gives its addresses back (declined
/// ones are quarantined for a valid lifetime). Reply: Success.
pub(super) fn give_back(
    c: &Ctx,
    subnet: &Subnet6,
    leases: &mut LeaseTable6,
    decline: bool,
) -> Result<Outcome6, Skip6> {
    let mut writes = Vec::new();
    for ia in &c.m.msg.ia_na {
        for x in &ia.addrs {
            writes.extend(if decline {
                leases.decline(*x, &c.owner, c.now + u64::from(subnet.valid))
            } else {
                leases.release(*x, &c.owner)
            });
        }
    }
    let mut a = c.answer(MessageType::Reply, false, &[]);
    a.boot_url = None;
    a.vendor_class = None;
    a.status = Some((status::SUCCESS, "done".into()));
    Ok(Outcome6 {
        reply: Some(c.finish(&a)),
        writes,
        ..Outcome6::default()
    })
}
