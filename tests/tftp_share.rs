//! Story: one host on the boot network cannot hold the TFTP server. A
//! client address gets at most `maxTransfersPerClient` transfers at once
//! (within `maxTransfers`); its extra requests get the busy server's
//! silence and are counted, while other addresses are served. A client's
//! `timeout` option above `maxClientTimeoutSeconds` is not granted (RFC
//! 2349 lets the server refuse it), so no client stretches its transfer's
//! retries to minutes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::tftp::{eventually, raw_socket, recv_packet, start};
use metalherd::tftp::packet::{Mode, Packet, Request};

fn rrq(name: &str, opts: &[(&str, &str)]) -> Vec<u8> {
    Packet::Rrq(Request {
        filename: name.into(),
        mode: Mode::Octet,
        options: opts
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    })
    .encode()
    .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_gets_its_share_of_transfers_and_no_long_timeout() {
    let fx = start(|c| {
        c.max_transfers_per_client = 2;
        c.timeout_ms = 60_000;
        c.max_timeout_ms = 60_000;
    })
    .await;
    // Two transfers from one address, held open (never ACKed).
    let held: Vec<_> = (0..2).map(|_| raw_socket()).collect();
    for s in &held {
        s.send_to(&rrq("random.bin", &[]), fx.addr).unwrap();
        assert!(matches!(recv_packet(s).1, Packet::Data { block: 1, .. }));
    }
    // A third from another port of the same address: silence, counted.
    let third = raw_socket();
    third
        .set_read_timeout(Some(Duration::from_millis(800)))
        .unwrap();
    third.send_to(&rrq("random.bin", &[]), fx.addr).unwrap();
    assert!(
        third.recv_from(&mut [0u8; 1024]).is_err(),
        "a third transfer"
    );
    let busy = metalherd::tftp::metrics::ReasonLabel {
        reason: "client_busy",
    };
    eventually("client_busy counted", || {
        fx.metrics
            .dropped_requests
            .get(&busy)
            .is_some_and(|c| c.get() == 1)
    })
    .await;
    // Another address is served meanwhile.
    let other = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
    other
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    other.send_to(&rrq("sub/nested.txt", &[]), fx.addr).unwrap();
    assert!(matches!(
        recv_packet(&other).1,
        Packet::Data { block: 1, .. }
    ));
    // RFC 2349 lets the server refuse a timeout it does not want: 255 s is
    // not acknowledged (no OACK, DATA at once), 5 s is.
    let s = std::net::UdpSocket::bind("127.0.0.3:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.send_to(&rrq("sub/nested.txt", &[("timeout", "255")]), fx.addr)
        .unwrap();
    assert!(matches!(recv_packet(&s).1, Packet::Data { block: 1, .. }));
    let s = std::net::UdpSocket::bind("127.0.0.4:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.send_to(&rrq("sub/nested.txt", &[("timeout", "5")]), fx.addr)
        .unwrap();
    match recv_packet(&s).1 {
        Packet::Oack { options } => assert_eq!(options, [("timeout".into(), "5".into())]),
        p => panic!("expected an OACK, got {p:?}"),
    }
}
