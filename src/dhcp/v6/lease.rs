//! DHCPv6 leases in memory: one address per identity association, keyed
//! by (owner, IAID). The owner is a known Machine's MAC (so firmware, iPXE
//! and the installed OS, each with its own DUID, share the Machine's
//! reservation) or else the client's DUID. Advertised addresses are held
//! for a short time without a write; binds, releases and declines return
//! the [`LeaseWrite6`]s to persist before the reply goes out. Pure: no
//! I/O, time comes in as `now`.

use std::collections::HashMap;
use std::net::Ipv6Addr;

use crate::dhcp::lease::ClientKey;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State6 {
    Offered,
    Bound,
    /// A client said someone else uses the address: not handed out until
    /// `expires`.
    Declined,
}

impl State6 {
    pub fn to_u8(self) -> u8 {
        match self {
            State6::Offered => 0,
            State6::Bound => 1,
            State6::Declined => 2,
        }
    }
    pub fn from_u8(b: u8) -> Option<State6> {
        Some(match b {
            0 => State6::Offered,
            1 => State6::Bound,
            2 => State6::Declined,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease6 {
    pub addr: Ipv6Addr,
    /// Whom the lease belongs to (a Machine's MAC, else the DUID).
    pub owner: ClientKey,
    pub iaid: u32,
    /// The DUID that asked (differs from `owner` for known Machines).
    pub duid: ClientKey,
    pub mac: Option<[u8; 6]>,
    /// Asked for by a boot client (PXE, HTTP boot, iPXE).
    pub boot: bool,
    /// Unix seconds.
    pub expires: u64,
    pub state: State6,
}

/// A durable change to commit before the dependent reply goes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseWrite6 {
    Put(Lease6),
    Delete(Ipv6Addr),
}

/// The key of a DUID (its bytes, or a digest when longer than 15).
pub fn duid_key(duid: &[u8]) -> ClientKey {
    ClientKey::from_client_id(duid).unwrap_or(ClientKey([0xfe; 16]))
}

#[derive(Default, Debug)]
pub struct LeaseTable6 {
    by_addr: HashMap<Ipv6Addr, Lease6>,
    by_ia: HashMap<(ClientKey, u32), Ipv6Addr>,
}

impl LeaseTable6 {
    pub fn new() -> LeaseTable6 {
        LeaseTable6::default()
    }

    /// The table of recovered leases (expired ones are left out).
    pub fn load(leases: impl IntoIterator<Item = Lease6>, now: u64) -> LeaseTable6 {
        let mut t = LeaseTable6::new();
        for l in leases.into_iter().filter(|l| l.expires > now) {
            t.insert(l);
        }
        t
    }

    fn insert(&mut self, l: Lease6) {
        if let Some(old) = self.by_addr.insert(l.addr, l)
            && self.by_ia.get(&(old.owner, old.iaid)) == Some(&old.addr)
        {
            self.by_ia.remove(&(old.owner, old.iaid));
        }
        if l.state != State6::Declined {
            self.by_ia.insert((l.owner, l.iaid), l.addr);
        }
    }

    fn remove(&mut self, addr: Ipv6Addr) -> Option<Lease6> {
        let l = self.by_addr.remove(&addr)?;
        if self.by_ia.get(&(l.owner, l.iaid)) == Some(&addr) {
            self.by_ia.remove(&(l.owner, l.iaid));
        }
        Some(l)
    }

    pub fn len(&self) -> usize {
        self.by_addr.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_addr.is_empty()
    }

    pub fn get(&self, addr: Ipv6Addr) -> Option<&Lease6> {
        self.by_addr.get(&addr)
    }

    /// The live lease of an identity association.
    pub fn of_ia(&self, owner: &ClientKey, iaid: u32, now: u64) -> Option<&Lease6> {
        let a = self.by_ia.get(&(*owner, iaid))?;
        self.by_addr.get(a).filter(|l| l.expires > now)
    }

    /// Whether `addr` may go to the IA (`owner`, `iaid`): nobody holds it
    /// (or their hold ran out), or that IA itself does.
    pub fn is_free_for(&self, addr: Ipv6Addr, owner: &ClientKey, iaid: u32, now: u64) -> bool {
        match self.by_addr.get(&addr) {
            None => true,
            Some(l) if l.expires <= now => true,
            Some(l) => l.state != State6::Declined && l.owner == *owner && l.iaid == iaid,
        }
    }

    /// The live lease on `addr`.
    pub fn live(&self, addr: Ipv6Addr, now: u64) -> Option<&Lease6> {
        self.by_addr.get(&addr).filter(|l| l.expires > now)
    }

    /// Hold `l` (state Offered) for an Advertise; nothing to persist. A
    /// bound lease of the same address is left alone.
    pub fn offer(&mut self, l: Lease6) {
        if self
            .by_addr
            .get(&l.addr)
            .is_some_and(|o| o.state == State6::Bound && o.owner == l.owner && o.iaid == l.iaid)
        {
            return;
        }
        if let Some(prev) = self.by_ia.get(&(l.owner, l.iaid)).copied()
            && prev != l.addr
            && self
                .by_addr
                .get(&prev)
                .is_some_and(|p| p.state == State6::Offered)
        {
            self.remove(prev);
        }
        self.insert(Lease6 {
            state: State6::Offered,
            ..l
        });
    }

    /// Bind `l`: whatever else its IA held, and whoever else held its
    /// address, is dropped.
    pub fn bind(&mut self, l: Lease6) -> Vec<LeaseWrite6> {
        let mut w = Vec::new();
        if let Some(prev) = self.by_ia.get(&(l.owner, l.iaid)).copied()
            && prev != l.addr
            && let Some(p) = self.remove(prev)
            && p.state == State6::Bound
        {
            w.push(LeaseWrite6::Delete(prev));
        }
        let l = Lease6 {
            state: State6::Bound,
            ..l
        };
        self.insert(l);
        w.push(LeaseWrite6::Put(l));
        w
    }

    /// The client gives `addr` back.
    pub fn release(&mut self, addr: Ipv6Addr, owner: &ClientKey) -> Vec<LeaseWrite6> {
        match self.by_addr.get(&addr) {
            Some(l) if l.owner == *owner && l.state != State6::Declined => {
                self.remove(addr);
                vec![LeaseWrite6::Delete(addr)]
            }
            _ => Vec::new(),
        }
    }

    /// The client says `addr` is in use by someone else: quarantine it.
    pub fn decline(&mut self, addr: Ipv6Addr, owner: &ClientKey, until: u64) -> Vec<LeaseWrite6> {
        match self.by_addr.get(&addr).copied() {
            Some(l) if l.owner == *owner && l.state != State6::Declined => {
                let q = Lease6 {
                    owner: ClientKey([0; 16]),
                    iaid: 0,
                    duid: ClientKey([0; 16]),
                    mac: None,
                    boot: false,
                    expires: until,
                    state: State6::Declined,
                    addr,
                };
                self.remove(addr);
                self.insert(q);
                vec![LeaseWrite6::Put(q)]
            }
            _ => Vec::new(),
        }
    }

    /// A Request to another server: the client took someone else's offer.
    pub fn withdraw_offer(&mut self, owner: &ClientKey, iaid: u32) {
        if let Some(a) = self.by_ia.get(&(*owner, iaid)).copied()
            && self
                .by_addr
                .get(&a)
                .is_some_and(|l| l.state == State6::Offered)
        {
            self.remove(a);
        }
    }

    /// Forget what has expired (expired records need no write: a restart
    /// leaves them out too).
    pub fn sweep(&mut self, now: u64) {
        let gone: Vec<Ipv6Addr> = self
            .by_addr
            .values()
            .filter(|l| l.expires <= now)
            .map(|l| l.addr)
            .collect();
        for a in gone {
            self.remove(a);
        }
    }

    pub fn bound(&self, now: u64) -> impl Iterator<Item = &Lease6> {
        self.by_addr
            .values()
            .filter(move |l| l.state == State6::Bound && l.expires > now)
    }

    /// Every lease (for a snapshot).
    pub fn all(&self) -> impl Iterator<Item = &Lease6> {
        self.by_addr.values()
    }

    /// Bound leases of a MAC (a retired Machine's).
    pub fn bound_to_mac(&self, mac: &[u8; 6]) -> Vec<(Ipv6Addr, ClientKey)> {
        self.by_addr
            .values()
            .filter(|l| l.state == State6::Bound && l.mac.as_ref() == Some(mac))
            .map(|l| (l.addr, l.owner))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(n: u16, owner: u8, iaid: u32) -> Lease6 {
        Lease6 {
            addr: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 1, n),
            owner: ClientKey([owner; 16]),
            iaid,
            duid: ClientKey([owner; 16]),
            mac: Some([2, 0, 0, 0, 0, owner]),
            boot: false,
            expires: 100,
            state: State6::Offered,
        }
    }

    #[test]
    fn offers_hold_binds_write_and_expiry_frees() {
        let mut t = LeaseTable6::new();
        let a = lease(1, 1, 7);
        t.offer(a);
        assert!(!t.is_free_for(a.addr, &ClientKey([2; 16]), 7, 50));
        assert!(t.is_free_for(a.addr, &a.owner, 7, 50));
        assert!(
            !t.is_free_for(a.addr, &a.owner, 8, 50),
            "another IA of the owner"
        );
        assert!(
            t.is_free_for(a.addr, &ClientKey([2; 16]), 7, 100),
            "hold ran out"
        );
        let w = t.bind(a);
        assert_eq!(
            w,
            vec![LeaseWrite6::Put(Lease6 {
                state: State6::Bound,
                ..a
            })]
        );
        assert_eq!(t.of_ia(&a.owner, 7, 50).map(|l| l.addr), Some(a.addr));
        assert_eq!(t.bound(50).count(), 1);
        t.sweep(100);
        assert!(t.is_empty());
    }

    #[test]
    fn an_ia_holds_one_address_and_an_address_one_ia() {
        let mut t = LeaseTable6::new();
        t.bind(lease(1, 1, 7));
        // The same IA moves to another address: the old one is deleted.
        let w = t.bind(lease(2, 1, 7));
        assert_eq!(w[0], LeaseWrite6::Delete(lease(1, 1, 7).addr));
        assert!(t.get(lease(1, 1, 7).addr).is_none());
        // Another IA of the same owner takes the address.
        t.bind(lease(2, 1, 8));
        assert!(t.of_ia(&ClientKey([1; 16]), 7, 50).is_none());
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn release_and_decline_only_by_the_owner() {
        let mut t = LeaseTable6::new();
        let a = lease(1, 1, 7);
        t.bind(a);
        assert!(t.release(a.addr, &ClientKey([2; 16])).is_empty());
        assert!(t.decline(a.addr, &ClientKey([2; 16]), 500).is_empty());
        let w = t.decline(a.addr, &a.owner, 500);
        assert_eq!(w.len(), 1);
        assert!(!t.is_free_for(a.addr, &a.owner, 7, 400), "quarantined");
        assert!(t.release(a.addr, &a.owner).is_empty());
        let mut t = LeaseTable6::new();
        t.bind(a);
        assert_eq!(
            t.release(a.addr, &a.owner),
            vec![LeaseWrite6::Delete(a.addr)]
        );
        assert!(t.is_empty());
    }

    #[test]
    fn withdrawn_offers_free_the_address_but_not_a_binding() {
        let mut t = LeaseTable6::new();
        let a = lease(1, 1, 7);
        t.offer(a);
        t.withdraw_offer(&a.owner, 7);
        assert!(t.is_empty());
        t.bind(a);
        t.withdraw_offer(&a.owner, 7);
        t.offer(lease(3, 1, 7));
        assert_eq!(t.get(a.addr).map(|l| l.state), Some(State6::Bound));
        assert_eq!(
            LeaseTable6::load(t.all().copied().collect::<Vec<_>>(), 200).len(),
            0
        );
    }
}
