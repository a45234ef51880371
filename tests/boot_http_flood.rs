//! Story: a host on the boot network floods boot HTTP with slow
//! connections (half a request header, then nothing). Its own address gets
//! at most `maxConnectionsPerClient` of them, so another machine still
//! fetches its files; when many addresses together fill
//! `maxConnections`, new boot connections are refused and counted while
//! the API and TFTP of the same process keep answering; and the header
//! deadline frees every slow connection, after which boot HTTP serves
//! again. Runs a real `metalherd serve`, curl as the clients.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::proc::wait_for;
use common::server::Server;

const PER_CLIENT: usize = 10;
const MAX: usize = 40;

/// A connection from `from` that sends half a request header and stops.
fn slow(from: &str, to: SocketAddr) -> Option<TcpStream> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    let local: SocketAddr = format!("{from}:0").parse().ok()?;
    sock.bind(&local.into()).ok()?;
    sock.connect_timeout(&to.into(), Duration::from_secs(5))
        .ok()?;
    let mut s: TcpStream = sock.into();
    s.write_all(b"GET /assets/hello.txt HTTP/1.1\r\nHost: boot\r\nX-Slow:")
        .ok()?;
    Some(s)
}

/// `GET /assets/hello.txt` from `from` with curl: (HTTP status, body).
fn fetch(from: &str, boot: SocketAddr) -> (u16, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-m",
            "10",
            "--interface",
            from,
            "-w",
            "\n%{http_code}",
        ])
        .arg(format!("http://{boot}/assets/hello.txt"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

fn metrics(s: &Server) -> String {
    let out = s
        .curl()
        .args([
            "-sf",
            "-m",
            "10",
            "-H",
            &format!("Authorization: Bearer {}", s.token),
        ])
        .arg(format!("{}/metrics", s.url))
        .output()
        .unwrap();
    assert!(out.status.success(), "GET /metrics failed: {}", s.log());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn a_slow_connection_flood_leaves_the_api_tftp_and_other_machines_served() {
    common::require_tool("curl");
    let work = tempfile::tempdir().unwrap();
    let assets = work.path().join("assets");
    std::fs::create_dir_all(&assets).unwrap();
    std::fs::write(assets.join("hello.txt"), "hello from the boot network\n").unwrap();
    let boot: SocketAddr = format!("127.0.0.1:{}", common::free_port())
        .parse()
        .unwrap();
    let tftp = common::ipmi_emulators::free_udp_port();
    let s = Server::start_with_config(Some(&format!(
        "controller:
  enabled: false
tftp:
  listen: 127.0.0.1:{tftp}
  root: {assets}
boot:
  listen: {boot}
  assetsDir: {assets}
  maxConnections: {MAX}
  maxConnectionsPerClient: {PER_CLIENT}
  headerTimeoutSeconds: 30
",
        assets = assets.display(),
    )));
    let up = wait_for(Duration::from_secs(20), || {
        (fetch("127.0.0.5", boot).0 == 200).then_some(())
    });
    assert!(up.is_some(), "boot HTTP never answered: {}", s.log());

    // One flooding address: it holds its share, the rest is refused.
    let mut held: Vec<TcpStream> = (0..PER_CLIENT * 4)
        .filter_map(|_| slow("127.0.0.1", boot))
        .collect();
    let refused = wait_for(Duration::from_secs(10), || {
        let m = metrics(&s);
        let n = metric(
            &m,
            "metalherd_boot_http_connections_refused_total{reason=\"per_client\"}",
        );
        (n >= (PER_CLIENT * 3) as f64).then_some(n)
    });
    assert!(
        refused.is_some(),
        "no per-client refusals:\n{}",
        metrics(&s)
    );
    let (code, body) = fetch("127.0.0.5", boot);
    assert_eq!(code, 200, "another machine was not served during the flood");
    assert_eq!(body, "hello from the boot network\n");

    // Many addresses together fill the total.
    for i in 1..=(MAX - PER_CLIENT + 5) {
        if let Some(c) = slow(&format!("127.0.1.{i}"), boot) {
            held.push(c);
        }
    }
    // Top up until the slow connections alone hold every slot (a fetch
    // above may still have been closing when the flood reached the cap).
    let (mut k, mut full_seen) = (0, 0);
    let full = wait_for(Duration::from_secs(20), || {
        let m = metrics(&s);
        if metric(&m, "metalherd_boot_http_connections_open") >= MAX as f64 {
            // Twice in a row: no connection still closing is counted.
            full_seen += 1;
            std::thread::sleep(Duration::from_millis(200));
            return (full_seen >= 2).then_some(m);
        }
        full_seen = 0;
        k += 1;
        if let Some(c) = slow(&format!("127.0.2.{k}"), boot) {
            held.push(c);
        }
        None
    });
    let m = full.unwrap_or_else(|| panic!("the total was never reached:\n{}", metrics(&s)));
    assert_eq!(
        metric(&m, "metalherd_boot_http_connections_open"),
        MAX as f64,
        "never more open than the cap:\n{m}"
    );
    let busy = wait_for(Duration::from_secs(10), || {
        let m = metrics(&s);
        (metric(
            &m,
            "metalherd_boot_http_connections_refused_total{reason=\"busy\"}",
        ) >= 1.0)
            .then_some(m)
    });
    assert!(busy.is_some(), "no refusal at the cap:\n{}", metrics(&s));
    assert_ne!(fetch("127.0.0.6", boot).0, 200, "served beyond the cap");
    // The API and TFTP of the same process keep answering.
    let (code, _) = s.http("GET", "/healthz", None, None, "application/json");
    assert_eq!(code, 200, "the API stopped answering: {}", s.log());
    let out = Command::new("curl")
        .args(["-s", "-m", "10"])
        .arg(format!("tftp://127.0.0.1:{tftp}/hello.txt"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from the boot network\n",
        "TFTP stopped answering: {}",
        s.log()
    );

    // The header deadline ends every slow connection, the flooder's
    // sockets still open on its side; then boot HTTP serves again.
    let freed = wait_for(Duration::from_secs(60), || {
        let m = metrics(&s);
        (metric(&m, "metalherd_boot_http_connections_open") == 0.0).then_some(m)
    });
    let m = freed.unwrap_or_else(|| panic!("slow connections were never closed:\n{}", metrics(&s)));
    assert!(
        metric(
            &m,
            "metalherd_boot_http_connections_timed_out_total{reason=\"header_timeout\"}"
        ) >= MAX as f64,
        "{m}"
    );
    assert_eq!(fetch("127.0.0.6", boot).0, 200);
    drop(held);
}
