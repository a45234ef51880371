//! A REQUEST for an address the client already holds (INIT-REBOOT,
//! RENEWING, REBINDING): whether it is the client's own here, and when a
//! new server takes back an address its predecessor leased.

use std::net::Ipv4Addr;

use super::Ctx;
use crate::dhcp::lease::{LeaseState, LeaseTable};

/// Whether `ip` is this client's own: offered to it by this server, or its
/// existing lease (INIT-REBOOT, RENEWING, REBINDING). A REQUEST for any
/// other address, even a free one it was never offered, is refused, so a
/// client cannot steer the server onto an address of its choosing; a
/// renewing client whose lease is unknown gets a NAK and starts again with
/// DISCOVER (RFC 2131 4.3.2).
pub(super) fn own_lease(c: &Ctx, ip: Ipv4Addr, leases: &LeaseTable) -> bool {
    leases
        .get(ip)
        .is_some_and(|l| l.belongs_to(&c.client, &c.req.mac) && l.state != LeaseState::Declined)
}

/// Whether a client RENEWING or REBINDING `ip` (its `ciaddr`, no requested
/// address) gets it although this server has no lease of it for that
/// client: only while ping checks guard a start without the previous
/// server's leases ([`super::Policy::probe_until`], e.g. a new leader after a
/// failover), and only when no lease here holds `ip` for anyone else (none,
/// expired, or a quarantine because the address answered a ping: the
/// renewing client is the one using it). The previous server leased it;
/// taking it back keeps the client on its address instead of sending it
/// through DISCOVER onto another. Outside that window a renewal of an
/// unknown lease is refused, as [`own_lease`] says.
pub(super) fn adopt(c: &Ctx, ip: Ipv4Addr, leases: &LeaseTable) -> bool {
    c.now < c.p.probe_until
        && c.req.requested_ip().is_none()
        && c.req.ciaddr == ip
        && ip != c.p.server_ip
        && c.machines.by_ip(&ip).is_none()
        && leases.get(ip).is_none_or(|l| {
            l.expires <= c.now
                || l.state == LeaseState::Declined
                || l.belongs_to(&c.client, &c.req.mac)
        })
}
