//! Tests of the DHCP policy: named scenarios plus property tests (any bytes
//! give a reply or nothing, never a panic; replies always decode).

use std::collections::HashMap;

use dhcproto::Decodable;
use dhcproto::v4::{self, OptionCode};
use proptest::prelude::*;

use super::*;
use crate::api::BootPurpose;
use crate::dhcp::config::DhcpConfig;
use crate::dhcp::packet::tests::raw_request;
use crate::directory::BootIntent;

/// Relays nobody listed, DECLINEs of reservations.
mod hostile;
/// REQUESTs that try to steer the server onto an address.
mod steering;

/// Architectures without a boot file.
mod boot_files;
/// Ping checks before dynamic offers after a start.
mod probe;

const SERVER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const KNOWN: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
const STRANGER: [u8; 6] = [0x52, 0x54, 0, 0xaa, 0xbb, 0xcc];

#[derive(Default)]
struct Fake(HashMap<[u8; 6], Arc<MachineEntry>>);

impl Machines for Fake {
    fn by_mac(&self, mac: &[u8; 6]) -> Option<Arc<MachineEntry>> {
        self.0.get(mac).cloned()
    }
    fn by_ip(&self, ip: &Ipv4Addr) -> Option<Arc<MachineEntry>> {
        self.0
            .values()
            .find(|e| e.address.map(|a| a.addr()) == Some(*ip))
            .cloned()
    }
}

fn fake() -> Fake {
    let mut f = Fake::default();
    f.0.insert(
        KNOWN,
        Arc::new(MachineEntry {
            namespace: "default".into(),
            name: "rack1-u07".into(),
            uid: "u".into(),
            mac: KNOWN,
            address: Some("10.0.0.7/24".parse().unwrap()),
            gateway: Some(Ipv4Addr::new(10, 0, 0, 254)),
            dns: vec![Ipv4Addr::new(10, 0, 0, 53)],
            address6: None,
            gateway6: None,
            dns6: Vec::new(),
            hostname: Some("rack1-u07".into()),
            domain: None,
            phase: Default::default(),
            intent: BootIntent::Install {
                boot_id: "b1".into(),
                purpose: BootPurpose::Install,
            },
            secure_boot: false,
        }),
    );
    f
}

fn policy(extra: &str) -> Policy {
    let y = format!(
        "interface: eth0\nhttpBootUrl: http://10.0.0.1:8080\nsubnets:\n- subnet: 10.0.0.0/24\n  ranges: [{{start: 10.0.0.100, end: 10.0.0.103}}]\n  router: 10.0.0.1\n  dns: [10.0.0.1]\n  domain: lab.test\n{extra}"
    );
    let c: DhcpConfig = serde_yaml::from_str(&y).unwrap();
    Policy::new(DhcpSettings::try_from(c).unwrap(), SERVER)
}

fn pxe(mac: [u8; 6], t: u8, extra: &[(u8, &[u8])]) -> Vec<u8> {
    let mut o: Vec<(u8, &[u8])> = vec![
        (53, std::slice::from_ref(&t)),
        (60, b"PXEClient:Arch:00007:UNDI:003016"),
        (93, &[0, 7]),
    ];
    o.extend_from_slice(extra);
    raw_request(mac, &o)
}

fn decode(r: &Reply) -> v4::Message {
    v4::Message::decode(&mut dhcproto::Decoder::new(&r.bytes)).unwrap()
}

#[test]
fn known_machine_gets_reservation_and_pxe_options() {
    let p = policy("");
    let mut l = LeaseTable::new();
    let out = p.handle(&pxe(KNOWN, 1, &[]), Via::Port67, &fake(), &mut l, 1000);
    let r = out.reply.clone().unwrap();
    assert_eq!(r.to, Dest::Broadcast);
    let m = decode(&r);
    assert_eq!(m.opts().msg_type(), Some(MessageType::Offer));
    assert_eq!(m.yiaddr(), Ipv4Addr::new(10, 0, 0, 7));
    assert_eq!(m.siaddr(), SERVER);
    assert_eq!(
        m.fname_str().unwrap().unwrap().trim_end_matches('\0'),
        "ipxe.efi"
    );
    assert_eq!(
        m.opts().get(OptionCode::Router),
        Some(&DhcpOption::Router(vec![Ipv4Addr::new(10, 0, 0, 254)]))
    );
    assert_eq!(
        m.opts().get(OptionCode::Hostname),
        Some(&DhcpOption::Hostname("rack1-u07".into()))
    );
    assert_eq!(
        m.opts().get(OptionCode::BootfileName),
        Some(&DhcpOption::BootfileName(b"ipxe.efi".to_vec()))
    );
    assert_eq!(out.notice.unwrap().step, BootStep::DhcpOffer);
    assert!(out.writes.is_empty(), "offers are not persisted");

    let out = p.handle(
        &pxe(KNOWN, 3, &[(50, &[10, 0, 0, 7]), (54, &[10, 0, 0, 1])]),
        Via::Port67,
        &fake(),
        &mut l,
        1001,
    );
    let m = decode(out.reply.as_ref().unwrap());
    assert_eq!(m.opts().msg_type(), Some(MessageType::Ack));
    assert_eq!(m.yiaddr(), Ipv4Addr::new(10, 0, 0, 7));
    assert_eq!(out.writes.len(), 1, "the ACK's lease is persisted first");
    assert_eq!(out.notice.unwrap().boot_id.as_deref(), Some("b1"));
}

#[test]
fn unknown_client_needs_discovery() {
    let p = policy("");
    let mut l = LeaseTable::new();
    let out = p.handle(&pxe(STRANGER, 1, &[]), Via::Port67, &fake(), &mut l, 0);
    assert_eq!(out.dropped, Some(DropReason::UnknownClient));
    assert!(out.discovered.is_none());

    let p = policy("discovery: {enabled: true}\n");
    let out = p.handle(&pxe(STRANGER, 1, &[]), Via::Port67, &fake(), &mut l, 0);
    let m = decode(out.reply.as_ref().unwrap());
    assert!(p.cfg.subnets[0].in_pool(m.yiaddr()));
    assert_eq!(out.discovered.unwrap().arch, Some(7));
}

#[test]
fn concurrent_discovers_get_distinct_addresses_and_pool_runs_out() {
    let p = policy("discovery: {enabled: true}\n");
    let mut l = LeaseTable::new();
    let mut seen = std::collections::HashSet::new();
    for i in 0..4u8 {
        let out = p.handle(
            &pxe([2, 0, 0, 0, 1, i], 1, &[]),
            Via::Port67,
            &fake(),
            &mut l,
            0,
        );
        assert!(seen.insert(decode(out.reply.as_ref().unwrap()).yiaddr()));
    }
    let out = p.handle(
        &pxe([2, 0, 0, 0, 1, 9], 1, &[]),
        Via::Port67,
        &fake(),
        &mut l,
        0,
    );
    assert_eq!(out.dropped, Some(DropReason::PoolExhausted));
    // Offers expire: after the hold, the pool is free again.
    let out = p.handle(
        &pxe([2, 0, 0, 0, 1, 9], 1, &[]),
        Via::Port67,
        &fake(),
        &mut l,
        61,
    );
    assert!(out.reply.is_some());
}

#[test]
fn request_for_someone_elses_address_is_naked() {
    let p = policy("discovery: {enabled: true}\n");
    let mut l = LeaseTable::new();
    l.bind(
        Ipv4Addr::new(10, 0, 0, 100),
        ClientKey::from_mac(&[2, 0, 0, 0, 0, 1]),
        [2, 0, 0, 0, 0, 1],
        5000,
    );
    let out = p.handle(
        &pxe(STRANGER, 3, &[(50, &[10, 0, 0, 100])]),
        Via::Port67,
        &fake(),
        &mut l,
        0,
    );
    assert_eq!(
        decode(out.reply.as_ref().unwrap()).opts().msg_type(),
        Some(MessageType::Nak)
    );
    assert!(out.writes.is_empty());
    // The reserved address of a Machine is never leased to another client.
    let out = p.handle(
        &pxe(STRANGER, 3, &[(50, &[10, 0, 0, 7])]),
        Via::Port67,
        &fake(),
        &mut l,
        0,
    );
    assert_eq!(
        decode(out.reply.as_ref().unwrap()).opts().msg_type(),
        Some(MessageType::Nak)
    );
    // Another server's offer was taken: no reply.
    let out = p.handle(
        &pxe(STRANGER, 3, &[(54, &[10, 0, 0, 9]), (50, &[10, 0, 0, 101])]),
        Via::Port67,
        &fake(),
        &mut l,
        0,
    );
    assert_eq!(out.dropped, Some(DropReason::OtherServer));
}

#[test]
fn relayed_request_goes_to_relay_with_option_82() {
    let p = policy(
        "- subnet: 10.9.0.0/24\n  ranges: [{start: 10.9.0.10, end: 10.9.0.20}]\n  router: 10.9.0.1\n  relays: [10.9.0.1]\n",
    );
    let mut l = LeaseTable::new();
    let mut b = pxe(
        KNOWN,
        1,
        &[(82, &[1, 4, b'p', b'o', b'r', b't', 2, 2, 0xab, 0xcd])],
    );
    b[24..28].copy_from_slice(&[10, 9, 0, 1]);
    b[3] = 1;
    let out = p.handle(&b, Via::Port67, &fake(), &mut l, 0);
    let r = out.reply.unwrap();
    assert_eq!(r.to, Dest::Relay(Ipv4Addr::new(10, 9, 0, 1)));
    let raw = &r.bytes;
    let pos = raw
        .windows(12)
        .position(|w| w == [82, 10, 1, 4, b'p', b'o', b'r', b't', 2, 2, 0xab, 0xcd]);
    assert!(pos.is_some(), "option 82 echoed byte for byte");
    let m = decode(&r);
    // The Machine's reservation is on 10.0.0.0/24, not the relay's subnet.
    assert!(p.cfg.subnets[1].in_pool(m.yiaddr()));
    assert_eq!(m.giaddr(), Ipv4Addr::new(10, 9, 0, 1));
}

#[test]
fn release_and_decline_change_only_own_leases() {
    let p = policy("discovery: {enabled: true}\n");
    let mut l = LeaseTable::new();
    l.bind(
        Ipv4Addr::new(10, 0, 0, 100),
        ClientKey::from_mac(&[2, 0, 0, 0, 0, 1]),
        [2, 0, 0, 0, 0, 1],
        5000,
    );
    let mut b = pxe(STRANGER, 7, &[]);
    b[12..16].copy_from_slice(&[10, 0, 0, 100]);
    let out = p.handle(&b, Via::Port67, &fake(), &mut l, 0);
    assert_eq!(out.dropped, Some(DropReason::NoLease));
    let mut b = pxe([2, 0, 0, 0, 0, 1], 7, &[]);
    b[12..16].copy_from_slice(&[10, 0, 0, 100]);
    let out = p.handle(&b, Via::Port67, &fake(), &mut l, 0);
    assert_eq!(
        out.writes,
        vec![LeaseWrite::Delete(Ipv4Addr::new(10, 0, 0, 100))]
    );
}

#[test]
fn proxy_mode_gives_boot_info_never_an_address() {
    let c: DhcpConfig =
        serde_yaml::from_str("interface: eth0\nmode: proxy\nhttpBootUrl: http://10.0.0.1:8080\n")
            .unwrap();
    let p = Policy::new(DhcpSettings::try_from(c).unwrap(), SERVER);
    let mut l = LeaseTable::new();
    let out = p.handle(
        &pxe(KNOWN, 1, &[(97, &[0; 17])]),
        Via::Port67,
        &fake(),
        &mut l,
        0,
    );
    let m = decode(out.reply.as_ref().unwrap());
    assert_eq!(m.yiaddr(), Ipv4Addr::UNSPECIFIED);
    assert_eq!(m.opts().msg_type(), Some(MessageType::Offer));
    assert_eq!(
        m.opts().get(OptionCode::ClassIdentifier),
        Some(&DhcpOption::ClassIdentifier(b"PXEClient".to_vec()))
    );
    assert!(m.opts().get(OptionCode::ClientMachineIdentifier).is_some());
    let out = p.handle(&pxe(KNOWN, 3, &[]), Via::Port4011, &fake(), &mut l, 0);
    let r = out.reply.unwrap();
    assert_eq!(r.to, Dest::Source);
    assert_eq!(decode(&r).opts().msg_type(), Some(MessageType::Ack));
    let plain = raw_request(KNOWN, &[(53, &[1])]);
    assert_eq!(
        p.handle(&plain, Via::Port67, &fake(), &mut l, 0).dropped,
        Some(DropReason::NotPxe)
    );
    assert!(l.is_empty());
}

#[test]
fn renewal_is_unicast_and_extends_the_lease_inform_gets_options_only() {
    let p = policy("");
    let mut l = LeaseTable::new();
    l.bind(
        Ipv4Addr::new(10, 0, 0, 7),
        ClientKey::from_mac(&KNOWN),
        KNOWN,
        100,
    );
    let mut b = raw_request(KNOWN, &[(53, &[3])]);
    b[12..16].copy_from_slice(&[10, 0, 0, 7]);
    let out = p.handle(&b, Via::Port67, &fake(), &mut l, 90);
    let r = out.reply.unwrap();
    assert_eq!(r.to, Dest::Unicast(Ipv4Addr::new(10, 0, 0, 7)));
    assert_eq!(decode(&r).opts().msg_type(), Some(MessageType::Ack));
    assert_eq!(
        l.get(Ipv4Addr::new(10, 0, 0, 7)).unwrap().expires,
        90 + 3600
    );
    assert_eq!(out.writes.len(), 1);

    let mut b = raw_request(KNOWN, &[(53, &[8])]);
    b[12..16].copy_from_slice(&[10, 0, 0, 7]);
    let out = p.handle(&b, Via::Port67, &fake(), &mut l, 95);
    let m = decode(out.reply.as_ref().unwrap());
    assert_eq!(m.yiaddr(), Ipv4Addr::UNSPECIFIED);
    assert!(m.opts().get(OptionCode::AddressLeaseTime).is_none());
    assert!(m.opts().get(OptionCode::Router).is_some());
    assert!(out.writes.is_empty());
}

#[test]
fn ipxe_gets_its_script_url_http_boot_gets_a_url_and_option_60() {
    let p = policy("");
    let mut l = LeaseTable::new();
    let b = raw_request(
        KNOWN,
        &[
            (53, &[1]),
            (60, b"PXEClient:Arch:00007"),
            (77, b"iPXE"),
            (93, &[0, 7]),
        ],
    );
    let m = decode(
        p.handle(&b, Via::Port67, &fake(), &mut l, 0)
            .reply
            .as_ref()
            .unwrap(),
    );
    assert_eq!(
        m.opts().get(OptionCode::BootfileName),
        Some(&DhcpOption::BootfileName(
            b"http://10.0.0.1:8080/boot.ipxe?mac=52:54:00:12:34:56&arch=7".to_vec()
        ))
    );
    let b = raw_request(
        KNOWN,
        &[
            (53, &[1]),
            (60, b"HTTPClient:Arch:00016:UNDI:003016"),
            (93, &[0, 16]),
        ],
    );
    let m = decode(
        p.handle(&b, Via::Port67, &fake(), &mut l, 0)
            .reply
            .as_ref()
            .unwrap(),
    );
    assert_eq!(
        m.opts().get(OptionCode::BootfileName),
        Some(&DhcpOption::BootfileName(
            b"http://10.0.0.1:8080/assets/ipxe.efi".to_vec()
        ))
    );
    assert_eq!(
        m.opts().get(OptionCode::ClassIdentifier),
        Some(&DhcpOption::ClassIdentifier(b"HTTPClient".to_vec()))
    );
}

#[test]
fn bad_input_is_counted_and_changes_no_lease() {
    let p = policy("discovery: {enabled: true}\n");
    let mut l = LeaseTable::new();
    let mut b = pxe(STRANGER, 3, &[(50, &[10, 0, 0, 100])]);
    b.truncate(b.len() - 4);
    let out = p.handle(&b, Via::Port67, &fake(), &mut l, 0);
    assert_eq!(out.dropped, Some(DropReason::Truncated));
    assert!(out.reply.is_none() && out.writes.is_empty() && l.is_empty());
}

proptest! {
    #[test]
    fn any_bytes_give_a_decodable_reply_or_nothing(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
        for p in [policy("discovery: {enabled: true}\n"), policy("")] {
            let mut l = LeaseTable::new();
            let out = p.handle(&bytes, Via::Port67, &fake(), &mut l, 0);
            if let Some(r) = out.reply {
                prop_assert!(v4::Message::decode(&mut dhcproto::Decoder::new(&r.bytes)).is_ok());
            }
        }
    }

    #[test]
    fn mutated_requests_never_panic(
        t in 1u8..9, opts in proptest::collection::vec((1u8..255, proptest::collection::vec(any::<u8>(), 0..40)), 0..12),
        flip in proptest::collection::vec((0usize..400, any::<u8>()), 0..4), proxy in any::<bool>(),
    ) {
        let mut o: Vec<(u8, &[u8])> = opts.iter().map(|(c, d)| (*c, d.as_slice())).collect();
        let tb = [t];
        o.insert(0, (53, &tb));
        let mut b = raw_request(KNOWN, &o);
        for (i, v) in flip {
            if let Some(x) = b.get_mut(i) { *x = v; }
        }
        let p = if proxy {
            let c: DhcpConfig = serde_yaml::from_str("interface: eth0\nmode: proxy\nhttpBootUrl: http://10.0.0.1:8080\ndiscovery: {enabled: true}\n").unwrap();
            Policy::new(DhcpSettings::try_from(c).unwrap(), SERVER)
        } else { policy("discovery: {enabled: true}\n") };
        let mut l = LeaseTable::new();
        for via in [Via::Port67, Via::Port4011] {
            let out = p.handle(&b, via, &fake(), &mut l, 0);
            if let Some(r) = out.reply {
                let m = v4::Message::decode(&mut dhcproto::Decoder::new(&r.bytes));
                prop_assert!(m.is_ok());
                if proxy { prop_assert_eq!(m.unwrap().yiaddr(), Ipv4Addr::UNSPECIFIED); }
            }
        }
    }
}

/// DORA for `mac` with extra options; the ACKed address (or None on NAK).
fn dora(p: &Policy, l: &mut LeaseTable, mac: [u8; 6], extra: &[(u8, &[u8])]) -> Option<Ipv4Addr> {
    let out = p.handle(&pxe(mac, 1, extra), Via::Port67, &fake(), l, 10);
    let offered = decode(out.reply.as_ref()?).yiaddr();
    let mut o: Vec<(u8, &[u8])> = extra.to_vec();
    let ip = offered.octets();
    o.push((50, &ip));
    o.push((54, &[10, 0, 0, 1]));
    let out = p.handle(&pxe(mac, 3, &o), Via::Port67, &fake(), l, 11);
    let m = decode(out.reply.as_ref()?);
    (m.opts().msg_type() == Some(MessageType::Ack)).then(|| m.yiaddr())
}

#[test]
fn leases_are_keyed_by_client_identifier_when_sent() {
    let p = policy("discovery: {enabled: true}\n");
    let mut l = LeaseTable::new();
    let id1: &[u8] = &[0xff, 0, 0, 0, 1, 0, 2, 0, 0, 0, 1];
    let id2: &[u8] = &[0xff, 0, 0, 0, 2, 0, 2, 0, 0, 0, 1];
    // Two client identifiers behind one hardware address are two clients.
    let a = dora(&p, &mut l, STRANGER, &[(61, id1)]).unwrap();
    let b = dora(&p, &mut l, STRANGER, &[(61, id2)]).unwrap();
    assert_ne!(a, b);
    // The same identifier from another hardware address is the same client.
    let a2 = dora(&p, &mut l, [2, 9, 9, 9, 9, 9], &[(61, id1)]).unwrap();
    assert_eq!(a, a2);
    let lease = l.get(a).unwrap();
    assert_eq!(lease.mac, [2, 9, 9, 9, 9, 9]);
    assert_eq!(lease.client, ClientKey::from_client_id(id1).unwrap());
    // RELEASE from id2 frees only id2's lease.
    let mut rel = raw_request(STRANGER, &[(53, &[7]), (61, id2), (54, &[10, 0, 0, 1])]);
    rel[12..16].copy_from_slice(&b.octets());
    let out = p.handle(&rel, Via::Port67, &fake(), &mut l, 12);
    assert_eq!(out.writes, vec![LeaseWrite::Delete(b)]);
    assert!(l.get(a).is_some());
    // Without option 61 the hardware address is the key: another client.
    let c = dora(&p, &mut l, STRANGER, &[]).unwrap();
    assert_ne!(c, a);
    assert_eq!(l.get(c).unwrap().client, ClientKey::from_mac(&STRANGER));
    // A client that stops sending option 61 keeps its address by hardware
    // address (INIT-REBOOT of id1's holder without the identifier).
    let reboot = pxe([2, 9, 9, 9, 9, 9], 3, &[(50, &a.octets())]);
    let out = p.handle(&reboot, Via::Port67, &fake(), &mut l, 13);
    let m = decode(out.reply.as_ref().unwrap());
    assert_eq!(
        (m.opts().msg_type(), m.yiaddr()),
        (Some(MessageType::Ack), a)
    );
}

#[test]
fn known_machines_are_keyed_by_hardware_address_whatever_their_client_id() {
    let p = policy("");
    let mut l = LeaseTable::new();
    let fw = dora(
        &p,
        &mut l,
        KNOWN,
        &[(61, &[1, 0x52, 0x54, 0, 0x12, 0x34, 0x56])],
    );
    let os = dora(&p, &mut l, KNOWN, &[(61, &[0xff, 1, 2, 3, 4, 0, 1, 0, 1])]);
    assert_eq!(fw, Some(Ipv4Addr::new(10, 0, 0, 7)));
    assert_eq!(os, fw, "firmware and OS share the machine's address");
    assert_eq!(
        l.get(Ipv4Addr::new(10, 0, 0, 7)).unwrap().client,
        ClientKey::from_mac(&KNOWN)
    );
}

fn has_option(r: &Reply, code: u8, value: &[u8]) -> bool {
    let mut want = vec![code, value.len() as u8];
    want.extend_from_slice(value);
    // Options start after the 236-byte header and the 4-byte cookie.
    r.bytes[240..].windows(want.len()).any(|w| w == want)
}

#[test]
fn an_arm64_machine_gets_no_x86_binary() {
    for mode in ["", "mode: proxy\n"] {
        let p = policy(mode);
        let mut l = LeaseTable::new();
        for (vendor, arch) in [
            (&b"PXEClient:Arch:00011"[..], 11u8),
            (b"HTTPClient:Arch:00019", 19),
        ] {
            let req = raw_request(KNOWN, &[(53, &[1]), (60, vendor), (93, &[0, arch])]);
            let out = p.handle(&req, Via::Port67, &fake(), &mut l, 1000);
            if let Some(r) = &out.reply {
                let m = decode(r);
                assert_eq!(
                    m.opts().get(OptionCode::BootfileName),
                    None,
                    "{mode} {arch}"
                );
            }
        }
    }
}

#[test]
fn ipxe_is_told_that_no_proxydhcp_offer_will_come() {
    let p = policy("");
    let mut l = LeaseTable::new();
    let ipxe = pxe(KNOWN, 1, &[(77, b"iPXE")]);
    let out = p.handle(&ipxe, Via::Port67, &fake(), &mut l, 1000);
    let r = out.reply.unwrap();
    // Option 175 (iPXE's encapsulated settings) holding 176 no-pxedhcp = 1.
    assert!(has_option(&r, 175, &[176, 1, 1]), "{:?}", decode(&r).opts());
    // The firmware's own PXE client is not iPXE: nothing of the kind.
    let out = p.handle(&pxe(KNOWN, 1, &[]), Via::Port67, &fake(), &mut l, 1000);
    assert!(!has_option(&out.reply.unwrap(), 175, &[176, 1, 1]));
    // Turned off (another server answers iPXE as ProxyDHCP): not said.
    let p = policy("ipxeNoProxyDhcp: false\n");
    let out = p.handle(&ipxe, Via::Port67, &fake(), &mut l, 1000);
    assert!(!has_option(&out.reply.unwrap(), 175, &[176, 1, 1]));
}
