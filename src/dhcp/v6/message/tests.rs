use super::*;

/// A client message of type `t` with these options (code, data).
pub fn raw(t: u8, opts: &[(u16, &[u8])]) -> Vec<u8> {
    let mut b = vec![t, 0x12, 0x34, 0x56];
    for (c, d) in opts {
        b.extend_from_slice(&c.to_be_bytes());
        b.extend_from_slice(&(d.len() as u16).to_be_bytes());
        b.extend_from_slice(d);
    }
    b
}

/// `inner` relayed once, with these relay options besides Relay Message.
pub fn relayed(inner: &[u8], hop: u8, opts: &[(u16, &[u8])]) -> Vec<u8> {
    let mut b = vec![12, hop];
    b.extend_from_slice(&"fd00:89::1".parse::<Ipv6Addr>().unwrap().octets());
    b.extend_from_slice(&"fe80::9".parse::<Ipv6Addr>().unwrap().octets());
    for (c, d) in opts.iter().chain([(opt::RELAY_MSG, inner)].iter()) {
        b.extend_from_slice(&c.to_be_bytes());
        b.extend_from_slice(&(d.len() as u16).to_be_bytes());
        b.extend_from_slice(d);
    }
    b
}

const DUID_LLT: &[u8] = &[0, 1, 0, 1, 0x2c, 0x1d, 0x3e, 0x4f, 2, 0, 0, 0, 0, 9];

fn ia(iaid: u32) -> Vec<u8> {
    let mut d = iaid.to_be_bytes().to_vec();
    d.extend_from_slice(&[0; 8]);
    d
}

/// What OVMF sends: DUID-LLT, IA_NA, ORO with the boot file URL, its
/// architecture (7, x64 UEFI) and the PXEClient vendor class.
fn ovmf_solicit() -> Vec<u8> {
    let mut vendor = 343u32.to_be_bytes().to_vec();
    vendor.extend_from_slice(&[0, 20]);
    vendor.extend_from_slice(b"PXEClient:Arch:00007");
    raw(
        1,
        &[
            (opt::CLIENTID, DUID_LLT),
            (opt::IA_NA, &ia(1)),
            (opt::ORO, &[0, 59, 0, 60]),
            (opt::ELAPSED_TIME, &[0, 0]),
            (opt::CLIENT_ARCH_TYPE, &[0, 7]),
            (opt::VENDOR_CLASS, &vendor),
        ],
    )
}

#[test]
fn reads_a_firmware_solicit() {
    let m = Message::parse(&ovmf_solicit()).unwrap();
    assert!(m.relays.is_empty());
    let msg = &m.msg;
    assert_eq!(msg.msg_type, Some(MessageType::Solicit));
    assert_eq!(msg.xid, 0x0012_3456);
    assert_eq!(m.mac(), Some([2, 0, 0, 0, 0, 9]));
    assert_eq!(msg.ia_na.len(), 1);
    assert_eq!(msg.oro, vec![59, 60]);
    assert_eq!(msg.first_arch(), Some(7));
    assert!(!msg.is_http_client() && !msg.is_ipxe());
    assert_eq!(msg.elapsed, Some(0));
}

#[test]
fn reads_ipxe_and_http_boot_classes() {
    let mut vendor = 343u32.to_be_bytes().to_vec();
    vendor.extend_from_slice(&[0, 21]);
    vendor.extend_from_slice(b"HTTPClient:Arch:00016");
    let b = raw(
        1,
        &[
            (opt::CLIENTID, DUID_LLT),
            (opt::USER_CLASS, &[0, 4, b'i', b'P', b'X', b'E']),
            (opt::VENDOR_CLASS, &vendor),
        ],
    );
    let m = Message::parse(&b).unwrap();
    assert!(m.msg.is_ipxe());
    assert!(m.msg.is_http_client());
}

#[test]
fn duids_name_their_mac() {
    assert_eq!(Duid(DUID_LLT.to_vec()).mac(), Some([2, 0, 0, 0, 0, 9]));
    let ll = Duid::link_layer([2, 0, 0, 0, 0, 1]);
    assert_eq!(ll.mac(), Some([2, 0, 0, 0, 0, 1]));
    assert_eq!(ll.hex(), "00:03:00:01:02:00:00:00:00:01");
    // DUID-EN and DUID-UUID carry no MAC; nor does a non-Ethernet DUID-LL.
    assert_eq!(Duid(vec![0, 2, 0, 0, 0, 9, 1, 2]).mac(), None);
    assert_eq!(Duid(vec![0, 4, 1, 2, 3]).mac(), None);
    assert_eq!(Duid(vec![0, 3, 0, 6, 2, 0, 0, 0, 0, 1]).mac(), None);
}

#[test]
fn reads_through_relays_and_takes_the_mac_from_the_nearest() {
    let client = raw(1, &[(opt::CLIENTID, &[0, 2, 0, 0, 0, 9, 7])]);
    let inner = relayed(
        &client,
        0,
        &[(opt::CLIENT_LINKLAYER_ADDR, &[0, 1, 2, 0, 0, 0, 0, 7])],
    );
    let outer = relayed(&inner, 1, &[(opt::INTERFACE_ID, b"eth3")]);
    let m = Message::parse(&outer).unwrap();
    assert_eq!(m.relays.len(), 2);
    assert_eq!(m.relays[0].interface_id.as_deref(), Some(&b"eth3"[..]));
    assert_eq!(m.relays[0].hop_count, 1);
    assert_eq!(m.mac(), Some([2, 0, 0, 0, 0, 7]));
}

#[test]
fn the_identifiers_a_type_requires_are_checked() {
    let server: &[u8] = &[0, 3, 0, 1, 2, 0, 0, 0, 0, 1];
    type Case<'a> = (u8, &'a [(u16, &'a [u8])], Result<(), Drop6>);
    let cases: [Case; 8] = [
        (1, &[(opt::CLIENTID, DUID_LLT)], Ok(())),
        (1, &[], Err(Drop6::NoClientId)),
        (
            1,
            &[(opt::CLIENTID, DUID_LLT), (opt::SERVERID, server)],
            Err(Drop6::UnexpectedServerId),
        ),
        (3, &[(opt::CLIENTID, DUID_LLT)], Err(Drop6::NoServerId)),
        (
            3,
            &[(opt::CLIENTID, DUID_LLT), (opt::SERVERID, server)],
            Ok(()),
        ),
        (8, &[(opt::SERVERID, server)], Err(Drop6::NoClientId)),
        (11, &[], Ok(())),
        (
            7,
            &[(opt::CLIENTID, DUID_LLT), (opt::SERVERID, server)],
            Err(Drop6::NotFromClient),
        ),
    ];
    for (t, opts, want) in cases {
        let got = Message::parse(&raw(t, opts)).map(|_| ());
        assert_eq!(got, want, "type {t}");
    }
}

#[test]
fn malformed_messages_are_dropped_with_their_reason() {
    let good = ovmf_solicit();
    // A cut inside an option is a truncated option; one between options
    // leaves a shorter message.
    for cut in 4..good.len() {
        match Message::parse(&good[..cut]) {
            Ok(_) | Err(Drop6::Truncated | Drop6::NoClientId) => {}
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
    assert_eq!(Message::parse(&[]), Err(Drop6::Truncated));
    assert_eq!(Message::parse(&[1, 0, 0]), Err(Drop6::Truncated));
    assert_eq!(Message::parse(&[0, 0, 0, 0]), Err(Drop6::UnknownType));
    assert_eq!(Message::parse(&[200, 0, 0, 0]), Err(Drop6::UnknownType));
    assert_eq!(Message::parse(&vec![1; MAX_LEN + 1]), Err(Drop6::Oversized));
    let twice = raw(1, &[(opt::CLIENTID, DUID_LLT), (opt::CLIENTID, DUID_LLT)]);
    assert_eq!(Message::parse(&twice), Err(Drop6::BadOption));
    let empty_id = raw(1, &[(opt::CLIENTID, &[])]);
    assert_eq!(Message::parse(&empty_id), Err(Drop6::BadOption));
    let odd_oro = raw(1, &[(opt::CLIENTID, DUID_LLT), (opt::ORO, &[0, 59, 1])]);
    assert_eq!(Message::parse(&odd_oro), Err(Drop6::BadOption));
    let short_ia = raw(1, &[(opt::CLIENTID, DUID_LLT), (opt::IA_NA, &[0, 0, 0, 1])]);
    assert_eq!(Message::parse(&short_ia), Err(Drop6::BadOption));
    let mut iaaddr = ia(1);
    iaaddr.extend_from_slice(&[0, 5, 0, 4, 1, 2, 3, 4]);
    let bad_addr = raw(1, &[(opt::CLIENTID, DUID_LLT), (opt::IA_NA, &iaaddr)]);
    assert_eq!(Message::parse(&bad_addr), Err(Drop6::BadOption));
    let item_overrun = raw(
        1,
        &[(opt::CLIENTID, DUID_LLT), (opt::USER_CLASS, &[0, 9, 1])],
    );
    assert_eq!(Message::parse(&item_overrun), Err(Drop6::BadOption));
    let rapid_with_data = raw(1, &[(opt::CLIENTID, DUID_LLT), (opt::RAPID_COMMIT, &[1])]);
    assert_eq!(Message::parse(&rapid_with_data), Err(Drop6::BadOption));
}

#[test]
fn relays_are_bounded_and_must_carry_a_message() {
    let client = raw(1, &[(opt::CLIENTID, DUID_LLT)]);
    let mut b = client.clone();
    for hop in 0..MAX_RELAYS as u8 {
        b = relayed(&b, hop, &[]);
    }
    assert!(
        Message::parse(&b).is_ok(),
        "{MAX_RELAYS} relays are allowed"
    );
    let deeper = relayed(&b, MAX_RELAYS as u8, &[]);
    assert_eq!(Message::parse(&deeper), Err(Drop6::TooManyRelays));
    let mut empty = relayed(&client, 0, &[]);
    empty.truncate(34);
    assert_eq!(Message::parse(&empty), Err(Drop6::NoRelayMessage));
    assert_eq!(Message::parse(&empty[..20]), Err(Drop6::Truncated));
    let bad_mac = relayed(&client, 0, &[(opt::CLIENT_LINKLAYER_ADDR, &[0, 1, 2, 0])]);
    assert_eq!(Message::parse(&bad_mac), Err(Drop6::BadOption));
    // A relay around a server's message is no client's.
    let reply = raw(7, &[(opt::CLIENTID, DUID_LLT)]);
    assert_eq!(
        Message::parse(&relayed(&reply, 0, &[])),
        Err(Drop6::NotFromClient)
    );
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes: a message or a reason, never a panic.
        #[test]
        fn any_bytes_parse_or_drop(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = Message::parse(&b);
            let _ = Msg::decode(&b);
        }

        #[test]
        fn a_relayed_solicit_reads_as_the_solicit(hops in 0usize..=MAX_RELAYS) {
            let mut b = ovmf_solicit();
            for h in 0..hops {
                b = relayed(&b, h as u8, &[]);
            }
            let m = Message::parse(&b).unwrap();
            prop_assert_eq!(m.relays.len(), hops);
            prop_assert_eq!(m.msg, Message::parse(&ovmf_solicit()).unwrap().msg);
        }
    }
}
