use std::net::SocketAddr;
use std::time::Duration;

use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

/// A server over a tiny app (`/` answers the peer address, `/big` 8 MiB)
/// with `limits`; returns its address, metrics and the token that stops it.
async fn start(limits: ConnLimits) -> (SocketAddr, ConnMetrics, CancellationToken) {
    let app = axum::Router::new()
        .route(
            "/",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
        )
        .route("/big", get(|| async { vec![7u8; 8 << 20] }));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics = ConnMetrics::default();
    let cancel = CancellationToken::new();
    tokio::spawn(serve(
        listener,
        app,
        limits,
        metrics.clone(),
        cancel.clone(),
        Duration::from_millis(100),
    ));
    (addr, metrics, cancel)
}

fn limits() -> ConnLimits {
    ConnLimits {
        max: 8,
        per_client: 2,
        header_timeout: Duration::from_millis(300),
        stall_timeout: Duration::from_millis(300),
    }
}

async fn get_root(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    // A refused connection may be reset before its 503 is read: what was
    // read until then is the answer.
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Read until the server closes (or resets) the connection; true when it
/// did within `within`.
async fn closed_by_server(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = vec![0u8; 64 << 10];
    tokio::time::timeout(within, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

#[tokio::test]
async fn handlers_see_the_peer_address() {
    let (addr, _, _stop) = start(limits()).await;
    let out = get_root(addr).await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("127.0.0.1:"), "{out}");
}

#[tokio::test]
async fn one_address_gets_its_share_and_is_told_busy_beyond_it() {
    let (addr, metrics, _stop) = start(limits()).await;
    // Two idle connections from one address hold its share...
    let held = [
        TcpStream::connect(addr).await.unwrap(),
        TcpStream::connect(addr).await.unwrap(),
    ];
    // ...so a third is told 503 and closed.
    let out = get_root(addr).await;
    assert!(!out.contains("200 OK"), "{out}");
    assert_eq!(
        metrics
            .refused
            .get_or_create(&RefusedLabels {
                reason: Refused::per_client
            })
            .get(),
        1
    );
    drop(held);
    // Its share comes back when they close.
    let mut ok = false;
    for _ in 0..50 {
        if get_root(addr).await.starts_with("HTTP/1.1 200") {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ok, "the address never got its share back");
}

#[tokio::test]
async fn the_total_is_capped_across_addresses() {
    let l = ConnLimits {
        max: 3,
        per_client: 3,
        ..limits()
    };
    let (addr, metrics, _stop) = start(l).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    // From another loopback address: the total, not the share, is full.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut s = sock.connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let out = String::from_utf8_lossy(&out);
    assert!(!out.contains("200 OK"), "{out}");
    assert_eq!(
        metrics
            .refused
            .get_or_create(&RefusedLabels {
                reason: Refused::busy
            })
            .get(),
        1
    );
    assert_eq!(metrics.open.get(), 3);
}

#[tokio::test]
async fn a_header_sent_too_slowly_ends_the_connection() {
    let (addr, metrics, _stop) = start(limits()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    // Half a header, then nothing.
    s.write_all(b"GET / HTTP/1.1\r\nhost:").await.unwrap();
    assert!(closed_by_server(&mut s, Duration::from_secs(20)).await);
    let n = || {
        metrics
            .timed_out
            .get_or_create(&ClosedLabels {
                reason: Closed::header_timeout,
            })
            .get()
    };
    for _ in 0..100 {
        if n() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(n(), 1);
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let (addr, _, _stop) = start(limits()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    // Kept alive, then left idle: the server ends it.
    assert!(closed_by_server(&mut s, Duration::from_secs(20)).await);
}

#[tokio::test]
async fn a_client_that_stops_reading_is_dropped() {
    let (addr, metrics, _stop) = start(limits()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    // Never read: the server's writes block on a full window.
    let stalled = || {
        metrics
            .timed_out
            .get_or_create(&ClosedLabels {
                reason: Closed::stalled,
            })
            .get()
    };
    let mut seen = false;
    for _ in 0..2000 {
        if stalled() == 1 {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(seen, "a stalled response was never ended");
    assert_eq!(metrics.open.get(), 0);
    drop(s);
}

#[tokio::test(start_paused = true)]
async fn a_blocked_write_times_out_and_progress_resets_the_deadline() {
    let (a, mut b) = tokio::io::duplex(4);
    let mut io = StallIo::new(a, Duration::from_secs(5));
    // Fills the pipe; the next write blocks.
    io.write_all(b"1234").await.unwrap();
    let blocked = tokio::spawn(async move {
        let r = io.write_all(b"5678").await;
        (r, io)
    });
    // Reading in time lets it through.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut buf = [0u8; 4];
    b.read_exact(&mut buf).await.unwrap();
    let (r, mut io) = blocked.await.unwrap();
    r.unwrap();
    // Not reading: the write fails after the deadline.
    let e = io.write_all(b"9").await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
}
