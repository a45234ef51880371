//! Story: hostile or broken TFTP clients change nothing. Traversal attempts,
//! writes and malformed requests are refused with an ERROR packet (within
//! a rate limit), junk on a transfer socket is counted and dropped, a
//! client refused because the server is busy gets no answer and is served
//! when it retransmits, a client's ERROR ends its transfer at once, a
//! vanished client's transfer ends after its retries, duplicate ACKs never
//! cause duplicate DATA, and shutdown drains within its deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::tftp::{atftp_get, curl, eventually, raw_socket, recv_packet, run_client, start};
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

fn ack(block: u16) -> Vec<u8> {
    Packet::Ack { block }.encode().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traversal_attempts_are_refused_with_an_error_packet() {
    let fx = start(|_| {}).await;
    let secret = b"do not serve me";
    let attempts = [
        "../outside/secret",
        "sub/../../outside/secret",
        "../../../../../../etc/passwd",
        "/etc/passwd",
        "escape",
        "escdir/secret",
        "..\\outside\\secret",
        "sub\\..\\..\\outside\\secret",
        "C:\\Windows\\win.ini",
    ];
    for name in attempts {
        let s = raw_socket();
        s.send_to(&rrq(name, &[("tsize", "0")]), fx.addr).unwrap();
        let (from, p) = recv_packet(&s);
        assert_ne!(from, fx.addr, "errors come from a transfer socket");
        match p {
            Packet::Error { code, message } => {
                assert_eq!(code, 2, "{name}: {message}");
                assert!(
                    !message.contains('/'),
                    "{name}: message leaks a path: {message}"
                );
            }
            other => panic!("{name}: expected ERROR, got {other:?}"),
        }
    }
    // Counted just after the ERROR is sent: wait for it.
    let want = attempts.len() as u64;
    eventually("every attempt counted", || {
        fx.metrics.transfers_with("forbidden") == want
    })
    .await;

    // Real clients get the refusal too, and never the secret.
    let out_dir = tempfile::tempdir().unwrap();
    for (i, name) in ["../outside/secret", "/etc/passwd", "escape", "a\\b"]
        .iter()
        .enumerate()
    {
        let out = out_dir.path().join(format!("a{i}"));
        let o = atftp_get(fx.addr, name, &out, &[]).await;
        let got = std::fs::read(&out).unwrap_or_default();
        assert!(got.is_empty(), "atftp {name}: got {} bytes", got.len());
        let text =
            String::from_utf8_lossy(&o.stderr).to_string() + &String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("access violation"), "atftp {name}: {o:?}");
    }
    let out = out_dir.path().join("c");
    let o = curl(&fx.url("escape"), &out, &[]).await;
    assert!(!o.status.success(), "curl escape: {o:?}");
    assert_ne!(std::fs::read(&out).unwrap_or_default(), secret);
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_requests_are_refused() {
    let fx = start(|_| {}).await;
    let s = raw_socket();
    let wrq = Packet::Wrq(Request {
        filename: "new.bin".into(),
        mode: Mode::Octet,
        options: vec![],
    });
    s.send_to(&wrq.encode(), fx.addr).unwrap();
    let (_, p) = recv_packet(&s);
    assert!(matches!(p, Packet::Error { code: 2, .. }), "{p:?}");

    let local = tempfile::tempdir().unwrap();
    std::fs::write(local.path().join("up.bin"), b"upload").unwrap();
    let port = fx.addr.port().to_string();
    let o = run_client(
        "atftp",
        &["-p", "-l", "up.bin", "-r", "up.bin", "127.0.0.1", &port],
        local.path(),
    )
    .await;
    assert!(!o.status.success(), "atftp put: {o:?}");
    assert!(!fx.root().join("up.bin").exists());
    assert!(!fx.root().join("new.bin").exists());
    eventually("both writes counted", || {
        fx.metrics.transfers_with("write_refused") == 2
    })
    .await;
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_answered_with_an_error_packet() {
    let fx = start(|_| {}).await;
    let s = raw_socket();
    // What the request port cannot serve, and the ERROR code it answers
    // with (RFC 1350 code 4, RFC 2347 code 8 for options).
    let refused: Vec<(Vec<u8>, u16)> = vec![
        (b"\x00\x01file".to_vec(), 4),                  // name not terminated
        (b"\x00\x01\x00octet\x00".to_vec(), 4),         // empty name
        (b"\x00\x01\xff\xfe\x00octet\x00".to_vec(), 4), // name not UTF-8
        (b"\x00\x02\x00octet\x00".to_vec(), 4),         // empty name, write
        (b"\x00\x01f\x00mail\x00".to_vec(), 4),         // obsolete mode
        (b"\x00\x01f\x00binary\x00".to_vec(), 4),       // unknown mode
        (b"\x00\x01f\x00octet".to_vec(), 4),            // mode not terminated
        (b"\x00\x01f\x00octet\x00blksize\x00".to_vec(), 8), // option without value
        (b"\x00\x01f\x00octet\x00blksize\x001468".to_vec(), 8), // value not terminated
        (b"\x00\x09hello".to_vec(), 4),                 // unknown opcode
        (b"\xff\xff\xff\xff".to_vec(), 4),
        (ack(1), 4),                           // not a request
        (b"\x00\x03\x00\x01data".to_vec(), 4), // DATA to the request port
    ];
    for (datagram, want) in &refused {
        s.send_to(datagram, fx.addr).unwrap();
        let (from, p) = recv_packet(&s);
        assert_eq!(from, fx.addr, "{datagram:?}: refused from the request port");
        match p {
            Packet::Error { code, message } => {
                assert_eq!(code, *want, "{datagram:?}: {message}");
                assert!(!message.is_empty());
            }
            other => panic!("{datagram:?}: expected ERROR, got {other:?}"),
        }
    }
    // Never answered: crumbs too short for an opcode, and ERROR packets
    // (errors are not acknowledged). A valid request right after them is
    // answered first, so nothing was sent for them.
    let silent: Vec<Vec<u8>> = vec![
        vec![],
        vec![0],
        Packet::Error {
            code: 0,
            message: "stray".into(),
        }
        .encode()
        .to_vec(),
    ];
    for j in &silent {
        s.send_to(j, fx.addr).unwrap();
    }
    let n = (refused.len() + silent.len()) as u64;
    eventually("every malformed datagram counted", || {
        fx.metrics.malformed_total() == n
    })
    .await;

    // Junk on a transfer socket is dropped; the transfer goes on.
    s.send_to(&rrq("sub/nested.txt", &[]), fx.addr).unwrap();
    let (tid, p) = recv_packet(&s);
    assert!(matches!(p, Packet::Data { block: 1, .. }), "{p:?}");
    s.send_to(b"\x00\x04\x00", tid).unwrap();
    s.send_to(b"garbage", tid).unwrap();
    s.send_to(&ack(1), tid).unwrap();
    eventually("transfer completes", || {
        fx.metrics.transfers_with("complete") == 1
    })
    .await;
    assert_eq!(fx.metrics.malformed_total(), n + 2);

    // Real clients learn at once: atftp reports the server's refusal of a
    // mode it does not serve instead of timing out.
    let out_dir = tempfile::tempdir().unwrap();
    let port = fx.addr.port().to_string();
    let o = run_client(
        "atftp",
        &[
            "--option",
            "mode mail",
            "-g",
            "-r",
            "random.bin",
            "-l",
            "m",
            "127.0.0.1",
            &port,
        ],
        out_dir.path(),
    )
    .await;
    let text = String::from_utf8_lossy(&o.stderr).to_string() + &String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "atftp mail mode: {o:?}");
    assert!(text.contains("transfer mode"), "atftp mail mode: {text}");

    // The server still serves real clients.
    let out = out_dir.path().join("ok");
    let o = curl(&fx.url("random.bin"), &out, &[]).await;
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(fx.root().join("random.bin")).unwrap()
    );
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_replies_are_rate_limited() {
    let fx = start(|c| {
        c.error_replies_per_second = 1;
        c.error_reply_burst = 3;
    })
    .await;
    let s = raw_socket();
    let started = std::time::Instant::now();
    for _ in 0..8 {
        s.send_to(b"\x00\x01f\x00mail\x00", fx.addr).unwrap();
    }
    eventually("every request counted", || {
        fx.metrics.malformed_total() == 8
    })
    .await;
    let elapsed = started.elapsed().as_secs();
    let mut answered = 0u64;
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 2048];
    while let Ok((n, _)) = s.recv_from(&mut buf) {
        assert!(matches!(
            Packet::decode(&buf[..n]),
            Ok(Packet::Error { code: 4, .. })
        ));
        answered += 1;
    }
    // The burst, plus what the rate refilled while the requests came in.
    assert!(
        (3..=3 + elapsed).contains(&answered),
        "{answered} ERRORs for 8 refusals"
    );
    let limited = fx
        .metrics
        .dropped_requests
        .get(&metalherd::tftp::metrics::ReasonLabel {
            reason: "error_rate_limited",
        })
        .map(|c| c.get());
    assert_eq!(limited, Some(8 - answered));
    // Refusals made by transfers (a missing file) draw from the same budget.
    s.send_to(&rrq("missing", &[]), fx.addr).unwrap();
    eventually("the missing file is counted", || {
        fx.metrics.transfers_with("not_found") == 1
    })
    .await;
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_refused_client_gets_nothing_and_is_served_when_it_retransmits() {
    let fx = start(|c| {
        c.max_transfers = 1;
        c.timeout_ms = 60_000;
        c.max_timeout_ms = 60_000;
    })
    .await;
    let first = raw_socket();
    first.send_to(&rrq("sub/nested.txt", &[]), fx.addr).unwrap();
    let (tid, p) = recv_packet(&first);
    assert!(matches!(p, Packet::Data { block: 1, .. }), "{p:?}");
    // The only slot is taken: the second client's request is not answered
    // (an ERROR would end a firmware's boot attempt; silence makes it
    // retransmit).
    let second = raw_socket();
    second
        .send_to(&rrq("sub/nested.txt", &[]), fx.addr)
        .unwrap();
    eventually("busy counted", || {
        fx.metrics
            .dropped_requests
            .get(&metalherd::tftp::metrics::ReasonLabel { reason: "busy" })
            .is_some_and(|c| c.get() == 1)
    })
    .await;
    // The first transfer ends, the slot frees, the retransmission is served.
    first.send_to(&ack(1), tid).unwrap();
    eventually("first transfer completes", || {
        fx.metrics.transfers_with("complete") == 1
    })
    .await;
    second
        .send_to(&rrq("sub/nested.txt", &[]), fx.addr)
        .unwrap();
    let (_, p) = recv_packet(&second);
    assert!(
        matches!(&p, Packet::Data { block: 1, data } if &data[..] == b"nested\n"),
        "the busy client's first packet: {p:?}"
    );
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_error_after_oack_ends_the_transfer_at_once() {
    // What UEFI firmware does: probe the size, then abort with ERROR 8.
    let fx = start(|c| c.timeout_ms = 100).await;
    let s = raw_socket();
    s.send_to(
        &rrq("ipxe.efi", &[("tsize", "0"), ("blksize", "1468")]),
        fx.addr,
    )
    .unwrap();
    let (tid, p) = recv_packet(&s);
    let size = std::fs::metadata(fx.root().join("ipxe.efi")).unwrap().len();
    assert_eq!(
        p,
        Packet::Oack {
            options: vec![
                ("tsize".into(), size.to_string()),
                ("blksize".into(), "1468".into())
            ]
        }
    );
    let err = Packet::Error {
        code: 8,
        message: "tsize probe".into(),
    };
    s.send_to(&err.encode(), tid).unwrap();
    eventually("transfer ended by the client", || {
        fx.metrics.transfers_with("client_error") == 1
    })
    .await;
    assert_eq!(fx.metrics.retransmissions.get(), 0);
    assert_eq!(fx.metrics.active.get(), 0);
    // Several retransmission timeouts later, still nothing was sent.
    s.set_read_timeout(Some(Duration::from_millis(600)))
        .unwrap();
    let mut buf = [0u8; 2048];
    assert!(
        s.recv_from(&mut buf).is_err(),
        "server sent after the client's ERROR"
    );
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_request_from_the_same_port_after_a_size_probe_is_served() {
    let fx = start(|_| {}).await;
    let s = raw_socket();
    s.send_to(
        &rrq("ipxe.efi", &[("tsize", "0"), ("blksize", "1468")]),
        fx.addr,
    )
    .unwrap();
    let (probe_tid, p) = recv_packet(&s);
    assert!(matches!(p, Packet::Oack { .. }), "{p:?}");
    // The real read, from the same port, before the probe is aborted.
    s.send_to(&rrq("ipxe.efi", &[("blksize", "1468")]), fx.addr)
        .unwrap();
    s.send_to(
        &Packet::Error {
            code: 8,
            message: "probe".into(),
        }
        .encode(),
        probe_tid,
    )
    .unwrap();
    let (tid, p) = recv_packet(&s);
    assert_ne!(tid, probe_tid);
    assert!(matches!(p, Packet::Oack { .. }), "{p:?}");
    s.send_to(
        &Packet::Error {
            code: 0,
            message: "done".into(),
        }
        .encode(),
        tid,
    )
    .unwrap();
    eventually("both transfers ended by the client", || {
        fx.metrics.transfers_with("client_error") == 2
    })
    .await;
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_client_ends_its_transfer_after_the_retries() {
    let fx = start(|c| {
        c.timeout_ms = 50;
        c.max_timeout_ms = 100;
        c.max_retries = 3;
    })
    .await;
    let s = raw_socket();
    s.send_to(&rrq("random.bin", &[]), fx.addr).unwrap();
    let mut copies = 0;
    eventually("transfer times out", || {
        fx.metrics.transfers_with("timed_out") == 1
    })
    .await;
    let mut buf = [0u8; 2048];
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    while let Ok((n, _)) = s.recv_from(&mut buf) {
        assert_eq!(Packet::decode(&buf[..n]).unwrap(), {
            let data = std::fs::read(fx.root().join("random.bin")).unwrap();
            Packet::Data {
                block: 1,
                data: data[..512].to_vec().into(),
            }
        });
        copies += 1;
    }
    assert_eq!(copies, 4, "the first DATA and three retransmissions");
    assert_eq!(fx.metrics.retransmissions.get(), 3);
    assert_eq!(fx.metrics.active.get(), 0);
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_acks_never_cause_duplicate_data() {
    let fx = start(|_| {}).await;
    let s = raw_socket();
    s.send_to(&rrq("random.bin", &[]), fx.addr).unwrap();
    let (tid, p) = recv_packet(&s);
    assert!(matches!(p, Packet::Data { block: 1, .. }));
    for _ in 0..3 {
        s.send_to(&ack(1), tid).unwrap();
    }
    let (_, p) = recv_packet(&s);
    assert!(matches!(p, Packet::Data { block: 2, .. }), "{p:?}");
    s.send_to(&ack(2), tid).unwrap();
    // Had the duplicates been answered, copies of DATA 2 would come first.
    let (_, p) = recv_packet(&s);
    assert!(matches!(p, Packet::Data { block: 3, .. }), "{p:?}");
    s.send_to(
        &Packet::Error {
            code: 0,
            message: "done".into(),
        }
        .encode(),
        tid,
    )
    .unwrap();
    eventually("transfer ends", || {
        fx.metrics.transfers_with("client_error") == 1
    })
    .await;
    assert_eq!(fx.metrics.duplicate_acks.get(), 2);
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_and_duplicate_requests_are_dropped_and_shutdown_drains() {
    let fx = start(|c| {
        c.max_transfers = 1;
        c.timeout_ms = 60_000;
        c.max_timeout_ms = 60_000;
        c.drain_ms = 100;
    })
    .await;
    let s = raw_socket();
    s.send_to(&rrq("random.bin", &[]), fx.addr).unwrap();
    let (tid, _) = recv_packet(&s);
    // The same request again (a client retransmitting it): no second transfer.
    s.send_to(&rrq("random.bin", &[]), fx.addr).unwrap();
    eventually("duplicate dropped", || {
        fx.metrics
            .dropped_requests
            .get(&metalherd::tftp::metrics::ReasonLabel {
                reason: "duplicate",
            })
            .is_some_and(|c| c.get() == 1)
    })
    .await;
    // A different request from the same port is not a duplicate (UEFI reads
    // right after its size probe, maybe from the same port): with the only
    // slot taken it is dropped as busy, not as a duplicate.
    s.send_to(&rrq("exact.bin", &[]), fx.addr).unwrap();
    eventually("busy dropped", || {
        fx.metrics
            .dropped_requests
            .get(&metalherd::tftp::metrics::ReasonLabel { reason: "busy" })
            .is_some_and(|c| c.get() == 1)
    })
    .await;
    // Another client while the only slot is taken: dropped as busy.
    let other = raw_socket();
    other.send_to(&rrq("random.bin", &[]), fx.addr).unwrap();
    eventually("busy dropped", || {
        fx.metrics
            .dropped_requests
            .get(&metalherd::tftp::metrics::ReasonLabel { reason: "busy" })
            .is_some_and(|c| c.get() == 2)
    })
    .await;
    // Shutdown: the stalled transfer is aborted after the drain deadline
    // with an ERROR to its client.
    let metrics = fx.metrics.clone();
    fx.stop().await;
    let (from, p) = recv_packet(&s);
    assert_eq!(from, tid);
    assert!(matches!(p, Packet::Error { code: 0, .. }), "{p:?}");
    assert_eq!(metrics.transfers_with("shutdown"), 1);
    assert_eq!(metrics.active.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_port_is_a_one_line_bind_error() {
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let config = metalherd::tftp::TftpConfig {
        listen: taken.local_addr().unwrap(),
        ..Default::default()
    };
    let settings = metalherd::tftp::TftpSettings::try_from(&config).unwrap();
    let err = match metalherd::tftp::bind(&settings) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("bound a taken port"),
    };
    assert!(
        err.starts_with("tftp: cannot listen on 127.0.0.1:"),
        "{err}"
    );
    assert!(!err.contains('\n'), "{err}");
}
