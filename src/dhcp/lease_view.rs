//! A read-only, concurrent view of the bound leases by hardware address,
//! for other services (the boot HTTP server asks which address a machine
//! leased). The DHCP server updates it after each batch of lease writes is
//! journaled, so it only ever shows leases that were persisted. Cheap to
//! clone; a read takes a shared lock for one hash lookup.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, RwLock};

use super::lease::{Lease, LeaseState, LeaseWrite};

#[derive(Default)]
struct Inner {
    by_mac: HashMap<[u8; 6], (Ipv4Addr, u64)>,
    by_ip: HashMap<Ipv4Addr, [u8; 6]>,
}

impl Inner {
    fn put(&mut self, l: &Lease) {
        if l.state == LeaseState::Bound {
            self.by_mac.insert(l.mac, (l.ip, l.expires));
            self.by_ip.insert(l.ip, l.mac);
        } else {
            self.delete(l.ip);
        }
    }

    fn delete(&mut self, ip: Ipv4Addr) {
        if let Some(mac) = self.by_ip.remove(&ip)
            && self.by_mac.get(&mac).is_some_and(|(i, _)| *i == ip)
        {
            self.by_mac.remove(&mac);
        }
    }
}

/// Bound leases by MAC (the last one bound wins when a MAC holds several).
#[derive(Clone, Default)]
pub struct LeaseView {
    inner: Arc<RwLock<Inner>>,
}

impl LeaseView {
    pub fn new(leases: &[Lease]) -> LeaseView {
        let v = LeaseView::default();
        {
            let mut g = v.inner.write().unwrap_or_else(|e| e.into_inner());
            for l in leases {
                g.put(l);
            }
        }
        v
    }

    /// Apply persisted writes.
    pub fn apply(&self, writes: &[LeaseWrite]) {
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        for w in writes {
            match w {
                LeaseWrite::Put(l) => g.put(l),
                LeaseWrite::Delete(ip) => g.delete(*ip),
            }
        }
    }

    /// The address `mac` holds a bound, unexpired lease on at `now`.
    pub fn address_of(&self, mac: &[u8; 6], now: u64) -> Option<Ipv4Addr> {
        let g = self.inner.read().unwrap_or_else(|e| e.into_inner());
        g.by_mac
            .get(mac)
            .filter(|(_, expires)| *expires > now)
            .map(|(ip, _)| *ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dhcp::lease::ClientKey;

    #[test]
    fn follows_binds_moves_releases_and_expiry() {
        let mac = [2, 0, 0, 0, 0, 1];
        let l = |n: u8, state| Lease {
            ip: Ipv4Addr::new(10, 0, 0, n),
            mac,
            client: ClientKey::from_mac(&mac),
            expires: 100,
            state,
        };
        let v = LeaseView::new(&[l(5, LeaseState::Bound)]);
        assert_eq!(v.address_of(&mac, 50), Some(Ipv4Addr::new(10, 0, 0, 5)));
        assert_eq!(v.address_of(&mac, 100), None, "expired");
        // Moved to .6; the delete of .5 comes after and must not hide .6.
        v.apply(&[
            LeaseWrite::Put(l(6, LeaseState::Bound)),
            LeaseWrite::Delete(Ipv4Addr::new(10, 0, 0, 5)),
        ]);
        assert_eq!(v.address_of(&mac, 50), Some(Ipv4Addr::new(10, 0, 0, 6)));
        v.apply(&[LeaseWrite::Put(l(6, LeaseState::Declined))]);
        assert_eq!(v.address_of(&mac, 50), None);
        v.apply(&[LeaseWrite::Put(l(7, LeaseState::Bound))]);
        v.apply(&[LeaseWrite::Delete(Ipv4Addr::new(10, 0, 0, 7))]);
        assert_eq!(v.address_of(&mac, 50), None);
    }
}
