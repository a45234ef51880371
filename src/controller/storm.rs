//! The boot-storm limit: at most N machines network-booting an installer
//! (provisioning or reimaging) at once. A machine takes a slot when it is
//! about to mint a boot and gives it back when that boot is over; the rest
//! wait in their phase with a condition saying why.
//!
//! Slots are keyed by machine, so asking twice for the same machine is
//! idempotent, and after a restart the holders are rebuilt from status with
//! [`BootSlots::restore`] (a machine with an open install boot holds one even
//! if that overshoots the limit: it is already booting).
//!
//! Waiting is a queue, not a poll: a machine turned away is remembered in
//! arrival order, and a freed slot is reserved for the oldest waiter and
//! wakes it (its key goes into the runner's queue through the waker). A
//! newcomer never overtakes a waiter, so nobody starves. The reconciler
//! still looks again now and then (the slow `slot_wait` requeue) in case a
//! wake is lost, e.g. to a reconcile that failed while holding a
//! reservation.
//!
//! Pure bookkeeping behind a mutex: no tasks, no timers, no store.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use super::runner::QueueHandle;

#[derive(Debug)]
struct Table<K> {
    held: BTreeSet<K>,
    /// Waiters by arrival number (oldest first), and each one's number.
    queue: BTreeMap<u64, K>,
    seq: HashMap<K, u64>,
    next_seq: u64,
    /// Waiters already woken for a reservation they have not used yet.
    woken: BTreeSet<K>,
    waker: Option<QueueHandle<K>>,
}

/// Shared, cheap-to-clone slot table.
#[derive(Clone, Debug)]
pub struct BootSlots<K: Ord> {
    inner: Arc<Mutex<Table<K>>>,
    limit: usize,
}

impl<K: Ord + Clone + Hash> BootSlots<K> {
    /// `limit` of 0 means no limit.
    pub fn new(limit: usize) -> Self {
        BootSlots {
            inner: Arc::new(Mutex::new(Table {
                held: BTreeSet::new(),
                queue: BTreeMap::new(),
                seq: HashMap::new(),
                next_seq: 0,
                woken: BTreeSet::new(),
                waker: None,
            })),
            limit,
        }
    }

    /// Where freed slots send the waiters they wake (the runner's queue).
    /// Until one is set, waiters find their slot on their own next look.
    pub fn set_waker(&self, waker: QueueHandle<K>) {
        let mut t = self.lock();
        t.waker = Some(waker);
        self.wake(&mut t);
    }

    fn lock(&self) -> MutexGuard<'_, Table<K>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn free(&self, t: &Table<K>) -> usize {
        self.limit.saturating_sub(t.held.len())
    }

    /// Free slots go to waiters oldest first: `key` may take one when fewer
    /// waiters are ahead of it than there are free slots.
    fn has_room(&self, t: &Table<K>, key: &K) -> bool {
        if self.limit == 0 || t.held.contains(key) {
            return true;
        }
        let ahead = match t.seq.get(key) {
            Some(s) => t.queue.range(..*s).count(),
            None => t.queue.len(),
        };
        ahead < self.free(t)
    }

    /// Wake every waiter a free slot is reserved for and that has not been
    /// woken for it yet.
    fn wake(&self, t: &mut Table<K>) {
        let Some(waker) = t.waker.clone() else {
            return;
        };
        if self.limit == 0 {
            return;
        }
        let free = self.free(t);
        let due: Vec<K> = t
            .queue
            .values()
            .take(free)
            .filter(|k| !t.woken.contains(*k))
            .cloned()
            .collect();
        for k in due {
            waker.enqueue(k.clone());
            t.woken.insert(k);
        }
    }

    fn unqueue(t: &mut Table<K>, key: &K) {
        if let Some(s) = t.seq.remove(key) {
            t.queue.remove(&s);
        }
        t.woken.remove(key);
    }

    /// Whether `key` holds a slot or could take one now.
    pub fn would_admit(&self, key: &K) -> bool {
        let t = self.lock();
        self.has_room(&t, key)
    }

    /// Take a slot for `key` (keeping the one it has). When full (or the
    /// free slots are reserved for older waiters) `key` joins the waiters
    /// and this returns false.
    pub fn acquire(&self, key: &K) -> bool {
        let mut t = self.lock();
        if !self.has_room(&t, key) {
            Self::enqueue_waiter(&mut t, key);
            return false;
        }
        Self::unqueue(&mut t, key);
        t.held.insert(key.clone());
        true
    }

    fn enqueue_waiter(t: &mut Table<K>, key: &K) {
        if t.seq.contains_key(key) {
            return;
        }
        let s = t.next_seq;
        t.next_seq += 1;
        t.seq.insert(key.clone(), s);
        t.queue.insert(s, key.clone());
    }

    /// `key` needs a slot it could not have: keep (or take) its place among
    /// the waiters. A slot it held is given back.
    pub fn wait(&self, key: &K) {
        let mut t = self.lock();
        t.held.remove(key);
        Self::enqueue_waiter(&mut t, key);
        // A woken waiter that looked and still found no room (it raced a
        // newcomer's restore) must be woken again by the next free slot.
        if !self.has_room(&t, key) {
            t.woken.remove(key);
        }
        self.wake(&mut t);
    }

    /// `key` neither holds nor wants a slot: give back the one it has and
    /// leave the waiters (no-op when it is neither).
    pub fn release(&self, key: &K) {
        let mut t = self.lock();
        t.held.remove(key);
        Self::unqueue(&mut t, key);
        self.wake(&mut t);
    }

    /// Mark `key` as holding a slot regardless of the limit (rebuilding the
    /// table from status after a restart, or a boot already open).
    pub fn restore(&self, key: K) {
        let mut t = self.lock();
        Self::unqueue(&mut t, &key);
        t.held.insert(key);
    }

    pub fn in_use(&self) -> usize {
        self.lock().held.len()
    }

    /// Machines waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.lock().queue.len()
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

#[cfg(test)]
mod tests;
