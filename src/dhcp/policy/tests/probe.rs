//! Ping checks after a start (a new leader's lease table does not hold
//! what the previous one leased): which offers wait for one, and what an
//! answered ping does.

use super::*;
use crate::dhcp::lease::LeaseState;

#[test]
fn only_dynamic_offers_of_unknown_addresses_are_pinged_and_only_in_the_window() {
    let mut p = policy("discovery: {enabled: true}\n");
    let mut l = LeaseTable::new();
    let d = |p: &Policy, l: &mut LeaseTable, mac, now| {
        p.handle(&pxe(mac, 1, &[]), Via::Port67, &fake(), l, now)
    };
    // Off by default.
    assert_eq!(d(&p, &mut l, STRANGER, 100).probe, None);
    let mut l = LeaseTable::new();
    p.probe_until = 1000;
    let out = d(&p, &mut l, STRANGER, 100);
    let ip = decode(out.reply.as_ref().unwrap()).yiaddr();
    assert_eq!(
        out.probe,
        Some(Probe {
            ip,
            client: ClientKey::from_mac(&STRANGER),
            mac: STRANGER
        })
    );
    // The same client again: the address is now in the table (offered).
    assert_eq!(d(&p, &mut l, STRANGER, 101).probe, None);
    // A declared Machine's reservation is its own: never pinged.
    assert_eq!(d(&p, &mut l, KNOWN, 100).probe, None);
    // After the window (the longest lease since the start), no pings.
    let mut l = LeaseTable::new();
    assert_eq!(d(&p, &mut l, STRANGER, 1000).probe, None);
}

#[test]
fn an_address_that_answers_is_quarantined_and_the_next_discover_gets_another() {
    let mut p = policy("discovery: {enabled: true}\n");
    p.probe_until = 1000;
    let mut l = LeaseTable::new();
    let out = p.handle(&pxe(STRANGER, 1, &[]), Via::Port67, &fake(), &mut l, 100);
    let probe = out.probe.unwrap();
    let writes = p.address_in_use(&probe, &mut l, 100);
    assert!(!writes.is_empty(), "the quarantine is persisted");
    let again = p.handle(&pxe(STRANGER, 1, &[]), Via::Port67, &fake(), &mut l, 102);
    let next = decode(again.reply.as_ref().unwrap()).yiaddr();
    assert_ne!(next, probe.ip, "the answered address is not offered again");
    assert_eq!(
        again.probe.map(|p| p.ip),
        Some(next),
        "and the next one is pinged too"
    );
    // Nobody else gets it either while it is quarantined.
    for i in 0..3u8 {
        let o = p.handle(
            &pxe([2, 0, 0, 0, 2, i], 1, &[]),
            Via::Port67,
            &fake(),
            &mut l,
            103,
        );
        if let Some(r) = o.reply.as_ref() {
            assert_ne!(decode(r).yiaddr(), probe.ip);
        }
    }
}

/// In the window, a client renewing an address the previous server leased
/// it (this table has no record, or only the quarantine its own ping answer
/// made) keeps it; a renewal of an address leased here to another client,
/// a reserved one, or one outside the window is refused.
#[test]
fn in_the_window_a_renewal_of_a_predecessors_lease_keeps_the_address() {
    let mut p = policy("discovery: {enabled: true}\n");
    let msg = |out: &Outcome| decode(out.reply.as_ref().unwrap()).opts().msg_type();
    // A RENEWING REQUEST: `ip` in ciaddr, no requested address.
    let renew = |p: &Policy, l: &mut LeaseTable, mac, ip: Ipv4Addr, now| {
        let mut b = pxe(mac, 3, &[]);
        b[12..16].copy_from_slice(&ip.octets());
        p.handle(&b, Via::Port67, &fake(), l, now)
    };
    let bound_to = |l: &LeaseTable, ip, mac| {
        l.get(ip)
            .is_some_and(|x| x.mac == mac && x.state == LeaseState::Bound)
    };
    let held = Ipv4Addr::new(10, 0, 0, 102);
    // Outside the window (no ping checks, or after them): NAK.
    let mut l = LeaseTable::new();
    let out = renew(&p, &mut l, STRANGER, held, 100);
    assert_eq!(msg(&out), Some(MessageType::Nak));
    p.probe_until = 1000;
    let out = renew(&p, &mut l, STRANGER, held, 1000);
    assert_eq!(msg(&out), Some(MessageType::Nak));
    assert!(l.is_empty());

    // In it: ACKed and bound to the renewing client.
    let out = renew(&p, &mut l, STRANGER, held, 100);
    assert_eq!(msg(&out), Some(MessageType::Ack));
    assert_eq!(decode(out.reply.as_ref().unwrap()).yiaddr(), held);
    assert!(bound_to(&l, held, STRANGER));
    assert!(!out.writes.is_empty(), "the adopted lease is persisted");
    // Another client renewing the same address: NAK, the lease stays.
    let other = [2, 0, 0, 0, 9, 9];
    let out = renew(&p, &mut l, other, held, 101);
    assert_eq!(msg(&out), Some(MessageType::Nak));
    assert!(bound_to(&l, held, STRANGER));

    // An address quarantined because it answered a ping (offered to a
    // newcomer) goes back to the client using it when that one renews.
    let mut l = LeaseTable::new();
    let out = p.handle(&pxe(other, 1, &[]), Via::Port67, &fake(), &mut l, 100);
    let probe = out.probe.unwrap();
    p.address_in_use(&probe, &mut l, 100);
    let out = renew(&p, &mut l, STRANGER, probe.ip, 101);
    assert_eq!(msg(&out), Some(MessageType::Ack));
    assert!(bound_to(&l, probe.ip, STRANGER));

    // A declared Machine's reserved address is never adopted by a stranger.
    let mut l = LeaseTable::new();
    let reserved = fake().by_mac(&KNOWN).unwrap().address.unwrap().addr();
    let out = renew(&p, &mut l, STRANGER, reserved, 100);
    assert_eq!(msg(&out), Some(MessageType::Nak));
    assert!(l.is_empty());
}
