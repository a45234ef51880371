//! Packets a host on the boot network can send to push the server around:
//! a giaddr no subnet lists, a DECLINE of a declared Machine's reservation.

use super::*;

fn relayed(mac: [u8; 6], giaddr: [u8; 4]) -> Vec<u8> {
    let mut b = pxe(mac, 1, &[]);
    b[24..28].copy_from_slice(&giaddr);
    b[3] = 1;
    b
}

#[test]
fn giaddr_is_honoured_only_from_listed_relays() {
    let remote = "- subnet: 10.9.0.0/24\n  ranges: [{start: 10.9.0.10, end: 10.9.0.20}]\n";
    let p = policy(&format!(
        "{remote}  relays: [10.9.0.1]\ndiscovery: {{enabled: true}}\n"
    ));
    let mut l = LeaseTable::new();
    // The listed relay: answered, to the relay.
    let out = p.handle(
        &relayed(STRANGER, [10, 9, 0, 1]),
        Via::Port67,
        &fake(),
        &mut l,
        0,
    );
    assert_eq!(
        out.reply.unwrap().to,
        Dest::Relay(Ipv4Addr::new(10, 9, 0, 1))
    );
    // Another address on that subnet, or on ours: dropped, with a reason,
    // and no lease offered.
    let mut l = LeaseTable::new();
    for g in [[10, 9, 0, 2], [10, 0, 0, 50]] {
        let out = p.handle(&relayed(STRANGER, g), Via::Port67, &fake(), &mut l, 0);
        assert_eq!(out.dropped, Some(DropReason::UnlistedRelay), "{g:?}");
        assert!(out.reply.is_none() && out.writes.is_empty());
        assert_eq!(DropReason::UnlistedRelay.label(), "unlisted_relay");
    }
    assert!(l.is_empty());
    // No relays listed at all: nothing relayed is answered, in either mode.
    let p = policy(&format!("{remote}discovery: {{enabled: true}}\n"));
    let out = p.handle(
        &relayed(KNOWN, [10, 9, 0, 1]),
        Via::Port67,
        &fake(),
        &mut l,
        0,
    );
    assert_eq!(out.dropped, Some(DropReason::UnlistedRelay));
    let proxy = policy("mode: proxy\n");
    let out = proxy.handle(
        &relayed(KNOWN, [10, 0, 0, 9]),
        Via::Port67,
        &fake(),
        &mut l,
        0,
    );
    assert_eq!(out.dropped, Some(DropReason::UnlistedRelay));
}

#[test]
fn relays_must_be_inside_their_subnet() {
    let y = "interface: eth0\nsubnets:\n- subnet: 10.9.0.0/24\n  relays: [10.8.0.1]\n";
    let c: DhcpConfig = serde_yaml::from_str(y).unwrap();
    let e = DhcpSettings::try_from(c).unwrap_err().to_string();
    assert!(e.starts_with("dhcp.subnets[0].relays[0]: 10.8.0.1"), "{e}");
}

#[test]
fn a_decline_of_a_reservation_is_counted_shown_and_ignored() {
    let p = policy("");
    let mut l = LeaseTable::new();
    // The machine binds its reservation.
    let out = p.handle(
        &pxe(KNOWN, 3, &[(50, &[10, 0, 0, 7])]),
        Via::Port67,
        &fake(),
        &mut l,
        0,
    );
    assert_eq!(
        decode(out.reply.as_ref().unwrap()).yiaddr(),
        Ipv4Addr::new(10, 0, 0, 7)
    );
    // Anyone sending its MAC declines the address.
    let out = p.handle(
        &pxe(KNOWN, 4, &[(50, &[10, 0, 0, 7])]),
        Via::Port67,
        &fake(),
        &mut l,
        1,
    );
    assert_eq!(out.dropped, Some(DropReason::DeclinedReservation));
    assert!(out.writes.is_empty(), "no quarantine: {out:?}");
    let w = out.warning.unwrap();
    assert_eq!(
        (w.name.as_str(), w.reason),
        ("rack1-u07", "ReservationDeclined")
    );
    assert!(w.message.contains("10.0.0.7"), "{}", w.message);
    // The machine keeps getting its reservation at once.
    let out = p.handle(&pxe(KNOWN, 1, &[]), Via::Port67, &fake(), &mut l, 2);
    assert_eq!(
        decode(out.reply.as_ref().unwrap()).yiaddr(),
        Ipv4Addr::new(10, 0, 0, 7)
    );
    // Also when the sender is another client.
    let out = p.handle(
        &pxe(STRANGER, 4, &[(50, &[10, 0, 0, 7])]),
        Via::Port67,
        &fake(),
        &mut l,
        3,
    );
    assert_eq!(out.dropped, Some(DropReason::DeclinedReservation));
    assert!(out.writes.is_empty());
}

#[test]
fn the_discovered_set_is_bounded_by_config() {
    let base = "interface: eth0\nsubnets:\n- subnet: 10.0.0.0/24\n  ranges: [{start: 10.0.0.100, end: 10.0.0.103}]\n";
    let parse = |d: &str| {
        let c: DhcpConfig = serde_yaml::from_str(&format!("{base}discovery: {d}\n")).unwrap();
        DhcpSettings::try_from(c)
    };
    let s = parse("{enabled: true}").unwrap();
    assert_eq!((s.discovered_cap, s.discovered_ttl), (1024, 86_400));
    let s = parse("{enabled: true, maxRecorded: 10, recordTtlSeconds: 600}").unwrap();
    assert_eq!((s.discovered_cap, s.discovered_ttl), (10, 600));
    for (d, field) in [
        ("{maxRecorded: 0}", "dhcp.discovery.maxRecorded"),
        ("{recordTtlSeconds: 5}", "dhcp.discovery.recordTtlSeconds"),
    ] {
        let e = parse(d).unwrap_err().to_string();
        assert!(e.starts_with(field), "{e}");
    }
}
