use std::collections::VecDeque;

use proptest::prelude::*;
use tokio::sync::mpsc::UnboundedReceiver;

use super::*;

fn woken<K>(rx: &mut UnboundedReceiver<K>) -> Vec<K> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

fn with_waker(limit: usize) -> (BootSlots<&'static str>, UnboundedReceiver<&'static str>) {
    let s = BootSlots::new(limit);
    let (h, rx) = QueueHandle::channel();
    s.set_waker(h);
    (s, rx)
}

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
    assert_eq!(s.waiting(), 0);
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

#[test]
fn a_freed_slot_wakes_exactly_the_next_waiter() {
    let (s, mut rx) = with_waker(1);
    assert!(s.acquire(&"a"));
    s.wait(&"b");
    s.wait(&"c");
    assert!(!s.acquire(&"d"));
    assert_eq!(s.waiting(), 3);
    assert!(
        woken(&mut rx).is_empty(),
        "nothing is free: nobody is woken"
    );
    s.release(&"a");
    assert_eq!(woken(&mut rx), ["b"], "the oldest waiter, only it");
    // Nothing else changes until b uses its slot and gives it back.
    s.wait(&"c");
    s.release(&"zz");
    assert!(woken(&mut rx).is_empty(), "a wake is sent once");
    assert!(s.acquire(&"b"));
    assert_eq!(s.waiting(), 2);
    s.release(&"b");
    assert_eq!(woken(&mut rx), ["c"]);
}

#[test]
fn a_newcomer_does_not_take_a_slot_reserved_for_a_waiter() {
    let (s, mut rx) = with_waker(1);
    assert!(s.acquire(&"a"));
    assert!(!s.acquire(&"b"), "b waits");
    s.release(&"a");
    assert_eq!(woken(&mut rx), ["b"]);
    assert!(!s.would_admit(&"new"));
    assert!(!s.acquire(&"new"), "the slot is b's");
    assert!(s.would_admit(&"b"));
    assert!(s.acquire(&"b"));
    assert_eq!(s.in_use(), 1);
    s.release(&"b");
    assert_eq!(woken(&mut rx), ["new"], "then the newcomer, in its turn");
}

#[test]
fn a_waiter_that_no_longer_wants_a_slot_passes_its_reservation_on() {
    let (s, mut rx) = with_waker(1);
    assert!(s.acquire(&"a"));
    s.wait(&"b");
    s.wait(&"c");
    s.release(&"a");
    assert_eq!(woken(&mut rx), ["b"]);
    // b looked, and no longer needs to boot (its class went away).
    s.release(&"b");
    assert_eq!(woken(&mut rx), ["c"]);
    assert!(s.acquire(&"c"));
}

#[test]
fn several_free_slots_wake_as_many_waiters_in_order() {
    let (s, mut rx) = with_waker(3);
    for k in ["a", "b", "c"] {
        assert!(s.acquire(&k));
    }
    for k in ["d", "e", "f", "g"] {
        s.wait(&k);
    }
    s.release(&"a");
    s.release(&"b");
    assert_eq!(woken(&mut rx), ["d", "e"]);
    s.release(&"c");
    assert_eq!(woken(&mut rx), ["f"]);
}

#[test]
fn setting_the_waker_late_wakes_waiters_a_free_slot_is_reserved_for() {
    let s = BootSlots::new(1);
    s.restore("a");
    s.wait(&"b");
    s.release(&"a");
    let (h, mut rx) = QueueHandle::channel();
    s.set_waker(h);
    assert_eq!(woken(&mut rx), ["b"]);
}

/// A model of machines using the table as the reconciler does: a machine
/// that is woken (or looks again on its own) tries to take a slot, and
/// waits when it cannot; a holder's boot ends after a while.
#[derive(Clone, Debug)]
enum Op {
    /// The machine with this index looks (declared, resynced or woken).
    Look(usize),
    /// The oldest open boot ends.
    Finish,
}

fn op(n: usize) -> impl Strategy<Value = Op> {
    prop_oneof![(0..n).prop_map(Op::Look), Just(Op::Finish)]
}

proptest! {
    #[test]
    fn limit_holds_nobody_starves_and_slots_go_in_arrival_order(
        limit in 1usize..5,
        ops in proptest::collection::vec(op(12), 0..200),
    ) {
        let n = 12;
        let s: BootSlots<usize> = BootSlots::new(limit);
        let (h, mut rx) = QueueHandle::channel();
        s.set_waker(h);
        let mut booted = vec![false; n];
        let mut open: VecDeque<usize> = VecDeque::new();
        let mut admitted = vec![];
        let mut arrival = vec![];
        let look = |k: usize, s: &BootSlots<usize>, booted: &mut Vec<bool>,
                    open: &mut VecDeque<usize>, admitted: &mut Vec<usize>,
                    arrival: &mut Vec<usize>| {
            if booted[k] {
                return;
            }
            if !arrival.contains(&k) {
                arrival.push(k);
            }
            if s.would_admit(&k) && s.acquire(&k) {
                booted[k] = true;
                open.push_back(k);
                admitted.push(k);
            } else {
                s.wait(&k);
            }
        };
        for o in ops {
            match o {
                Op::Look(k) => look(k, &s, &mut booted, &mut open, &mut admitted, &mut arrival),
                Op::Finish => {
                    if let Some(k) = open.pop_front() {
                        s.release(&k);
                    }
                }
            }
            // Woken machines look at once (the runner's queue).
            while let Ok(k) = rx.try_recv() {
                look(k, &s, &mut booted, &mut open, &mut admitted, &mut arrival);
            }
            prop_assert!(s.in_use() <= limit, "limit {} overshot: {}", limit, s.in_use());
        }
        // Drain: finish every boot; wakes alone must admit every waiter.
        let mut rounds = 0;
        while let Some(k) = open.pop_front() {
            s.release(&k);
            while let Ok(k) = rx.try_recv() {
                look(k, &s, &mut booted, &mut open, &mut admitted, &mut arrival);
            }
            prop_assert!(s.in_use() <= limit);
            rounds += 1;
            prop_assert!(rounds <= n, "bounded");
        }
        prop_assert_eq!(s.waiting(), 0, "a waiter was never woken");
        let mut want = arrival.clone();
        want.retain(|k| booted[*k]);
        prop_assert_eq!(admitted.len(), arrival.len(), "everyone who asked got a slot");
        prop_assert_eq!(admitted, want, "slots went in arrival order");
    }
}
