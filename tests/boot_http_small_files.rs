//! Story: iPXE fetches many small files (scripts, small assets, Ignition)
//! over the boot HTTP server, and none of them stalls. The stall was Nagle's
//! algorithm meeting the client's delayed ACK: hyper writes a response's
//! head and its streamed body in two writes, and with Nagle on the second
//! small write waits for the ACK of the first (~40 ms on Linux). The test
//! checks the cause, not a timing: the real `metalherd serve` is asked for a
//! small asset, and the very socket it accepted for that connection (taken
//! from the server process with pidfd_getfd) must have TCP_NODELAY set. The
//! API listener is checked the same way.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::OwnedFd;

use common::server::Server;

/// Send one keep-alive GET and read exactly one response; return its body.
fn get(stream: &mut TcpStream, path: &str) -> Vec<u8> {
    let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nUser-Agent: iPXE/1.21.1\r\n\r\n");
    stream.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "connection closed mid-response: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 200"), "{head}");
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .expect("content-length")
            .trim()
            .parse()
            .unwrap();
        if buf.len() >= end + 4 + len {
            return buf[end + 4..end + 4 + len].to_vec();
        }
    }
}

/// The server process's socket connected from `client` to `server`, as a
/// duplicate of its descriptor.
fn server_side_socket(pid: u32, server: SocketAddr, client: SocketAddr) -> Option<OwnedFd> {
    use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags, pidfd_getfd, pidfd_open};
    let pid = Pid::from_raw(pid as i32).expect("server pid");
    let pidfd = pidfd_open(pid, PidfdFlags::empty()).expect("pidfd_open of the server");
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let entry = entry.unwrap();
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if !target.to_string_lossy().starts_with("socket:") {
            continue;
        }
        let Ok(n) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(fd) = pidfd_getfd(&pidfd, n, PidfdGetfdFlags::empty()) else {
            continue;
        };
        let sock = socket2::SockRef::from(&fd);
        let local = sock.local_addr().ok().and_then(|a| a.as_socket());
        let peer = sock.peer_addr().ok().and_then(|a| a.as_socket());
        if local == Some(server) && peer == Some(client) {
            return Some(fd);
        }
    }
    None
}

/// The server's end of `stream` has TCP_NODELAY. The server may still be
/// between accepting it and setting the option: looked at for up to 5 s.
fn assert_no_delay(pid: u32, server: SocketAddr, stream: &TcpStream, what: &str) {
    let client = stream.local_addr().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let found = server_side_socket(pid, server, client);
        let nodelay = found
            .as_ref()
            .map(|fd| socket2::SockRef::from(fd).tcp_nodelay().unwrap());
        if nodelay == Some(true) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: {}",
            match nodelay {
                None => format!("no socket from {client} to {server} in the server process"),
                Some(_) =>
                    "the accepted socket has Nagle's algorithm on (TCP_NODELAY unset)".into(),
            }
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn small_boot_files_are_sent_without_waiting_for_acks() {
    let boot_port = common::free_port();
    let boot: SocketAddr = format!("127.0.0.1:{boot_port}").parse().unwrap();
    let assets = tempfile::tempdir().unwrap();
    // The 70-byte file of the report.
    let small = b"#!ipxe\necho a small file of seventy bytes, as iPXE fetches many:\nboot\n";
    assert_eq!(small.len(), 70);
    std::fs::write(assets.path().join("small.ipxe"), small).unwrap();
    let s = Server::start_with_config(Some(&format!(
        "controller:\n  enabled: false\nboot:\n  listen: {boot}\n  assetsDir: {}\n",
        assets.path().display()
    )));
    let pid = s.guard.pid();

    let mut c = TcpStream::connect(boot).unwrap();
    // Several requests on one connection, as iPXE and wrk make them.
    for _ in 0..3 {
        assert_eq!(get(&mut c, "/assets/small.ipxe"), small);
    }
    assert_no_delay(pid, boot, &c, "boot HTTP");

    // The API speaks TLS: its server accepts the connection and waits for
    // the client's hello, and that accepted socket is the one to check.
    let api: SocketAddr = s.addr.parse().unwrap();
    let a = TcpStream::connect(api).unwrap();
    assert_no_delay(pid, api, &a, "API");
}
