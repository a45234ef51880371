//! A read-only, concurrent view of the bound DHCPv6 leases by MAC, for the
//! boot services (boot HTTP allows a Machine's requests from an address
//! its lease gave it). A MAC may hold several: firmware and iPXE ask with
//! different IAIDs. Updated after each batch of lease writes is journaled,
//! so it only shows persisted leases. Cheap to clone.

use std::collections::HashMap;
use std::net::Ipv6Addr;
use std::sync::{Arc, RwLock};

use super::lease::{Lease6, LeaseWrite6, State6};

#[derive(Default)]
struct Inner {
    by_addr: HashMap<Ipv6Addr, ([u8; 6], u64)>,
    by_mac: HashMap<[u8; 6], Vec<Ipv6Addr>>,
}

impl Inner {
    fn put(&mut self, l: &Lease6) {
        self.delete(l.addr);
        if let (State6::Bound, Some(mac)) = (l.state, l.mac) {
            self.by_addr.insert(l.addr, (mac, l.expires));
            self.by_mac.entry(mac).or_default().push(l.addr);
        }
    }

    fn delete(&mut self, addr: Ipv6Addr) {
        if let Some((mac, _)) = self.by_addr.remove(&addr)
            && let Some(v) = self.by_mac.get_mut(&mac)
        {
            v.retain(|a| *a != addr);
            if v.is_empty() {
                self.by_mac.remove(&mac);
            }
        }
    }
}

/// Bound DHCPv6 leases by MAC.
#[derive(Clone, Default)]
pub struct LeaseView6 {
    inner: Arc<RwLock<Inner>>,
}

impl LeaseView6 {
    pub fn new(leases: &[Lease6]) -> LeaseView6 {
        let v = LeaseView6::default();
        {
            let mut g = v.inner.write().unwrap_or_else(|e| e.into_inner());
            for l in leases {
                g.put(l);
            }
        }
        v
    }

    /// Apply persisted writes.
    pub fn apply(&self, writes: &[LeaseWrite6]) {
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        for w in writes {
            match w {
                LeaseWrite6::Put(l) => g.put(l),
                LeaseWrite6::Delete(a) => g.delete(*a),
            }
        }
    }

    /// The addresses `mac` holds bound, unexpired leases on at `now`.
    pub fn addresses_of(&self, mac: &[u8; 6], now: u64) -> Vec<Ipv6Addr> {
        let g = self.inner.read().unwrap_or_else(|e| e.into_inner());
        g.by_mac
            .get(mac)
            .into_iter()
            .flatten()
            .filter(|a| g.by_addr.get(a).is_some_and(|(_, e)| *e > now))
            .copied()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dhcp::lease::ClientKey;

    #[test]
    fn follows_binds_releases_and_expiry() {
        let mac = [2, 0, 0, 0, 0, 1];
        let l = |n: u16, iaid, state| Lease6 {
            addr: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, n),
            owner: ClientKey::from_mac(&mac),
            iaid,
            duid: ClientKey([1; 16]),
            mac: Some(mac),
            boot: true,
            expires: 100,
            state,
        };
        let v = LeaseView6::new(&[l(5, 1, State6::Bound)]);
        assert_eq!(v.addresses_of(&mac, 50), vec![l(5, 1, State6::Bound).addr]);
        assert!(v.addresses_of(&mac, 100).is_empty(), "expired");
        v.apply(&[LeaseWrite6::Put(l(6, 2, State6::Bound))]);
        assert_eq!(v.addresses_of(&mac, 50).len(), 2, "two IAs");
        v.apply(&[LeaseWrite6::Delete(l(5, 1, State6::Bound).addr)]);
        v.apply(&[LeaseWrite6::Put(l(6, 2, State6::Declined))]);
        assert!(v.addresses_of(&mac, 50).is_empty());
    }
}
