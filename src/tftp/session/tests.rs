//! Unit tests of the transfer state machine, driven by a tiny in-test
//! "driver" that reads from a byte slice and plays the client's packets.

use super::*;
use crate::tftp::packet::{Mode, Packet, Request};

fn req(opts: &[(&str, &str)]) -> Request {
    Request {
        filename: "f".into(),
        mode: Mode::Octet,
        options: opts
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

/// Plays the driver: performs Reads from `file`, collects sent packets.
struct Harness {
    s: Session,
    file: Vec<u8>,
    pos: usize,
    now: Instant,
    sent: Vec<Packet>,
    deadline: Option<Instant>,
    finished: Option<Outcome>,
}

impl Harness {
    fn new(file: Vec<u8>, opts: &[(&str, &str)], limits: Limits) -> Harness {
        let now = Instant::now();
        let mut out = Vec::new();
        let s = Session::new(&req(opts), Some(file.len() as u64), &limits, now, &mut out);
        let mut h = Harness {
            s,
            file,
            pos: 0,
            now,
            sent: Vec::new(),
            deadline: None,
            finished: None,
        };
        h.run(out);
        h
    }

    fn run(&mut self, mut out: Vec<Action>) {
        loop {
            let batch = std::mem::take(&mut out);
            if batch.is_empty() {
                return;
            }
            for a in batch {
                match a {
                    Action::Send(b) => self.sent.push(Packet::decode(&b).unwrap()),
                    Action::Arm(d) => self.deadline = Some(d),
                    Action::Finish(o) => {
                        assert!(self.finished.is_none(), "finished twice");
                        self.finished = Some(o)
                    }
                    Action::Read { len } => {
                        let end = (self.pos + len).min(self.file.len());
                        let chunk = self.file[self.pos..end].to_vec();
                        self.pos = end;
                        self.s.on_read(self.now, &chunk, &mut out);
                    }
                }
            }
        }
    }

    fn recv(&mut self, p: Packet) {
        let mut out = Vec::new();
        self.s.on_packet(self.now, &p.encode(), &mut out).unwrap();
        self.run(out);
    }

    fn ack(&mut self, block: u16) {
        self.recv(Packet::Ack { block });
    }

    fn tick(&mut self) {
        self.now = self.deadline.expect("armed");
        let mut out = Vec::new();
        self.s.on_timer(self.now, &mut out);
        self.run(out);
    }

    fn take(&mut self) -> Vec<Packet> {
        std::mem::take(&mut self.sent)
    }
}

fn data_blocks(ps: &[Packet]) -> Vec<u16> {
    ps.iter()
        .map(|p| match p {
            Packet::Data { block, .. } => *block,
            other => panic!("expected DATA, got {other:?}"),
        })
        .collect()
}

#[test]
fn plain_rrq_sends_blocks_lock_step_and_completes() {
    let file: Vec<u8> = (0..1200u32).map(|i| i as u8).collect();
    let mut h = Harness::new(file.clone(), &[], Limits::default());
    let mut got = Vec::new();
    for b in 1..=3u16 {
        let sent = h.take();
        assert_eq!(data_blocks(&sent), vec![b]);
        if let Packet::Data { data, .. } = &sent[0] {
            got.extend_from_slice(data);
        }
        h.ack(b);
    }
    assert_eq!(got, file);
    assert_eq!(h.finished, Some(Outcome::Complete { bytes: 1200 }));
    assert!(h.take().is_empty());
}

#[test]
fn exact_multiple_of_blksize_ends_with_an_empty_block() {
    let mut h = Harness::new(vec![7; 1024], &[], Limits::default());
    for b in 1..=3u16 {
        let sent = h.take();
        assert_eq!(data_blocks(&sent), vec![b]);
        h.ack(b);
    }
    assert_eq!(h.finished, Some(Outcome::Complete { bytes: 1024 }));
}

#[test]
fn options_are_negotiated_in_an_oack() {
    let h = Harness::new(
        vec![0; 10_000],
        &[
            ("BLKSIZE", "1468"),
            ("tsize", "0"),
            ("windowsize", "8"),
            ("timeout", "3"),
            ("unknown", "x"),
        ],
        Limits::default(),
    );
    assert_eq!(
        h.sent,
        vec![Packet::Oack {
            options: vec![
                ("blksize".into(), "1468".into()),
                ("tsize".into(), "10000".into()),
                ("windowsize".into(), "8".into()),
                ("timeout".into(), "3".into()),
            ]
        }]
    );
    assert_eq!(h.s.negotiated().timeout, Duration::from_secs(3));
}

#[test]
fn a_timeout_above_what_the_server_wants_is_not_acknowledged() {
    let limits = Limits {
        max_client_timeout: 5,
        ..Limits::default()
    };
    for (asked, granted) in [("5", true), ("6", false), ("255", false), ("1", true)] {
        let n = negotiate(&req(&[("timeout", asked)]), None, &limits);
        let acked = n.oack.iter().any(|(k, _)| k == "timeout");
        assert_eq!(acked, granted, "timeout {asked}");
        let want = if granted {
            Duration::from_secs(asked.parse().unwrap())
        } else {
            limits.timeout
        };
        assert_eq!(n.timeout, want, "timeout {asked}");
    }
    // By default a client gets at most 10 s.
    let n = negotiate(&req(&[("timeout", "255")]), None, &Limits::default());
    assert!(n.oack.is_empty());
    assert_eq!(n.timeout, Limits::default().timeout);
}

#[test]
fn out_of_range_options_are_clamped_or_ignored() {
    let limits = Limits {
        max_blksize: 1468,
        max_windowsize: 4,
        ..Limits::default()
    };
    let n = negotiate(
        &req(&[
            ("blksize", "65464"),
            ("windowsize", "100"),
            ("timeout", "0"),
        ]),
        None,
        &limits,
    );
    assert_eq!(n.blksize, 1468);
    assert_eq!(n.windowsize, 4);
    assert_eq!(n.timeout, limits.timeout);
    assert_eq!(
        n.oack,
        vec![
            ("blksize".into(), "1468".into()),
            ("windowsize".into(), "4".into())
        ]
    );
    let n = negotiate(&req(&[("blksize", "7"), ("tsize", "0")]), None, &limits);
    assert!(n.oack.is_empty(), "{n:?}");
}

#[test]
fn windowed_transfer_sends_whole_windows() {
    let file = vec![1u8; 512 * 10 + 5];
    let mut h = Harness::new(file, &[("windowsize", "4")], Limits::default());
    assert!(matches!(h.take()[..], [Packet::Oack { .. }]));
    h.ack(0);
    assert_eq!(data_blocks(&h.take()), vec![1, 2, 3, 4]);
    h.ack(4);
    assert_eq!(data_blocks(&h.take()), vec![5, 6, 7, 8]);
    h.ack(8);
    assert_eq!(data_blocks(&h.take()), vec![9, 10, 11]);
    h.ack(11);
    assert_eq!(h.finished, Some(Outcome::Complete { bytes: 5125 }));
}

#[test]
fn ack_inside_the_window_resends_from_the_gap() {
    let mut h = Harness::new(
        vec![1u8; 512 * 10],
        &[("windowsize", "4")],
        Limits::default(),
    );
    h.take();
    h.ack(0);
    assert_eq!(data_blocks(&h.take()), vec![1, 2, 3, 4]);
    h.ack(2); // client lost block 3
    assert_eq!(data_blocks(&h.take()), vec![3, 4, 5, 6]);
    assert_eq!(h.s.stats.retransmissions, 2);
}

#[test]
fn duplicate_acks_never_trigger_sends() {
    let mut h = Harness::new(vec![1u8; 512 * 5], &[], Limits::default());
    assert_eq!(data_blocks(&h.take()), vec![1]);
    h.ack(1);
    assert_eq!(data_blocks(&h.take()), vec![2]);
    for _ in 0..5 {
        h.ack(1);
        h.ack(0);
        h.ack(9); // from the future: ignored too
    }
    assert!(h.take().is_empty());
    assert_eq!(h.s.stats.duplicate_acks, 15);
    h.ack(2);
    assert_eq!(data_blocks(&h.take()), vec![3]);
}

#[test]
fn timeouts_retransmit_with_backoff_then_give_up() {
    let limits = Limits {
        timeout: Duration::from_secs(1),
        max_timeout: Duration::from_secs(4),
        max_retries: 3,
        ..Limits::default()
    };
    let mut h = Harness::new(vec![1u8; 2000], &[], limits);
    assert_eq!(data_blocks(&h.take()), vec![1]);
    let start = h.now;
    let mut gaps = Vec::new();
    let mut last = start;
    for _ in 0..3 {
        h.tick();
        assert_eq!(data_blocks(&h.take()), vec![1]);
        gaps.push(h.now - last);
        last = h.now;
    }
    assert_eq!(
        gaps,
        vec![
            Duration::from_secs(1),
            Duration::from_secs(2),
            Duration::from_secs(4)
        ]
    );
    h.tick();
    assert_eq!(h.finished, Some(Outcome::TimedOut));
    assert!(h.take().is_empty());
    assert_eq!(h.s.stats.retransmissions, 3);
}

#[test]
fn progress_resets_the_backoff() {
    let mut h = Harness::new(vec![1u8; 2000], &[], Limits::default());
    h.take();
    h.tick();
    h.tick();
    h.take();
    let before = h.now;
    h.ack(1);
    assert_eq!(h.deadline, Some(before + Duration::from_secs(1)));
}

#[test]
fn oack_is_retransmitted_until_acked() {
    let mut h = Harness::new(vec![1u8; 100], &[("tsize", "0")], Limits::default());
    assert!(matches!(h.take()[..], [Packet::Oack { .. }]));
    h.tick();
    assert!(matches!(h.take()[..], [Packet::Oack { .. }]));
    h.ack(0);
    assert_eq!(data_blocks(&h.take()), vec![1]);
    h.ack(1);
    assert_eq!(h.finished, Some(Outcome::Complete { bytes: 100 }));
}

#[test]
fn client_error_after_oack_ends_the_transfer_at_once() {
    // UEFI firmware probes the size, then aborts with ERROR 8.
    let mut h = Harness::new(
        vec![1u8; 100_000],
        &[("tsize", "0"), ("blksize", "1468")],
        Limits::default(),
    );
    assert!(matches!(h.take()[..], [Packet::Oack { .. }]));
    h.recv(Packet::Error {
        code: 8,
        message: "tsize probe".into(),
    });
    assert_eq!(
        h.finished,
        Some(Outcome::ClientError {
            code: 8,
            message: "tsize probe".into()
        })
    );
    assert!(h.s.is_done());
    // Nothing happens afterwards, timers included.
    let mut out = Vec::new();
    h.s.on_timer(h.now + Duration::from_secs(60), &mut out);
    h.s.on_packet(h.now, &Packet::Ack { block: 0 }.encode(), &mut out)
        .unwrap();
    assert!(out.is_empty());
    assert!(h.take().is_empty());
}

#[test]
fn client_error_mid_transfer_ends_it() {
    let mut h = Harness::new(vec![1u8; 5000], &[], Limits::default());
    h.take();
    h.ack(1);
    h.recv(Packet::Error {
        code: 0,
        message: "bye".into(),
    });
    assert!(matches!(
        h.finished,
        Some(Outcome::ClientError { code: 0, .. })
    ));
}

#[test]
fn malformed_packets_change_nothing() {
    let mut h = Harness::new(vec![1u8; 5000], &[], Limits::default());
    h.take();
    let mut out = Vec::new();
    assert!(h.s.on_packet(h.now, b"\x00\x04\x00", &mut out).is_err());
    assert!(h.s.on_packet(h.now, b"", &mut out).is_err());
    assert!(out.is_empty());
    h.ack(1);
    assert_eq!(data_blocks(&h.take()), vec![2]);
}

#[test]
fn block_numbers_wrap_around_to_zero() {
    let blocks = 65_540usize;
    let file = vec![3u8; 8 * blocks + 1];
    let mut h = Harness::new(file, &[("blksize", "8")], Limits::default());
    h.take();
    h.ack(0);
    let mut n = 0u64;
    while h.finished.is_none() {
        let sent = h.take();
        let [Packet::Data { block, .. }] = sent[..] else {
            panic!("expected one DATA, got {sent:?}")
        };
        n += 1;
        assert_eq!(block, n as u16);
        h.ack(block);
    }
    assert_eq!(n, blocks as u64 + 1);
    assert_eq!(
        h.finished,
        Some(Outcome::Complete {
            bytes: 8 * blocks as u64 + 1
        })
    );
}

#[test]
fn empty_file_is_one_empty_block() {
    let mut h = Harness::new(Vec::new(), &[], Limits::default());
    let sent = h.take();
    assert_eq!(
        sent,
        vec![Packet::Data {
            block: 1,
            data: Bytes::new()
        }]
    );
    h.ack(1);
    assert_eq!(h.finished, Some(Outcome::Complete { bytes: 0 }));
}
