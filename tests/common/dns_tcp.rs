//! One DNS query over TCP from inside a network namespace: an A lookup
//! sent to a resolver listening there (a `kubectl port-forward` to a
//! cluster's DNS Service, which forwards TCP only). A thread enters the
//! namespace, so the connection is opened there.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::Duration;

/// The A records for `name` from the resolver on 127.0.0.1:`port` inside
/// namespace `ns`; an error says what went wrong (connection, rcode).
pub fn resolve_a(ns: &str, port: u16, name: &str) -> Result<Vec<Ipv4Addr>, String> {
    let path = format!("/var/run/netns/{ns}");
    let query = query_a(0x4d48, name);
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("setns {path}: {e}"))?;
        let mut s = TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_secs(5),
        )
        .map_err(|e| format!("connect: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        let mut framed = (query.len() as u16).to_be_bytes().to_vec();
        framed.extend(&query);
        s.write_all(&framed).map_err(|e| format!("send: {e}"))?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len).map_err(|e| format!("read: {e}"))?;
        let mut reply = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut reply).map_err(|e| format!("read: {e}"))?;
        answers_a(&reply)
    })
    .join()
    .map_err(|_| "the query's thread panicked".to_string())?
}

/// A recursive query for `name`'s A records.
fn query_a(id: u16, name: &str) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend([0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend(label.as_bytes());
    }
    q.extend([0, 0, 1, 0, 1]);
    q
}

/// The A records in a reply's answer section.
fn answers_a(r: &[u8]) -> Result<Vec<Ipv4Addr>, String> {
    let short = || format!("reply too short ({} bytes)", r.len());
    let header = r.get(..12).ok_or_else(short)?;
    let rcode = header[3] & 0x0f;
    if rcode != 0 {
        return Err(format!("rcode {rcode}"));
    }
    let qd = u16::from_be_bytes([header[4], header[5]]);
    let an = u16::from_be_bytes([header[6], header[7]]);
    let mut at = 12;
    for _ in 0..qd {
        at = skip_name(r, at).ok_or_else(short)? + 4;
    }
    let mut out = Vec::new();
    for _ in 0..an {
        at = skip_name(r, at).ok_or_else(short)?;
        let rr = r.get(at..at + 10).ok_or_else(short)?;
        let (kind, len) = (
            u16::from_be_bytes([rr[0], rr[1]]),
            u16::from_be_bytes([rr[8], rr[9]]) as usize,
        );
        let data = r.get(at + 10..at + 10 + len).ok_or_else(short)?;
        if kind == 1 && len == 4 {
            out.push(Ipv4Addr::new(data[0], data[1], data[2], data[3]));
        }
        at += 10 + len;
    }
    Ok(out)
}

/// The offset after the name at `at` (labels, ending in a zero or a
/// compression pointer).
fn skip_name(r: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *r.get(at)?;
        match len {
            0 => return Some(at + 1),
            l if l & 0xc0 == 0xc0 => return Some(at + 2),
            l => at += 1 + l as usize,
        }
    }
}
