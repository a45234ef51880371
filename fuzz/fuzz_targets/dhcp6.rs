//! Any datagram is read as a DHCPv6 client or relay message, or dropped
//! with a reason, never a panic; a message that reads is answered (an
//! Advertise with an address and the boot file URL, wrapped in a
//! Relay-reply per relay) and the answer reads back with the same
//! transaction, identifiers and URL. The same datagram then goes through
//! the DHCPv6 policy (authoritative with discovery and a listed relay, and
//! boot-options-only, on ports 547 and 4011): a reply or a counted drop,
//! never a panic, and every reply reads back.
#![no_main]

use std::net::{Ipv6Addr, SocketAddrV6};
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use metalherd::dhcp::v6::lease::LeaseTable6;
use metalherd::dhcp::v6::message::{Msg, options, opt};
use metalherd::dhcp::v6::policy::{Dest6, Policy6, Via6};
use metalherd::dhcp::v6::reply::{Answer, IaAnswer, relay_reply};
use metalherd::dhcp::v6::{Dhcp6Config, Dhcp6Settings, Duid, Message, MessageType};
use metalherd::directory::Directory;

fn policy(yaml: &str) -> Policy6 {
    let c: Dhcp6Config = serde_yaml::from_str(yaml).unwrap();
    Policy6::new(
        Dhcp6Settings::try_from(c).unwrap(),
        Duid::link_layer([2, 0, 0, 0, 0, 1]),
        Some("fd00:89::1".parse().unwrap()),
    )
}

/// Built once: parsing the YAML per input would cost more than the policy.
static POLICIES: LazyLock<[Policy6; 2]> = LazyLock::new(|| {
    [
        policy(
            "interface: eth0\nhttpBootUrl: \"http://[fd00:89::1]:8080\"\ndiscovery: {enabled: true}\n\
             rapidCommit: true\nsubnets: [{subnet: \"fd00:89::/64\", ranges: [{start: \"fd00:89::100\", \
             end: \"fd00:89::110\"}], dns: [\"fd00:89::1\"], relays: [\"fd00:89::1\"]}]\n",
        ),
        policy(
            "interface: eth0\nmode: proxy\nhttpBootUrl: \"http://[fd00:89::1]:8080\"\ndiscovery: {enabled: true}\n",
        ),
    ]
});
static DIRECTORY: LazyLock<Directory> = LazyLock::new(Directory::new);

/// The message inside a Relay-reply (any depth).
fn unwrap_relays(mut b: Vec<u8>) -> Vec<u8> {
    while b.first() == Some(&MessageType::RelayRepl.code()) {
        let inner = options(&b[34..])
            .find(|(c, _)| *c == opt::RELAY_MSG)
            .and_then(|(_, d)| d.ok())
            .unwrap()
            .to_vec();
        b = inner;
    }
    b
}

fuzz_target!(|data: &[u8]| {
    let _ = Msg::decode(data);
    let src = SocketAddrV6::new(
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0x5054, 0xff, 0xfe12, 0x3456),
        546,
        0,
        2,
    );
    for p in POLICIES.iter() {
        let mut leases = LeaseTable6::new();
        for via in [Via6::Port547, Via6::Port4011] {
            let out = p.handle(data, via, src, &*DIRECTORY, &mut leases, 1_000);
            match out.reply {
                Some(r) => {
                    let inner = match r.to {
                        Dest6::Relay => unwrap_relays(r.bytes),
                        _ => r.bytes,
                    };
                    assert!(Msg::decode(&inner).is_ok());
                }
                None => assert!(out.dropped.is_some()),
            }
        }
    }
    let Ok(m) = Message::parse(data) else { return };
    let _ = m.mac();
    let answer = Answer {
        msg_type: MessageType::Advertise,
        xid: m.msg.xid,
        server_id: Duid::link_layer([2, 0, 0, 0, 0, 1]),
        client_id: m.msg.client_id.clone(),
        ia_na: m
            .msg
            .ia_na
            .iter()
            .map(|ia| IaAnswer {
                iaid: ia.iaid,
                t1: 1800,
                t2: 2880,
                addr: Some(("fd00:89::11".parse().unwrap(), 3600, 7200)),
                status: None,
            })
            .collect(),
        status: None,
        preference: Some(255),
        rapid_commit: m.msg.rapid_commit,
        boot_url: Some("http://[fd00:89::1]/boot/ipxe.efi".into()),
        boot_params: Vec::new(),
        vendor_class: None,
        dns: Vec::new(),
    };
    let inner = answer.encode();
    let back = Msg::decode(&inner).unwrap();
    assert_eq!(back.xid, m.msg.xid);
    assert_eq!(back.client_id, m.msg.client_id);
    assert_eq!(back.ia_na.len(), m.msg.ia_na.len());
    assert_eq!(back.boot_url, answer.boot_url);
    assert_eq!(unwrap_relays(relay_reply(&m.relays, inner.clone())), inner);
});
