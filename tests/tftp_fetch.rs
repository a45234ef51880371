//! Story: a server's firmware fetches its boot loader over TFTP. Real
//! clients (curl, atftp) on loopback (127.0.0.1, and ::1 on a dual-stack
//! `[::]` listener) fetch files byte-identical from
//! metalherd's TFTP server, with default options and with blksize, tsize
//! and windowsize, and 200 of them at once all finish.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::tftp::{atftp_get, curl, eventually, start};

const FILES: [&str; 6] = [
    "ipxe.efi",
    "random.bin",
    "exact.bin",
    "empty",
    "sub/nested.txt",
    "inside",
];

fn expected(fx: &common::tftp::TftpFixture, name: &str) -> Vec<u8> {
    std::fs::read(fx.root().join(name)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_fetches_files_byte_identical() {
    let fx = start(|_| {}).await;
    let out_dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    for extra in [
        &[][..],
        &["--tftp-blksize", "1468"][..],
        &["--tftp-blksize", "8192"][..],
    ] {
        for f in FILES {
            let out = out_dir.path().join(format!("out{n}"));
            n += 1;
            let o = curl(&fx.url(f), &out, extra).await;
            assert!(o.status.success(), "curl {extra:?} {f}: {o:?}");
            assert_eq!(
                std::fs::read(&out).unwrap(),
                expected(&fx, f),
                "curl {extra:?} {f}"
            );
        }
    }
    // A virtual file, served from memory.
    let out = out_dir.path().join("virtual");
    let o = curl(&fx.url("virtual/hello.txt"), &out, &[]).await;
    assert!(o.status.success(), "{o:?}");
    assert_eq!(std::fs::read(&out).unwrap(), b"hello from memory\n");
    // netascii (RFC 1350): LF goes out as CR LF, a bare CR as CR NUL; curl
    // writes what it receives.
    fx.mem.insert("text.txt", &b"one\ntwo\r\nthree\r"[..]);
    let out = out_dir.path().join("netascii");
    let o = curl(&fx.url("text.txt;mode=netascii"), &out, &[]).await;
    assert!(o.status.success(), "{o:?}");
    assert_eq!(std::fs::read(&out).unwrap(), b"one\r\ntwo\r\0\r\nthree\r\0");
    // The server counts a transfer when the last ACK arrives, which may be
    // just after the client exits.
    eventually("all transfers counted", || {
        fx.metrics.transfers_with("complete") == n + 2
    })
    .await;
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atftp_fetches_files_byte_identical_with_options() {
    let fx = start(|_| {}).await;
    let out_dir = tempfile::tempdir().unwrap();
    let option_sets: [&[&str]; 4] = [
        &[],
        &["tsize"],
        &["blksize 1468", "windowsize 8", "tsize"],
        &["blksize 512", "windowsize 16", "timeout 2"],
    ];
    let mut n = 0;
    for opts in option_sets {
        for f in FILES {
            let out = out_dir.path().join(format!("out{n}"));
            n += 1;
            let o = atftp_get(fx.addr, f, &out, opts).await;
            let got = std::fs::read(&out).unwrap_or_default();
            assert!(
                got == expected(&fx, f),
                "atftp {opts:?} {f}: got {} bytes, want {}; {o:?}",
                got.len(),
                expected(&fx, f).len()
            );
        }
    }
    eventually("all transfers counted", || {
        fx.metrics.transfers_with("complete") == n
    })
    .await;
    assert_eq!(fx.metrics.transfers_with("timed_out"), 0);
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_on_the_shared_runtime_too() {
    // `threads: 0`: no thread of its own, the caller's runtime serves.
    let fx = start(|c| c.threads = 0).await;
    let out_dir = tempfile::tempdir().unwrap();
    for (i, extra) in [&[][..], &["--tftp-blksize", "1468"][..]]
        .iter()
        .enumerate()
    {
        let out = out_dir.path().join(format!("out{i}"));
        let o = curl(&fx.url("ipxe.efi"), &out, extra).await;
        assert!(o.status.success(), "{o:?}");
        assert_eq!(std::fs::read(&out).unwrap(), expected(&fx, "ipxe.efi"));
    }
    let out = out_dir.path().join("windowed");
    atftp_get(fx.addr, "ipxe.efi", &out, &["blksize 1468", "windowsize 8"]).await;
    assert_eq!(std::fs::read(&out).unwrap(), expected(&fx, "ipxe.efi"));
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_clients_all_finish() {
    const CLIENTS: usize = 200;
    // One host stands in for a rack of them: lift the per-address share.
    let fx = start(|c| c.max_transfers_per_client = CLIENTS).await;
    let out_dir = tempfile::tempdir().unwrap();
    let want = expected(&fx, "ipxe.efi");
    let url = fx.url("ipxe.efi");
    let mut runs = Vec::new();
    for i in 0..CLIENTS {
        let out = out_dir.path().join(format!("c{i}"));
        let url = url.clone();
        let addr = fx.addr;
        runs.push(tokio::spawn(async move {
            // Half curl, half atftp with windowsize: both kinds of boot storm.
            let o = if i % 2 == 0 {
                curl(&url, &out, &["--tftp-blksize", "1468"]).await
            } else {
                atftp_get(
                    addr,
                    "ipxe.efi",
                    &out,
                    &["blksize 1468", "windowsize 8", "tsize"],
                )
                .await
            };
            (out, o)
        }));
    }
    let mut ok = 0;
    for r in runs {
        let (out, o) = r.await.unwrap();
        let got = std::fs::read(&out).unwrap_or_default();
        assert!(got == want, "{}: {} bytes; {o:?}", out.display(), got.len());
        ok += 1;
    }
    assert_eq!(ok, CLIENTS);
    eventually("all transfers counted", || {
        fx.metrics.transfers_with("complete") == CLIENTS as u64
    })
    .await;
    assert_eq!(fx.metrics.active.get(), 0);
    fx.stop().await;
}

/// A server listening on `[::]` serves IPv6 clients (curl and atftp over
/// `::1`) and IPv4 ones on the same socket, and refuses a traversal over
/// IPv6 with the same ERROR packet as over IPv4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_clients_are_served_and_refused_like_ipv4_ones() {
    use metalherd::tftp::packet::{Mode, Packet, Request};
    let fx = start(|c| c.listen = "[::]:0".parse().unwrap()).await;
    let port = fx.addr.port();
    let out_dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    for host in ["[::1]", "127.0.0.1"] {
        for f in ["ipxe.efi", "sub/nested.txt", "empty"] {
            let out = out_dir.path().join(format!("out{n}"));
            n += 1;
            let url = format!("tftp://{host}:{port}/{f}");
            let o = curl(&url, &out, &["--tftp-blksize", "1400"]).await;
            assert!(o.status.success(), "curl {url}: {o:?}");
            assert_eq!(std::fs::read(&out).unwrap(), expected(&fx, f), "{url}");
        }
    }
    let v6: std::net::SocketAddr = format!("[::1]:{port}").parse().unwrap();
    let out = out_dir.path().join("atftp6");
    let o = atftp_get(
        v6,
        "ipxe.efi",
        &out,
        &["blksize 1400", "windowsize 8", "tsize"],
    )
    .await;
    assert_eq!(
        std::fs::read(&out).unwrap_or_default(),
        expected(&fx, "ipxe.efi"),
        "atftp over ::1: {o:?}"
    );
    // A traversal over IPv6: an ERROR (access violation) from a transfer
    // socket, naming no path.
    let s = std::net::UdpSocket::bind("[::1]:0").unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let rrq = Packet::Rrq(Request {
        filename: "../outside/secret".into(),
        mode: Mode::Octet,
        options: Vec::new(),
    })
    .encode()
    .to_vec();
    s.send_to(&rrq, v6).unwrap();
    let (from, p) = common::tftp::recv_packet(&s);
    assert_ne!(from.port(), port, "errors come from a transfer socket");
    match p {
        Packet::Error { code, message } => {
            assert_eq!(code, 2, "{message}");
            assert!(!message.contains('/'), "{message}");
        }
        other => panic!("expected ERROR, got {other:?}"),
    }
    eventually("all transfers counted", || {
        fx.metrics.transfers_with("complete") == n + 1
            && fx.metrics.transfers_with("forbidden") == 1
    })
    .await;
    fx.stop().await;
}
