//! Ping checks after a start (a new leader's lease table does not hold
//! what the previous one leased): which offers wait for one, and what an
//! answered ping does.

use super::*;

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
