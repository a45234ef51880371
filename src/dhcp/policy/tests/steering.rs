//! A REQUEST binds only an address offered to that client or its own.

use super::*;

#[test]
fn request_binds_only_an_offered_or_own_address() {
    let p = policy("discovery: {enabled: true}\n");
    let mut l = LeaseTable::new();
    let nak = |out: &Outcome| {
        out.reply
            .as_ref()
            .map(|r| decode(r).opts().msg_type() == Some(MessageType::Nak))
            .unwrap_or(false)
    };
    // A new client REQUESTs a free pool address it was never offered, with
    // no server identifier: refused, nothing bound.
    let out = p.handle(
        &pxe(STRANGER, 3, &[(50, &[10, 0, 0, 101])]),
        Via::Port67,
        &fake(),
        &mut l,
        0,
    );
    assert!(nak(&out), "{out:?}");
    assert!(out.writes.is_empty());
    assert!(l.get(Ipv4Addr::new(10, 0, 0, 101)).is_none());
    // The same with our server identifier (SELECTING without an offer).
    let out = p.handle(
        &pxe(STRANGER, 3, &[(54, &[10, 0, 0, 1]), (50, &[10, 0, 0, 101])]),
        Via::Port67,
        &fake(),
        &mut l,
        0,
    );
    assert!(nak(&out));
    assert!(l.is_empty());
    // A renewing client whose lease the server does not know: NAK.
    let mut b = pxe(STRANGER, 3, &[]);
    b[12..16].copy_from_slice(&[10, 0, 0, 102]);
    let out = p.handle(&b, Via::Port67, &fake(), &mut l, 0);
    assert!(nak(&out));
    assert!(l.is_empty());
    // Offered, then requested a different free address: NAK.
    let out = p.handle(&pxe(STRANGER, 1, &[]), Via::Port67, &fake(), &mut l, 0);
    let offered = decode(out.reply.as_ref().unwrap()).yiaddr();
    let other = (100..=103u8)
        .map(|i| Ipv4Addr::new(10, 0, 0, i))
        .find(|a| *a != offered)
        .unwrap();
    let o = other.octets();
    let out = p.handle(
        &pxe(STRANGER, 3, &[(54, &[10, 0, 0, 1]), (50, &o)]),
        Via::Port67,
        &fake(),
        &mut l,
        0,
    );
    assert!(nak(&out));
    assert!(l.get(other).is_none());
    // The offered address binds; afterwards INIT-REBOOT for it is ACKed.
    let a = offered.octets();
    let out = p.handle(
        &pxe(STRANGER, 3, &[(54, &[10, 0, 0, 1]), (50, &a)]),
        Via::Port67,
        &fake(),
        &mut l,
        1,
    );
    assert_eq!(decode(out.reply.as_ref().unwrap()).yiaddr(), offered);
    let out = p.handle(
        &pxe(STRANGER, 3, &[(50, &a)]),
        Via::Port67,
        &fake(),
        &mut l,
        2,
    );
    assert_eq!(
        decode(out.reply.as_ref().unwrap()).opts().msg_type(),
        Some(MessageType::Ack)
    );
    // A known Machine's INIT-REBOOT for its reservation is ACKed.
    let out = p.handle(
        &pxe(KNOWN, 3, &[(50, &[10, 0, 0, 7])]),
        Via::Port67,
        &fake(),
        &mut l,
        3,
    );
    assert_eq!(
        decode(out.reply.as_ref().unwrap()).opts().msg_type(),
        Some(MessageType::Ack)
    );
}
