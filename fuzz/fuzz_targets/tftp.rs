//! Any request datagram is decoded and answered (a session, an ERROR, or
//! a counted drop), never a panic; and any sequence of datagrams and
//! timer ticks fed to a transfer session keeps it consistent.
//!
//! Input: byte 0 is the request's length, then the request, then chunks
//! of `[kind, len, bytes...]`: kind 0 a datagram from the client, 1 a
//! file read of `len` bytes, 2 a timer tick.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use metalherd::tftp::packet::Packet;
use metalherd::tftp::refuse::refusal;
use metalherd::tftp::session::{Limits, Session};

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else { return };
    let n = usize::from(n).min(rest.len());
    let (req, mut rest) = rest.split_at(n);
    let decoded = Packet::decode(req);
    let _ = refusal(&decoded);
    let Ok(Packet::Rrq(req)) = decoded else { return };
    let limits = Limits::default();
    let mut now = Instant::now();
    let mut out = Vec::new();
    let size = rest.first().map(|&b| u64::from(b) * 700);
    let mut s = Session::new(&req, size, &limits, now, &mut out);
    while let [kind, len, tail @ ..] = rest {
        let ticks = u64::from(*len);
        let len = usize::from(*len).min(tail.len());
        let (chunk, tail) = tail.split_at(len);
        out.clear();
        match kind % 3 {
            0 => {
                let _ = s.on_packet(now, chunk, &mut out);
            }
            1 => s.on_read(now, chunk, &mut out),
            _ => {
                now += Duration::from_millis(ticks * 50);
                s.on_timer(now, &mut out);
            }
        }
        if s.is_done() {
            break;
        }
        rest = tail;
    }
    let _ = s.bytes_sent();
});
