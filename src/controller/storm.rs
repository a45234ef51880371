//! The boot-storm limit: at most N machines network-booting an installer
//! (provisioning or reimaging) at once. A machine takes a slot when it is
//! about to mint a boot and gives it back when that boot is over; the rest
//! wait in their phase with a condition saying why.
//!
//! Slots are keyed by machine, so asking twice for the same machine is
//! idempotent, and after a restart the holders are rebuilt from status with
//! [`BootSlots::restore`] (a machine with an open install boot holds one even
//! if that overshoots the limit: it is already booting).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

/// Shared, cheap-to-clone slot table.
#[derive(Clone, Debug)]
pub struct BootSlots<K: Ord> {
    inner: Arc<Mutex<BTreeSet<K>>>,
    limit: usize,
}

impl<K: Ord + Clone> BootSlots<K> {
    /// `limit` of 0 means no limit.
    pub fn new(limit: usize) -> Self {
        BootSlots {
            inner: Arc::default(),
            limit,
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeSet<K>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn has_room(&self, held: &BTreeSet<K>, key: &K) -> bool {
        self.limit == 0 || held.contains(key) || held.len() < self.limit
    }

    /// Whether `key` holds a slot or could take one now.
    pub fn would_admit(&self, key: &K) -> bool {
        let held = self.lock();
        self.has_room(&held, key)
    }

    /// Take a slot for `key` (keeping the one it has); false when full.
    pub fn acquire(&self, key: &K) -> bool {
        let mut held = self.lock();
        if !self.has_room(&held, key) {
            return false;
        }
        held.insert(key.clone());
        true
    }

    /// Give `key`'s slot back (no-op when it holds none).
    pub fn release(&self, key: &K) {
        self.lock().remove(key);
    }

    /// Mark `key` as holding a slot regardless of the limit (rebuilding the
    /// table from status after a restart).
    pub fn restore(&self, key: K) {
        self.lock().insert(key);
    }

    pub fn in_use(&self) -> usize {
        self.lock().len()
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_the_limit_and_is_idempotent_per_key() {
        let s = BootSlots::new(2);
        assert!(s.acquire(&"a"));
        assert!(s.acquire(&"a"), "same machine again keeps its slot");
        assert!(s.acquire(&"b"));
        assert!(!s.would_admit(&"c"));
        assert!(!s.acquire(&"c"));
        assert!(s.would_admit(&"a"), "a holder is always admitted");
        s.release(&"a");
        assert!(s.acquire(&"c"));
        assert_eq!(s.in_use(), 2);
    }

    #[test]
    fn zero_means_unlimited() {
        let s = BootSlots::new(0);
        for k in 0..100 {
            assert!(s.acquire(&k));
        }
        assert_eq!(s.in_use(), 100);
    }

    #[test]
    fn restore_may_overshoot_and_blocks_newcomers_until_drained() {
        let s = BootSlots::new(1);
        s.restore("a");
        s.restore("b");
        assert_eq!(s.in_use(), 2);
        assert!(!s.acquire(&"c"));
        s.release(&"a");
        assert!(!s.acquire(&"c"), "still at the limit");
        s.release(&"b");
        assert!(s.acquire(&"c"));
    }

    #[test]
    fn clones_share_the_table() {
        let s = BootSlots::new(1);
        let t = s.clone();
        assert!(s.acquire(&"a"));
        assert!(!t.acquire(&"b"));
    }
}
