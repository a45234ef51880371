//! The lease table: which client holds (or was offered, or declined) which
//! address until when. Pure in-memory state owned by one task; every change
//! that must survive a crash is returned as a [`LeaseWrite`] for the driver
//! to commit (see `lease_store`) before the reply that depends on it is sent.
//! Offers live only here: they are held briefly so two concurrent
//! DISCOVERs never get the same address, and are not persisted.
//!
//! Leases belong to a [`ClientKey`]: the client identifier (option 61) when
//! the client sends one, else its hardware address (RFC 2131 4.2), except
//! for known Machines, which the policy keys by hardware address as a host
//! reservation would be. `Lease::mac` is always the hardware address. When
//! either the lease or the request has no client identifier, the hardware
//! addresses decide (as Kea does): a client that stops sending option 61
//! (firmware after an OS, a crafted INIT-REBOOT) keeps its address.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use sha2::Digest;

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

/// Who a lease belongs to, in 16 bytes: tag 0 = hardware address (bytes
/// 1..7); tag 1..=15 = a client identifier of that length, verbatim; tag
/// 0xff = the first 15 bytes of SHA-256 of a longer client identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientKey(pub [u8; 16]);

impl ClientKey {
    pub fn from_mac(mac: &[u8; 6]) -> ClientKey {
        let mut k = [0u8; 16];
        k[1..7].copy_from_slice(mac);
        ClientKey(k)
    }

    /// Key of a client identifier (option 61); `None` for an empty one.
    pub fn from_client_id(id: &[u8]) -> Option<ClientKey> {
        let mut k = [0u8; 16];
        match id.len() {
            0 => return None,
            n @ 1..=15 => {
                k[0] = n as u8;
                k[1..=n].copy_from_slice(id);
            }
            _ => {
                k[0] = 0xff;
                k[1..].copy_from_slice(&sha2::Sha256::digest(id)[..15]);
            }
        }
        Some(ClientKey(k))
    }

    /// Whether this key is a hardware address rather than a client identifier.
    pub fn is_mac(&self) -> bool {
        self.0[0] == 0
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    pub ip: Ipv4Addr,
    /// The client's hardware address (chaddr).
    pub mac: [u8; 6],
    /// Whom the lease belongs to (client identifier or `mac`).
    pub client: ClientKey,
    /// Unix seconds.
    pub expires: u64,
    pub state: LeaseState,
}

/// A durable change to commit before the dependent reply goes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseWrite {
    Put(Lease),
    Delete(Ipv4Addr),
}

impl Lease {
    /// Whether this lease is the client's: same key, or, when one side has
    /// no client identifier, same hardware address.
    pub fn belongs_to(&self, client: &ClientKey, mac: &[u8; 6]) -> bool {
        self.client == *client || ((self.client.is_mac() || client.is_mac()) && self.mac == *mac)
    }
}

#[derive(Default, Debug)]
pub struct LeaseTable {
    by_ip: HashMap<Ipv4Addr, Lease>,
    /// Offered or Bound address of a client (one per client).
    by_client: HashMap<ClientKey, Ipv4Addr>,
}

impl LeaseTable {
    pub fn new() -> LeaseTable {
        LeaseTable::default()
    }

    /// Rebuild from persisted leases (at start). Later entries for a client
    /// win; addresses are unique by construction (keyed by IP).
    pub fn load(leases: impl IntoIterator<Item = Lease>) -> LeaseTable {
        let mut t = LeaseTable::new();
        for l in leases {
            if l.state != LeaseState::Declined {
                t.by_client.insert(l.client, l.ip);
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
    pub fn of_client(&self, client: &ClientKey) -> Option<&Lease> {
        self.by_client.get(client).and_then(|ip| self.by_ip.get(ip))
    }

    /// Addresses bound to hardware address `mac` under any client key
    /// (a scan: for the rare release of a retired machine).
    pub fn bound_to_mac(&self, mac: &[u8; 6]) -> Vec<(Ipv4Addr, ClientKey)> {
        self.by_ip
            .values()
            .filter(|l| l.mac == *mac && l.state == LeaseState::Bound)
            .map(|l| (l.ip, l.client))
            .collect()
    }

    /// Whether `client` may take `ip` now: nobody holds it, it is this
    /// client's, or the holder's lease (or offer, or decline) has expired.
    pub fn is_free_for(&self, ip: Ipv4Addr, client: &ClientKey, mac: &[u8; 6], now: u64) -> bool {
        match self.by_ip.get(&ip) {
            None => true,
            Some(l) if l.expires <= now => true,
            Some(l) => l.belongs_to(client, mac) && l.state != LeaseState::Declined,
        }
    }

    /// Bound leases held (unexpired) at `now`.
    pub fn bound(&self, now: u64) -> impl Iterator<Item = &Lease> {
        self.by_ip
            .values()
            .filter(move |l| l.state == LeaseState::Bound && l.expires > now)
    }

    /// Remove whatever `ip` holds, and this client's older address.
    fn take(&mut self, ip: Ipv4Addr, client: &ClientKey, writes: &mut Vec<LeaseWrite>) {
        if let Some(old) = self.by_ip.remove(&ip) {
            if self.by_client.get(&old.client) == Some(&ip) {
                self.by_client.remove(&old.client);
            }
            if old.client != *client && old.state != LeaseState::Offered {
                writes.push(LeaseWrite::Delete(ip));
            }
        }
        if let Some(prev) = self.by_client.remove(client)
            && prev != ip
            && let Some(old) = self.by_ip.remove(&prev)
            && old.state == LeaseState::Bound
        {
            writes.push(LeaseWrite::Delete(prev));
        }
    }

    /// Hold `ip` for `client` until `until` (an OFFER). A bound lease of the
    /// same client on the same address is left as it is. Nothing to persist.
    pub fn offer(&mut self, ip: Ipv4Addr, client: ClientKey, mac: [u8; 6], until: u64) {
        if let Some(l) = self.by_ip.get(&ip)
            && l.client == client
            && l.state == LeaseState::Bound
            && l.expires >= until
        {
            return;
        }
        // Moving an offer never drops the client's bound lease elsewhere:
        // that only happens when the new address is bound.
        if let Some(l) = self.by_ip.get(&ip)
            && l.client != client
            && self.by_client.get(&l.client) == Some(&ip)
        {
            let other = l.client;
            self.by_client.remove(&other);
        }
        if let Some(prev) = self.by_client.get(&client).copied()
            && prev != ip
            && self
                .by_ip
                .get(&prev)
                .is_some_and(|l| l.state == LeaseState::Offered)
        {
            self.by_ip.remove(&prev);
        }
        let keep_bound = self.by_client.get(&client).is_some_and(|p| {
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
                client,
                expires: until,
                state: LeaseState::Offered,
            },
        );
        if !keep_bound {
            self.by_client.insert(client, ip);
        }
    }

    /// Bind `ip` to `client` until `until` (an ACK). Returns what to persist.
    pub fn bind(
        &mut self,
        ip: Ipv4Addr,
        client: ClientKey,
        mac: [u8; 6],
        until: u64,
    ) -> Vec<LeaseWrite> {
        let mut w = Vec::new();
        self.take(ip, &client, &mut w);
        let l = Lease {
            ip,
            mac,
            client,
            expires: until,
            state: LeaseState::Bound,
        };
        self.by_ip.insert(ip, l);
        self.by_client.insert(client, ip);
        w.push(LeaseWrite::Put(l));
        w
    }

    /// The client declined `ip` (someone else uses it): quarantine it.
    pub fn decline(
        &mut self,
        ip: Ipv4Addr,
        client: ClientKey,
        mac: [u8; 6],
        until: u64,
    ) -> Vec<LeaseWrite> {
        if self.by_client.get(&client) == Some(&ip) {
            self.by_client.remove(&client);
        }
        let l = Lease {
            ip,
            mac,
            client,
            expires: until,
            state: LeaseState::Declined,
        };
        self.by_ip.insert(ip, l);
        vec![LeaseWrite::Put(l)]
    }

    /// The client gives `ip` back; only its own lease is released.
    pub fn release(&mut self, ip: Ipv4Addr, client: &ClientKey, mac: &[u8; 6]) -> Vec<LeaseWrite> {
        match self.by_ip.get(&ip) {
            Some(l) if l.belongs_to(client, mac) && l.state != LeaseState::Declined => {
                let persisted = l.state == LeaseState::Bound;
                let owner = l.client;
                self.by_ip.remove(&ip);
                if self.by_client.get(&owner) == Some(&ip) {
                    self.by_client.remove(&owner);
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
    pub fn withdraw_offer(&mut self, client: &ClientKey) {
        if let Some(ip) = self.by_client.get(client).copied()
            && self
                .by_ip
                .get(&ip)
                .is_some_and(|l| l.state == LeaseState::Offered)
        {
            self.by_ip.remove(&ip);
            self.by_client.remove(client);
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
                && self.by_client.get(&l.client) == Some(ip)
            {
                self.by_client.remove(&l.client);
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
    fn k(m: [u8; 6]) -> ClientKey {
        ClientKey::from_mac(&m)
    }

    #[test]
    fn offers_hold_addresses() {
        let mut t = LeaseTable::new();
        t.offer(ip(5), k(A), A, 100);
        assert!(!t.is_free_for(ip(5), &k(B), &B, 50));
        assert!(t.is_free_for(ip(5), &k(A), &A, 50));
        assert!(t.is_free_for(ip(5), &k(B), &B, 100));
        assert_eq!(t.sweep(100), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn bind_moves_client_and_persists() {
        let mut t = LeaseTable::new();
        let w = t.bind(ip(5), k(A), A, 100);
        assert_eq!(w.len(), 1);
        let w = t.bind(ip(6), k(A), A, 200);
        assert_eq!(w[0], LeaseWrite::Delete(ip(5)));
        assert_eq!(t.of_client(&k(A)).unwrap().ip, ip(6));
        assert!(t.get(ip(5)).is_none());
        // Offer elsewhere keeps the bound lease until the new one binds.
        t.offer(ip(7), k(A), A, 300);
        assert_eq!(t.get(ip(6)).unwrap().state, LeaseState::Bound);
        assert_eq!(t.bound_to_mac(&A), vec![(ip(6), k(A))]);
    }

    #[test]
    fn release_only_own_and_expiry_frees() {
        let mut t = LeaseTable::new();
        t.bind(ip(5), k(A), A, 100);
        assert!(t.release(ip(5), &k(B), &B).is_empty());
        assert!(!t.is_free_for(ip(5), &k(B), &B, 99));
        assert!(t.is_free_for(ip(5), &k(B), &B, 100));
        let w = t.bind(ip(5), k(B), B, 300);
        assert_eq!(
            w,
            vec![
                LeaseWrite::Delete(ip(5)),
                LeaseWrite::Put(*t.get(ip(5)).unwrap())
            ]
        );
        assert!(t.of_client(&k(A)).is_none());
        assert_eq!(t.release(ip(5), &k(B), &B), vec![LeaseWrite::Delete(ip(5))]);
    }

    #[test]
    fn declined_is_quarantined() {
        let mut t = LeaseTable::new();
        t.bind(ip(5), k(A), A, 100);
        t.decline(ip(5), k(A), A, 50);
        assert!(!t.is_free_for(ip(5), &k(A), &A, 10));
        assert!(t.of_client(&k(A)).is_none());
    }

    #[test]
    fn client_ids_are_distinct_clients_behind_one_mac() {
        let id1 = ClientKey::from_client_id(&[1, 2, 0, 0, 0, 0, 1]).unwrap();
        let id2 = ClientKey::from_client_id(&[0xff; 19]).unwrap();
        assert_ne!(id1, k(A));
        assert_ne!(id1, id2);
        assert!(!id1.is_mac() && !id2.is_mac() && k(A).is_mac());
        assert_eq!(ClientKey::from_client_id(&[]), None);
        // Long identifiers hash; equal ones give equal keys.
        assert_eq!(ClientKey::from_client_id(&[0xff; 19]), Some(id2));
        let mut t = LeaseTable::new();
        t.bind(ip(5), id1, A, 100);
        assert!(!t.is_free_for(ip(5), &id2, &A, 50), "same chaddr, other id");
        assert!(t.is_free_for(ip(5), &id1, &B, 50), "same id, other chaddr");
        // Without a client identifier the hardware address decides.
        assert!(t.is_free_for(ip(5), &k(A), &A, 50));
        assert!(!t.is_free_for(ip(5), &k(B), &B, 50));
        t.bind(ip(6), id2, A, 100);
        assert_eq!(t.bound_to_mac(&A).len(), 2);
    }
}
