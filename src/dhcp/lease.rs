//! The lease table: which client holds (or was offered, or declined) which
//! address until when. Pure in-memory state owned by one task; every change
//! that must survive a crash is returned as a [`LeaseWrite`] for the driver
//! to commit (see `lease_db`) before the reply that depends on it is sent.
//! Offers live only here: they are held briefly so two concurrent
//! DISCOVERs never get the same address, and are not persisted.

use std::collections::HashMap;
use std::net::Ipv4Addr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    Offered,
    Bound,
    Declined,
}

impl LeaseState {
    pub fn to_u8(self) -> u8 {
        match self {
            LeaseState::Offered => 0,
            LeaseState::Bound => 1,
            LeaseState::Declined => 2,
        }
    }
    pub fn from_u8(v: u8) -> Option<LeaseState> {
        Some(match v {
            0 => LeaseState::Offered,
            1 => LeaseState::Bound,
            2 => LeaseState::Declined,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    pub ip: Ipv4Addr,
    pub mac: [u8; 6],
    /// Unix seconds.
    pub expires: u64,
    pub state: LeaseState,
}

/// A durable change to commit before the dependent reply goes out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseWrite {
    Put(Lease),
    Delete(Ipv4Addr),
}

#[derive(Default, Debug)]
pub struct LeaseTable {
    by_ip: HashMap<Ipv4Addr, Lease>,
    /// Offered or Bound address of a client (one per client).
    by_mac: HashMap<[u8; 6], Ipv4Addr>,
}

impl LeaseTable {
    pub fn new() -> LeaseTable {
        LeaseTable::default()
    }

    /// Rebuild from persisted leases (at start). Later entries for a MAC
    /// win; addresses are unique by construction (keyed by IP).
    pub fn load(leases: impl IntoIterator<Item = Lease>) -> LeaseTable {
        let mut t = LeaseTable::new();
        for l in leases {
            if l.state != LeaseState::Declined {
                t.by_mac.insert(l.mac, l.ip);
            }
            t.by_ip.insert(l.ip, l);
        }
        t
    }

    pub fn len(&self) -> usize {
        self.by_ip.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_ip.is_empty()
    }

    pub fn get(&self, ip: Ipv4Addr) -> Option<&Lease> {
        self.by_ip.get(&ip)
    }

    /// The client's current (offered or bound) lease, expired or not.
    pub fn of_mac(&self, mac: &[u8; 6]) -> Option<&Lease> {
        self.by_mac.get(mac).and_then(|ip| self.by_ip.get(ip))
    }

    /// Whether `mac` may take `ip` now: nobody holds it, it is this
    /// client's, or the holder's lease (or offer, or decline) has expired.
    pub fn is_free_for(&self, ip: Ipv4Addr, mac: &[u8; 6], now: u64) -> bool {
        match self.by_ip.get(&ip) {
            None => true,
            Some(l) if l.expires <= now => true,
            Some(l) => l.mac == *mac && l.state != LeaseState::Declined,
        }
    }

    /// Bound leases held (unexpired) at `now`.
    pub fn bound(&self, now: u64) -> impl Iterator<Item = &Lease> {
        self.by_ip
            .values()
            .filter(move |l| l.state == LeaseState::Bound && l.expires > now)
    }

    /// Remove whatever `ip` holds, and this client's older address.
    fn take(&mut self, ip: Ipv4Addr, mac: &[u8; 6], writes: &mut Vec<LeaseWrite>) {
        if let Some(old) = self.by_ip.remove(&ip) {
            if self.by_mac.get(&old.mac) == Some(&ip) {
                self.by_mac.remove(&old.mac);
            }
            if old.mac != *mac && old.state != LeaseState::Offered {
                writes.push(LeaseWrite::Delete(ip));
            }
        }
        if let Some(prev) = self.by_mac.remove(mac)
            && prev != ip
            && let Some(old) = self.by_ip.remove(&prev)
            && old.state == LeaseState::Bound
        {
            writes.push(LeaseWrite::Delete(prev));
        }
    }

    /// Hold `ip` for `mac` until `until` (an OFFER). A bound lease of the
    /// same client on the same address is left as it is. Nothing to persist.
    pub fn offer(&mut self, ip: Ipv4Addr, mac: [u8; 6], until: u64) {
        if let Some(l) = self.by_ip.get(&ip)
            && l.mac == mac
            && l.state == LeaseState::Bound
            && l.expires >= until
        {
            return;
        }
        // Moving an offer never drops the client's bound lease elsewhere:
        // that only happens when the new address is bound.
        if let Some(l) = self.by_ip.get(&ip)
            && l.mac != mac
            && self.by_mac.get(&l.mac) == Some(&ip)
        {
            let other = l.mac;
            self.by_mac.remove(&other);
        }
        if let Some(prev) = self.by_mac.get(&mac).copied()
            && prev != ip
            && self
                .by_ip
                .get(&prev)
                .is_some_and(|l| l.state == LeaseState::Offered)
        {
            self.by_ip.remove(&prev);
        }
        let keep_bound = self.by_mac.get(&mac).is_some_and(|p| {
            *p != ip
                && self
                    .by_ip
                    .get(p)
                    .is_some_and(|l| l.state == LeaseState::Bound)
        });
        self.by_ip.insert(
            ip,
            Lease {
                ip,
                mac,
                expires: until,
                state: LeaseState::Offered,
            },
        );
        if !keep_bound {
            self.by_mac.insert(mac, ip);
        }
    }

    /// Bind `ip` to `mac` until `until` (an ACK). Returns what to persist.
    pub fn bind(&mut self, ip: Ipv4Addr, mac: [u8; 6], until: u64) -> Vec<LeaseWrite> {
        let mut w = Vec::new();
        self.take(ip, &mac, &mut w);
        let l = Lease {
            ip,
            mac,
            expires: until,
            state: LeaseState::Bound,
        };
        self.by_ip.insert(ip, l);
        self.by_mac.insert(mac, ip);
        w.push(LeaseWrite::Put(l));
        w
    }

    /// The client declined `ip` (someone else uses it): quarantine it.
    pub fn decline(&mut self, ip: Ipv4Addr, mac: [u8; 6], until: u64) -> Vec<LeaseWrite> {
        let mut w = Vec::new();
        if self.by_mac.get(&mac) == Some(&ip) {
            self.by_mac.remove(&mac);
        }
        let l = Lease {
            ip,
            mac,
            expires: until,
            state: LeaseState::Declined,
        };
        self.by_ip.insert(ip, l);
        w.push(LeaseWrite::Put(l));
        w
    }

    /// The client gives `ip` back; only its own lease is released.
    pub fn release(&mut self, ip: Ipv4Addr, mac: &[u8; 6]) -> Vec<LeaseWrite> {
        match self.by_ip.get(&ip) {
            Some(l) if l.mac == *mac && l.state != LeaseState::Declined => {
                let persisted = l.state == LeaseState::Bound;
                self.by_ip.remove(&ip);
                if self.by_mac.get(mac) == Some(&ip) {
                    self.by_mac.remove(mac);
                }
                if persisted {
                    vec![LeaseWrite::Delete(ip)]
                } else {
                    Vec::new()
                }
            }
            _ => Vec::new(),
        }
    }

    /// The client chose another server: forget our offer to it.
    pub fn withdraw_offer(&mut self, mac: &[u8; 6]) {
        if let Some(ip) = self.by_mac.get(mac).copied()
            && self
                .by_ip
                .get(&ip)
                .is_some_and(|l| l.state == LeaseState::Offered)
        {
            self.by_ip.remove(&ip);
            self.by_mac.remove(mac);
        }
    }

    /// Drop expired offers (memory only). Expired bound leases stay so a
    /// returning client gets its old address back while nobody took it.
    pub fn sweep(&mut self, now: u64) -> usize {
        let dead: Vec<Ipv4Addr> = self
            .by_ip
            .values()
            .filter(|l| l.state == LeaseState::Offered && l.expires <= now)
            .map(|l| l.ip)
            .collect();
        for ip in &dead {
            if let Some(l) = self.by_ip.remove(ip)
                && self.by_mac.get(&l.mac) == Some(ip)
            {
                self.by_mac.remove(&l.mac);
            }
        }
        dead.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 2];
    fn ip(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, 0, n)
    }

    #[test]
    fn offers_hold_addresses() {
        let mut t = LeaseTable::new();
        t.offer(ip(5), A, 100);
        assert!(!t.is_free_for(ip(5), &B, 50));
        assert!(t.is_free_for(ip(5), &A, 50));
        assert!(t.is_free_for(ip(5), &B, 100));
        assert_eq!(t.sweep(100), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn bind_moves_client_and_persists() {
        let mut t = LeaseTable::new();
        let w = t.bind(ip(5), A, 100);
        assert_eq!(w.len(), 1);
        let w = t.bind(ip(6), A, 200);
        assert_eq!(w[0], LeaseWrite::Delete(ip(5)));
        assert_eq!(t.of_mac(&A).unwrap().ip, ip(6));
        assert!(t.get(ip(5)).is_none());
        // Offer elsewhere keeps the bound lease until the new one binds.
        t.offer(ip(7), A, 300);
        assert_eq!(t.get(ip(6)).unwrap().state, LeaseState::Bound);
    }

    #[test]
    fn release_only_own_and_expiry_frees() {
        let mut t = LeaseTable::new();
        t.bind(ip(5), A, 100);
        assert!(t.release(ip(5), &B).is_empty());
        assert!(!t.is_free_for(ip(5), &B, 99));
        assert!(t.is_free_for(ip(5), &B, 100));
        let w = t.bind(ip(5), B, 300);
        assert_eq!(
            w,
            vec![
                LeaseWrite::Delete(ip(5)),
                LeaseWrite::Put(*t.get(ip(5)).unwrap())
            ]
        );
        assert!(t.of_mac(&A).is_none());
        assert_eq!(t.release(ip(5), &B), vec![LeaseWrite::Delete(ip(5))]);
    }

    #[test]
    fn declined_is_quarantined() {
        let mut t = LeaseTable::new();
        t.bind(ip(5), A, 100);
        t.decline(ip(5), A, 50);
        assert!(!t.is_free_for(ip(5), &A, 10));
        assert!(t.of_mac(&A).is_none());
    }
}
