//! Any datagram is read as a DHCPv6 client or relay message, or dropped
//! with a reason, never a panic; a message that reads is answered (an
//! Advertise with an address and the boot file URL, wrapped in a
//! Relay-reply per relay) and the answer reads back with the same
//! transaction, identifiers and URL.
#![no_main]

use libfuzzer_sys::fuzz_target;
use metalherd::dhcp::v6::message::{Msg, options, opt};
use metalherd::dhcp::v6::reply::{Answer, IaAnswer, relay_reply};
use metalherd::dhcp::v6::{Duid, Message, MessageType};

fuzz_target!(|data: &[u8]| {
    let _ = Msg::decode(data);
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
    };
    let inner = answer.encode();
    let back = Msg::decode(&inner).unwrap();
    assert_eq!(back.xid, m.msg.xid);
    assert_eq!(back.client_id, m.msg.client_id);
    assert_eq!(back.ia_na.len(), m.msg.ia_na.len());
    assert_eq!(back.boot_url, answer.boot_url);
    let mut b = relay_reply(&m.relays, inner.clone());
    for _ in &m.relays {
        let relayed = options(&b[34..])
            .find(|(c, _)| *c == opt::RELAY_MSG)
            .and_then(|(_, d)| d.ok())
            .unwrap()
            .to_vec();
        b = relayed;
    }
    assert_eq!(b, inner);
});
