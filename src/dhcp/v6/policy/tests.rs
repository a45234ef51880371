//! Tests of the DHCPv6 policy: what OVMF PXE and HTTP boot, iPXE, EDK2's
//! own address client, an OS client and perfdhcp send, each message type,
//! both modes (proxy in `tests/proxy.rs`), and hostile input
//! (`tests/hostile.rs`: any bytes give a reply or a counted drop).

use std::collections::HashMap;

use super::*;
use crate::api::BootPurpose;
use crate::dhcp::v6::config::Dhcp6Config;
use crate::dhcp::v6::lease::State6;
use crate::dhcp::v6::message::{Msg, opt};
use crate::dhcp::v6::reply::status;

/// Malformed and arbitrary bytes.
mod hostile;
/// Boot-options-only mode.
mod proxy;

const KNOWN: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
const STRANGER: [u8; 6] = [0x52, 0x54, 0, 0xaa, 0xbb, 0xcc];
const RESERVED: &str = "fd00:89::7";
/// SMBIOS-UUID DUID (DUID-UUID, type 4) as OVMF with `-uuid` and iPXE send.
const DUID_UUID: [u8; 18] = [0, 4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];

#[derive(Default)]
struct Fake(HashMap<[u8; 6], Known6>);

impl Machines6 for Fake {
    fn by_mac(&self, mac: &[u8; 6]) -> Option<Known6> {
        self.0.get(mac).cloned()
    }
    fn reserved_for(&self, addr: &Ipv6Addr) -> Option<[u8; 6]> {
        self.0
            .values()
            .find(|k| k.address == Some(*addr))
            .map(|k| k.entry.mac)
    }
}

fn fake() -> Fake {
    let mut f = Fake::default();
    let entry = MachineEntry {
        namespace: "default".into(),
        name: "rack1-u07".into(),
        uid: "u".into(),
        mac: KNOWN,
        address: None,
        gateway: None,
        dns: Vec::new(),
        address6: Some(format!("{RESERVED}/64").parse().unwrap()),
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
    };
    f.0.insert(
        KNOWN,
        Known6 {
            address: Some(RESERVED.parse().unwrap()),
            entry: Arc::new(entry),
        },
    );
    f
}

fn policy(extra: &str) -> Policy6 {
    let y = format!(
        "interface: eth0\nhttpBootUrl: \"http://[fd00:89::1]:8080\"\nsubnets:\n- subnet: fd00:89::/64\n  ranges: [{{start: \"fd00:89::100\", end: \"fd00:89::103\"}}]\n  dns: [\"fd00:89::1\"]\n  relays: [\"fd00:90::1\"]\n{extra}"
    );
    let c: Dhcp6Config = serde_yaml::from_str(&y).unwrap();
    let cfg = Dhcp6Settings::try_from(c).unwrap();
    Policy6::new(
        cfg,
        Duid::link_layer([2, 0, 0, 0, 0, 1]),
        Some("fd00:89::1".parse().unwrap()),
    )
}

/// The EUI-64 link-local address of a MAC, as EDK2 and iPXE form it.
fn link_local(mac: [u8; 6]) -> SocketAddrV6 {
    let a = Ipv6Addr::new(
        0xfe80,
        0,
        0,
        0,
        u16::from_be_bytes([mac[0] ^ 2, mac[1]]),
        u16::from_be_bytes([mac[2], 0xff]),
        u16::from_be_bytes([0xfe, mac[3]]),
        u16::from_be_bytes([mac[4], mac[5]]),
    );
    SocketAddrV6::new(a, 546, 0, 2)
}

fn opt_bytes(code: u16, d: &[u8]) -> Vec<u8> {
    let mut b = code.to_be_bytes().to_vec();
    b.extend_from_slice(&(d.len() as u16).to_be_bytes());
    b.extend_from_slice(d);
    b
}

fn ia(iaid: u32, addr: Option<&str>) -> Vec<u8> {
    let mut d = iaid.to_be_bytes().to_vec();
    d.extend_from_slice(&[0; 8]);
    if let Some(a) = addr {
        let mut ad = a.parse::<Ipv6Addr>().unwrap().octets().to_vec();
        ad.extend_from_slice(&[0; 8]);
        d.extend(opt_bytes(opt::IAADDR, &ad));
    }
    d
}

fn vendor(s: &str) -> Vec<u8> {
    let mut v = 343u32.to_be_bytes().to_vec();
    v.extend_from_slice(&(s.len() as u16).to_be_bytes());
    v.extend_from_slice(s.as_bytes());
    v
}

/// A client message: type, then (code, data) options.
fn msg(t: u8, opts: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut b = vec![t, 0xab, 0xcd, 0xef];
    for (c, d) in opts {
        b.extend(opt_bytes(*c, d));
    }
    b
}

/// OVMF's PXE Solicit (PxeBcDhcp6.c): DUID-UUID, random IAID, ORO
/// [59, 60, 23, 16], UNDI 62, arch 7, PXEClient vendor class.
fn ovmf_pxe(t: u8, extra: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut o = vec![
        (opt::CLIENTID, DUID_UUID.to_vec()),
        (opt::IA_NA, ia(0x1234_5678, None)),
        (opt::ORO, vec![0, 59, 0, 60, 0, 23, 0, 16]),
        (62, vec![1, 3, 0]),
        (opt::CLIENT_ARCH_TYPE, vec![0, 7]),
        (
            opt::VENDOR_CLASS,
            vendor("PXEClient:Arch:00007:UNDI:003000"),
        ),
        (opt::ELAPSED_TIME, vec![0, 0]),
    ];
    o.extend_from_slice(extra);
    msg(t, &o)
}

/// OVMF's HTTP boot Solicit (HttpBootDhcp6.c): arch 16, HTTPClient.
fn ovmf_http() -> Vec<u8> {
    msg(
        1,
        &[
            (opt::CLIENTID, DUID_UUID.to_vec()),
            (opt::IA_NA, ia(0x0bad_cafe, None)),
            (opt::ORO, vec![0, 59, 0, 60, 0, 23, 0, 16]),
            (opt::CLIENT_ARCH_TYPE, vec![0, 16]),
            (
                opt::VENDOR_CLASS,
                vendor("HTTPClient:Arch:00016:UNDI:003000"),
            ),
        ],
    )
}

/// iPXE's Solicit (dhcpv6.c): DUID-UUID, IAID crc32(MAC), PXEClient vendor
/// class but User Class "iPXE".
fn ipxe(t: u8, extra: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut o = vec![
        (opt::CLIENTID, DUID_UUID.to_vec()),
        (opt::IA_NA, ia(0x4242_4242, None)),
        (opt::ORO, vec![0, 23, 0, 24, 0, 59, 0, 60]),
        (
            opt::VENDOR_CLASS,
            vendor("PXEClient:Arch:00007:UNDI:003010"),
        ),
        (opt::CLIENT_ARCH_TYPE, vec![0, 7]),
        (opt::USER_CLASS, vec![0, 4, b'i', b'P', b'X', b'E']),
        (opt::ELAPSED_TIME, vec![0, 0]),
    ];
    o.extend_from_slice(extra);
    msg(t, &o)
}

/// EDK2's IPv6 stack asking beside PXE: same DUID, another IAID, only ORO [23].
fn edk2_stack() -> Vec<u8> {
    msg(
        1,
        &[
            (opt::CLIENTID, DUID_UUID.to_vec()),
            (opt::IA_NA, ia(7, None)),
            (opt::ORO, vec![0, 23]),
        ],
    )
}

/// perfdhcp's Solicit: DUID-LLT with the MAC, empty ORO.
fn perfdhcp(mac: [u8; 6], iaid: u32) -> Vec<u8> {
    let mut duid = vec![0, 1, 0, 1, 0x2c, 0x1d, 0x3e, 0x4f];
    duid.extend_from_slice(&mac);
    msg(
        1,
        &[
            (opt::ELAPSED_TIME, vec![0, 0]),
            (opt::CLIENTID, duid),
            (opt::ORO, vec![]),
            (opt::IA_NA, ia(iaid, None)),
        ],
    )
}

fn sid() -> (u16, Vec<u8>) {
    (opt::SERVERID, Duid::link_layer([2, 0, 0, 0, 0, 1]).0)
}

fn read(o: &Outcome6) -> Msg {
    Msg::decode(&o.reply.as_ref().expect("a reply").bytes).unwrap()
}

fn addr_of(m: &Msg) -> Option<Ipv6Addr> {
    m.ia_na.first().and_then(|ia| ia.addrs.first().copied())
}

fn run(p: &Policy6, b: &[u8], from: [u8; 6], t: &mut LeaseTable6, now: u64) -> Outcome6 {
    p.handle(b, Via6::Port547, link_local(from), &fake(), t, now)
}

#[test]
fn ovmf_pxe_gets_its_reservation_and_a_tftp_url_in_both_messages() {
    let p = policy("");
    let mut t = LeaseTable6::new();
    let o = run(&p, &ovmf_pxe(1, &[]), KNOWN, &mut t, 1000);
    assert_eq!(o.request_type, Some(MessageType::Solicit));
    let r = o.reply.as_ref().unwrap();
    assert_eq!((r.to, r.msg_type), (Dest6::Client, MessageType::Advertise));
    let m = read(&o);
    assert_eq!(
        addr_of(&m),
        Some(RESERVED.parse().unwrap()),
        "MAC from the EUI-64 source"
    );
    assert_eq!(m.preference, Some(255), "taken at once");
    assert_eq!(m.boot_url.as_deref(), Some("tftp://[fd00:89::1]/ipxe.efi"));
    assert_eq!(
        m.vendor_class, None,
        "no PXEClient beside an address (no port-4011 step)"
    );
    assert_eq!(m.dns, vec!["fd00:89::1".parse::<Ipv6Addr>().unwrap()]);
    assert!(o.writes.is_empty(), "an Advertise writes nothing");
    assert_eq!(
        o.notice.as_ref().map(|n| n.step.clone()),
        Some(crate::api::BootStep::DhcpOffer)
    );
    let o = run(&p, &ovmf_pxe(3, &[sid()]), KNOWN, &mut t, 1001);
    let m = read(&o);
    assert_eq!(m.msg_type, Some(MessageType::Reply));
    assert_eq!(
        addr_of(&m),
        Some(RESERVED.parse().unwrap()),
        "REPLY carries IAADDR"
    );
    assert_eq!(
        m.boot_url.as_deref(),
        Some("tftp://[fd00:89::1]/ipxe.efi"),
        "59 in REPLY"
    );
    assert_eq!(m.preference, None);
    assert_eq!(o.writes.len(), 1);
    assert_eq!(
        o.notice.as_ref().map(|n| n.step.clone()),
        Some(crate::api::BootStep::DhcpAck)
    );
}

#[test]
fn ovmf_http_gets_an_http_url_and_the_vendor_class_echo() {
    let p = policy("");
    let mut t = LeaseTable6::new();
    let o = run(&p, &ovmf_http(), KNOWN, &mut t, 1000);
    let m = read(&o);
    assert_eq!(
        m.boot_url.as_deref(),
        Some("http://[fd00:89::1]:8080/assets/ipxe.efi")
    );
    assert_eq!(m.vendor_class, Some((343, vec![b"HTTPClient".to_vec()])));
    assert!(addr_of(&m).is_some());
}

#[test]
fn ipxe_gets_its_script_and_the_reservation_moves_to_it() {
    let p = policy("");
    let mut t = LeaseTable6::new();
    run(&p, &ovmf_pxe(3, &[sid()]), KNOWN, &mut t, 1000);
    let o = run(&p, &ipxe(1, &[]), KNOWN, &mut t, 1010);
    let m = read(&o);
    assert_eq!(
        m.boot_url.as_deref(),
        Some("http://[fd00:89::1]:8080/boot.ipxe?mac=52:54:00:12:34:56&arch=7")
    );
    assert_eq!(m.vendor_class, None);
    assert_eq!(addr_of(&m), Some(RESERVED.parse().unwrap()));
    let o = run(&p, &ipxe(3, &[sid()]), KNOWN, &mut t, 1011);
    assert_eq!(addr_of(&read(&o)), Some(RESERVED.parse().unwrap()));
    assert_eq!(
        t.bound(1011).count(),
        1,
        "one lease for the Machine's address"
    );
}

#[test]
fn edk2s_own_client_gets_a_pool_address_beside_the_pxe_lease() {
    let p = policy("");
    let mut t = LeaseTable6::new();
    run(&p, &ovmf_pxe(3, &[sid()]), KNOWN, &mut t, 1000);
    let o = run(&p, &edk2_stack(), KNOWN, &mut t, 1001);
    let m = read(&o);
    let a = addr_of(&m).unwrap();
    assert_ne!(a, RESERVED.parse::<Ipv6Addr>().unwrap());
    assert!(p.cfg.subnets[0].in_pool(a));
    assert_eq!(m.boot_url, None, "no boot options for a plain client");
}

#[test]
fn unknown_clients_need_discovery_and_get_pool_addresses() {
    let p = policy("");
    let mut t = LeaseTable6::new();
    let o = run(&p, &perfdhcp(STRANGER, 1), STRANGER, &mut t, 1000);
    assert_eq!(o.dropped, Some(Skip6::UnknownClient));
    let p = policy("discovery: {enabled: true}\n");
    let o = run(&p, &perfdhcp(STRANGER, 1), STRANGER, &mut t, 1000);
    let m = read(&o);
    let a = addr_of(&m).unwrap();
    assert!(p.cfg.subnets[0].in_pool(a));
    assert_eq!(m.ia_na[0].t1, 250, "discovery lifetimes");
    // A different DUID (iaid the same) gets another address.
    let o = run(&p, &perfdhcp([2, 0, 0, 0, 0, 9], 1), STRANGER, &mut t, 1000);
    assert_ne!(addr_of(&read(&o)), Some(a));
}

#[test]
fn the_pool_runs_out_with_a_status_not_a_reused_address() {
    let p = policy("discovery: {enabled: true}\n");
    let mut t = LeaseTable6::new();
    let mut seen = std::collections::HashSet::new();
    for i in 0..4u8 {
        let o = run(&p, &perfdhcp([2, 0, 0, 0, 1, i], 1), STRANGER, &mut t, 1000);
        assert!(seen.insert(addr_of(&read(&o)).unwrap()));
    }
    let o = run(&p, &perfdhcp([2, 0, 0, 0, 1, 9], 1), STRANGER, &mut t, 1000);
    let m = read(&o);
    assert_eq!(addr_of(&m), None);
    assert_eq!(
        m.ia_na[0].addrs.len(),
        0,
        "an IA with NoAddrsAvail status and no address"
    );
}

#[test]
fn renew_rebind_confirm_release_decline() {
    let p = policy("");
    let mut t = LeaseTable6::new();
    let r: &str = RESERVED;
    run(&p, &ovmf_pxe(3, &[sid()]), KNOWN, &mut t, 1000);
    let renew = |iaid: u32, a: &str| {
        msg(
            5,
            &[
                (opt::CLIENTID, DUID_UUID.to_vec()),
                sid(),
                (opt::IA_NA, ia(iaid, Some(a))),
            ],
        )
    };
    let o = run(&p, &renew(0x1234_5678, r), KNOWN, &mut t, 2000);
    assert_eq!(addr_of(&read(&o)), Some(r.parse().unwrap()));
    assert_eq!(o.writes.len(), 1, "extended");
    assert_eq!(t.get(r.parse().unwrap()).unwrap().expires, 2000 + 3600);
    // Renew of an address that is not the IA's: NoBinding.
    let mut b = renew(0x1234_5678, "fd00:89::102");
    let o = run(&p, &b, STRANGER, &mut t, 2000);
    assert_eq!(o.dropped, Some(Skip6::UnknownClient));
    b = renew(0x1234_5678, "fd00:89::102");
    let o = run(&p, &b, KNOWN, &mut t, 2000);
    // The reservation is the IA's: the Reply names it, not the asked one.
    assert_eq!(addr_of(&read(&o)), Some(r.parse().unwrap()));
    // Rebind (no Server ID) from another network: lifetimes 0.
    let rebind = msg(
        6,
        &[
            (opt::CLIENTID, vec![0, 3, 0, 1, 2, 0, 0, 0, 0, 5]),
            (opt::IA_NA, ia(1, Some("fd00:99::5"))),
        ],
    );
    let p2 = policy("discovery: {enabled: true}\n");
    let o = run(&p2, &rebind, [2, 0, 0, 0, 0, 5], &mut t, 2000);
    let m = read(&o);
    assert_eq!(
        m.ia_na[0].addrs,
        vec!["fd00:99::5".parse::<Ipv6Addr>().unwrap()]
    );
    // Confirm: on link or not.
    let confirm = |a: &str| {
        msg(
            4,
            &[
                (opt::CLIENTID, DUID_UUID.to_vec()),
                (opt::IA_NA, ia(1, Some(a))),
            ],
        )
    };
    let m = read(&run(&p, &confirm(r), KNOWN, &mut t, 2000));
    assert_eq!(m.status.map(|s| s.0), Some(status::SUCCESS));
    let m = read(&run(&p, &confirm("fd00:99::5"), KNOWN, &mut t, 2000));
    assert_eq!(m.status.map(|s| s.0), Some(status::NOT_ON_LINK));
    // Decline quarantines, Release frees.
    let give = |t: u8| {
        msg(
            t,
            &[
                (opt::CLIENTID, DUID_UUID.to_vec()),
                sid(),
                (opt::IA_NA, ia(0x1234_5678, Some(r))),
            ],
        )
    };
    let o = run(&p, &give(9), KNOWN, &mut t, 2001);
    assert_eq!(read(&o).status.map(|s| s.0), Some(status::SUCCESS));
    assert_eq!(
        t.get(r.parse().unwrap()).map(|l| l.state),
        Some(State6::Declined)
    );
    let mut t = LeaseTable6::new();
    run(&p, &ovmf_pxe(3, &[sid()]), KNOWN, &mut t, 1000);
    let o = run(&p, &give(8), KNOWN, &mut t, 2001);
    assert_eq!(o.writes, vec![LeaseWrite6::Delete(r.parse().unwrap())]);
    assert!(t.is_empty());
}

#[test]
fn rapid_commit_binds_at_once_when_allowed() {
    let b = ovmf_pxe(1, &[(opt::RAPID_COMMIT, vec![])]);
    let mut t = LeaseTable6::new();
    let m = read(&run(&policy(""), &b, KNOWN, &mut t, 1000));
    assert_eq!(m.msg_type, Some(MessageType::Advertise));
    let p = policy("rapidCommit: true\n");
    let o = run(&p, &b, KNOWN, &mut t, 1000);
    let m = read(&o);
    assert_eq!(m.msg_type, Some(MessageType::Reply));
    assert!(m.rapid_commit);
    assert_eq!(o.writes.len(), 1);
}

#[test]
fn information_request_gets_boot_options_without_an_address() {
    let p = policy("");
    let mut t = LeaseTable6::new();
    let o = run(&p, &ipxe(11, &[]), KNOWN, &mut t, 1000);
    let m = read(&o);
    assert!(m.ia_na.is_empty());
    assert!(t.is_empty());
    assert!(m.boot_url.unwrap().contains("boot.ipxe"));
}

#[test]
fn config_reservations_by_duid_and_mac() {
    let p = policy(
        "  reservations: [{duid: \"00:03:00:01:02:00:00:00:00:05\", address: \"fd00:89::50\"}, {mac: \"02:00:00:00:00:06\", address: \"fd00:89::60\"}]\n",
    );
    let mut t = LeaseTable6::new();
    let by_duid = msg(
        1,
        &[
            (opt::CLIENTID, vec![0, 3, 0, 1, 2, 0, 0, 0, 0, 5]),
            (opt::IA_NA, ia(1, None)),
        ],
    );
    let m = read(&run(&p, &by_duid, [2, 0, 0, 0, 0, 5], &mut t, 1000));
    assert_eq!(
        addr_of(&m),
        Some("fd00:89::50".parse().unwrap()),
        "admitted without discovery"
    );
    let by_mac = perfdhcp([2, 0, 0, 0, 0, 6], 3);
    let m = read(&run(&p, &by_mac, [2, 0, 0, 0, 0, 6], &mut t, 1000));
    assert_eq!(addr_of(&m), Some("fd00:89::60".parse().unwrap()));
}

#[test]
fn relayed_messages_need_a_listed_relay_and_go_back_wrapped() {
    let p = policy("");
    let mut t = LeaseTable6::new();
    let relay = |link: &str, inner: &[u8]| {
        let mut b = vec![12, 0];
        b.extend_from_slice(&link.parse::<Ipv6Addr>().unwrap().octets());
        b.extend_from_slice(&link_local(KNOWN).ip().octets());
        b.extend(opt_bytes(79, &[0, 1, 0x52, 0x54, 0, 0x12, 0x34, 0x56]));
        b.extend(opt_bytes(opt::RELAY_MSG, inner));
        b
    };
    let from = SocketAddrV6::new("fd00:90::1".parse().unwrap(), 547, 0, 0);
    let o = p.handle(
        &relay("fd00:91::1", &ovmf_pxe(1, &[])),
        Via6::Port547,
        from,
        &fake(),
        &mut t,
        1,
    );
    assert_eq!(o.dropped, Some(Skip6::UnlistedRelay));
    let o = p.handle(
        &relay("fd00:90::1", &ovmf_pxe(1, &[])),
        Via6::Port547,
        from,
        &fake(),
        &mut t,
        1,
    );
    let r = o.reply.unwrap();
    assert_eq!(r.to, Dest6::Relay);
    assert_eq!(r.bytes[0], MessageType::RelayRepl.code());
    assert_eq!(r.msg_type, MessageType::Advertise);
}

#[test]
fn messages_for_other_servers_are_dropped_and_free_the_offer() {
    let p = policy("");
    let mut t = LeaseTable6::new();
    run(&p, &ovmf_pxe(1, &[]), KNOWN, &mut t, 1000);
    assert_eq!(t.len(), 1);
    let other = (opt::SERVERID, Duid::link_layer([2, 0, 0, 0, 0, 2]).0);
    let o = run(&p, &ovmf_pxe(3, &[other]), KNOWN, &mut t, 1001);
    assert_eq!(o.dropped, Some(Skip6::OtherServer));
    assert!(t.is_empty());
    let o = p.handle(
        &ovmf_pxe(1, &[]),
        Via6::Port4011,
        link_local(KNOWN),
        &fake(),
        &mut t,
        1,
    );
    assert_eq!(
        o.dropped,
        Some(Skip6::Unhandled),
        "no 4011 in authoritative mode"
    );
}

#[test]
fn a_known_machine_without_a_boot_file_gets_a_warning() {
    let p = policy("");
    let mut t = LeaseTable6::new();
    let b = msg(
        1,
        &[
            (opt::CLIENTID, DUID_UUID.to_vec()),
            (opt::IA_NA, ia(1, None)),
            (opt::CLIENT_ARCH_TYPE, vec![0, 11]),
            (opt::VENDOR_CLASS, vendor("PXEClient:Arch:00011")),
        ],
    );
    let o = run(&p, &b, KNOWN, &mut t, 1);
    assert_eq!(o.warning.as_ref().map(|w| w.reason), Some("NoBootFile"));
    assert!(read(&o).boot_url.is_none());
}
