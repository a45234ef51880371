//! The work queue's bookkeeping, without tasks or timers: which keys are due
//! when, which are running, how often each has failed. The runner feeds it
//! `now` and acts on its answers, so every rule here is tested on plain
//! values.
//!
//! Rules:
//! - A key is queued at most once, at the earliest time anyone asked for.
//! - A running key is never handed out again until it finishes; asks that
//!   arrive meanwhile mark it dirty.
//! - After a success the key comes back at its requeue time, or right away
//!   when it went dirty while running (something changed under it).
//! - After an error it comes back after an exponential backoff (per key,
//!   capped); dirtiness during the failed run does not cut the backoff short
//!   (it is usually the failed run's own status write). An ask after the run
//!   does.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

/// Per-key exponential backoff: `base * 2^(failures-1)`, at most `cap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(300),
        }
    }
}

impl Backoff {
    /// The wait after the `failures`-th failure in a row (1-based).
    pub fn delay(&self, failures: u32) -> Duration {
        let shift = failures.saturating_sub(1).min(31);
        self.base
            .checked_mul(1u32 << shift)
            .unwrap_or(self.cap)
            .min(self.cap)
    }
}

/// When a key that finished should run again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// After this long.
    After(Duration),
    /// After the runner's periodic resync interval.
    Periodic,
    /// Not unless something asks (the object is gone).
    Forget,
}

/// How a run ended, as the queue sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    Ok(Requeue),
    Failed,
}

/// The queue state for keys `K`.
#[derive(Debug)]
pub struct WorkQueue<K> {
    due: HashMap<K, Instant>,
    order: BTreeSet<(Instant, K)>,
    running: HashSet<K>,
    dirty: HashMap<K, Instant>,
    failures: HashMap<K, u32>,
    backoff: Backoff,
    resync: Duration,
}

impl<K: Clone + Eq + Hash + Ord> WorkQueue<K> {
    pub fn new(backoff: Backoff, resync: Duration) -> Self {
        WorkQueue {
            due: HashMap::new(),
            order: BTreeSet::new(),
            running: HashSet::new(),
            dirty: HashMap::new(),
            failures: HashMap::new(),
            backoff,
            resync,
        }
    }

    /// Ask for `key` to run at `at` (or earlier, if already asked).
    pub fn schedule(&mut self, key: K, at: Instant) {
        if self.running.contains(&key) {
            let d = self.dirty.entry(key).or_insert(at);
            *d = (*d).min(at);
            return;
        }
        match self.due.get(&key) {
            Some(&t) if t <= at => {}
            Some(&t) => {
                self.order.remove(&(t, key.clone()));
                self.order.insert((at, key.clone()));
                self.due.insert(key, at);
            }
            None => {
                self.order.insert((at, key.clone()));
                self.due.insert(key, at);
            }
        }
    }

    /// Take the key due first, if it is due by `now`; it is running until
    /// [`WorkQueue::finish`].
    pub fn pop(&mut self, now: Instant) -> Option<K> {
        let (t, _) = self.order.first()?;
        if *t > now {
            return None;
        }
        let (_, key) = self.order.pop_first()?;
        self.due.remove(&key);
        self.running.insert(key.clone());
        Some(key)
    }

    /// Record the end of a run at `now`; returns when the key runs next.
    pub fn finish(&mut self, key: K, how: Finished, now: Instant) -> Option<Instant> {
        self.running.remove(&key);
        let dirty = self.dirty.remove(&key);
        let next = match how {
            Finished::Failed => {
                let n = self.failures.entry(key.clone()).or_insert(0);
                *n = n.saturating_add(1);
                Some(now + self.backoff.delay(*n))
            }
            Finished::Ok(r) => {
                self.failures.remove(&key);
                let at = match r {
                    Requeue::After(d) => Some(now + d),
                    Requeue::Periodic => Some(now + self.resync),
                    Requeue::Forget => None,
                };
                match (at, dirty) {
                    (Some(a), Some(d)) => Some(a.min(d.max(now))),
                    (a, d) => a.or(d.map(|d| d.max(now))),
                }
            }
        };
        if let Some(at) = next {
            self.schedule(key, at);
        }
        next
    }

    /// Forget `key` entirely (queued time and failure count); a running
    /// key still finishes normally.
    pub fn remove(&mut self, key: &K) {
        if let Some(t) = self.due.remove(key) {
            self.order.remove(&(t, key.clone()));
        }
        self.failures.remove(key);
        self.dirty.remove(key);
    }

    /// When the earliest queued key is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.order.first().map(|(t, _)| *t)
    }

    pub fn queued(&self) -> usize {
        self.due.len()
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    pub fn is_running(&self, key: &K) -> bool {
        self.running.contains(key)
    }

    /// Failures in a row of `key`.
    pub fn failures(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }

    /// When `key` is queued for, if it is.
    pub fn due_at(&self, key: &K) -> Option<Instant> {
        self.due.get(key).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn q() -> WorkQueue<&'static str> {
        WorkQueue::new(
            Backoff {
                base: S,
                cap: 8 * S,
            },
            60 * S,
        )
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let b = Backoff {
            base: S,
            cap: 8 * S,
        };
        let d: Vec<u64> = (1..=6).map(|n| b.delay(n).as_secs()).collect();
        assert_eq!(d, [1, 2, 4, 8, 8, 8]);
        assert_eq!(b.delay(u32::MAX), 8 * S);
        assert_eq!(b.delay(0), S);
    }

    #[test]
    fn duplicate_asks_keep_one_entry_at_the_earliest_time() {
        let t0 = Instant::now();
        let mut q = q();
        q.schedule("a", t0 + 5 * S);
        q.schedule("a", t0 + 9 * S);
        q.schedule("a", t0 + 2 * S);
        assert_eq!(q.queued(), 1);
        assert_eq!(q.due_at(&"a"), Some(t0 + 2 * S));
        assert_eq!(q.pop(t0 + S), None, "not due yet");
        assert_eq!(q.pop(t0 + 2 * S), Some("a"));
        assert_eq!(q.pop(t0 + 99 * S), None, "handed out once");
    }

    #[test]
    fn pops_in_due_order() {
        let t0 = Instant::now();
        let mut q = q();
        q.schedule("late", t0 + 3 * S);
        q.schedule("early", t0 + S);
        q.schedule("now", t0);
        let got: Vec<_> = std::iter::from_fn(|| q.pop(t0 + 10 * S)).collect();
        assert_eq!(got, ["now", "early", "late"]);
    }

    #[test]
    fn a_running_key_is_not_handed_out_again_and_reruns_when_dirty() {
        let t0 = Instant::now();
        let mut q = q();
        q.schedule("a", t0);
        assert_eq!(q.pop(t0), Some("a"));
        q.schedule("a", t0);
        assert_eq!(q.pop(t0), None, "one run at a time per key");
        assert!(q.is_running(&"a"));
        let next = q.finish("a", Finished::Ok(Requeue::Periodic), t0 + S);
        assert_eq!(next, Some(t0 + S), "dirty: again right away");
        assert_eq!(q.pop(t0 + S), Some("a"));
    }

    #[test]
    fn success_requeues_after_the_asked_time_or_the_resync() {
        let t0 = Instant::now();
        let mut q = q();
        q.schedule("a", t0);
        q.pop(t0);
        assert_eq!(
            q.finish("a", Finished::Ok(Requeue::After(5 * S)), t0),
            Some(t0 + 5 * S)
        );
        q.pop(t0 + 5 * S);
        assert_eq!(
            q.finish("a", Finished::Ok(Requeue::Periodic), t0 + 5 * S),
            Some(t0 + 65 * S)
        );
        q.pop(t0 + 65 * S);
        assert_eq!(q.finish("a", Finished::Ok(Requeue::Forget), t0), None);
        assert_eq!(q.queued(), 0);
    }

    #[test]
    fn failures_back_off_per_key_and_reset_on_success() {
        let t0 = Instant::now();
        let mut q = q();
        let mut now = t0;
        let mut waits = vec![];
        q.schedule("a", now);
        for _ in 0..5 {
            assert_eq!(q.pop(now), Some("a"));
            let next = q.finish("a", Finished::Failed, now).unwrap();
            waits.push((next - now).as_secs());
            now = next;
        }
        assert_eq!(waits, [1, 2, 4, 8, 8]);
        assert_eq!(q.failures(&"a"), 5);
        // Another key is unaffected.
        q.schedule("b", now);
        q.pop(now);
        assert_eq!(q.finish("b", Finished::Failed, now), Some(now + S));
        // Success resets a's count.
        q.pop(now);
        q.finish("a", Finished::Ok(Requeue::Periodic), now);
        assert_eq!(q.failures(&"a"), 0);
    }

    #[test]
    fn dirtiness_during_a_failed_run_keeps_the_backoff() {
        let t0 = Instant::now();
        let mut q = q();
        q.schedule("a", t0);
        q.pop(t0);
        q.finish("a", Finished::Failed, t0);
        q.pop(t0 + S);
        q.schedule("a", t0 + S); // e.g. the run's own status write
        assert_eq!(q.finish("a", Finished::Failed, t0 + S), Some(t0 + 3 * S));
        // An ask after the run cuts the wait short.
        q.schedule("a", t0 + 2 * S);
        assert_eq!(q.due_at(&"a"), Some(t0 + 2 * S));
    }

    #[test]
    fn remove_forgets_queue_entry_and_failures() {
        let t0 = Instant::now();
        let mut q = q();
        q.schedule("a", t0);
        q.pop(t0);
        q.finish("a", Finished::Failed, t0);
        q.remove(&"a");
        assert_eq!(q.queued(), 0);
        assert_eq!(q.failures(&"a"), 0);
        assert_eq!(q.next_due(), None);
    }
}
