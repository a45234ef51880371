//! A client giving an address back: DECLINE (the address is in use on the
//! wire: quarantined, unless it is a declared Machine's reservation) and
//! RELEASE. Both act only on the sender's own lease.

use super::{Ctx, Outcome, Probe, Warning};
use crate::dhcp::lease::{LeaseTable, LeaseWrite};
use crate::dhcp::packet::DropReason;

/// Quarantine time of a declined address.
const DECLINE_HOLD: u64 = 600;

pub(super) fn decline(c: &Ctx, leases: &mut LeaseTable) -> Result<Outcome, DropReason> {
    let ip = c.req.requested_ip().ok_or(DropReason::NoLease)?;
    // A client is only the MAC it sends: a DECLINE must not keep a declared
    // Machine off its reservation. Counted, shown, ignored.
    if let Some(e) = c.machines.by_ip(&ip)
        && e.address.is_some_and(|a| a.addr() == ip)
    {
        return Ok(Outcome {
            dropped: Some(DropReason::DeclinedReservation),
            warning: Some(Warning {
                namespace: e.namespace.clone(),
                name: e.name.clone(),
                reason: "ReservationDeclined",
                message: format!(
                    "a DHCP DECLINE named the reserved address {ip}: ignored, the reservation is kept"
                ),
            }),
            ..Outcome::default()
        });
    }
    match leases.get(ip) {
        Some(l) if l.belongs_to(&c.client, &c.req.mac) => Ok(Outcome {
            writes: leases.decline(ip, c.client, c.req.mac, c.now + DECLINE_HOLD),
            ..Outcome::default()
        }),
        _ => Err(DropReason::NoLease),
    }
}

pub(super) fn release(c: &Ctx, leases: &mut LeaseTable) -> Result<Outcome, DropReason> {
    let writes = leases.release(c.req.ciaddr, &c.client, &c.req.mac);
    if writes.is_empty() {
        return Err(DropReason::NoLease);
    }
    Ok(Outcome {
        writes,
        ..Outcome::default()
    })
}

/// An offered address answered a ping: quarantined as if declined.
pub(super) fn quarantine(p: &Probe, leases: &mut LeaseTable, now: u64) -> Vec<LeaseWrite> {
    leases.decline(p.ip, p.client, p.mac, now + DECLINE_HOLD)
}
