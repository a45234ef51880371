//! One TFTP read transfer as seen by a booting firmware, as a pure state
//! machine (no sockets, no clock): it builds the read request (blksize,
//! tsize and, if asked, windowsize), follows the server's OACK (falling
//! back to lock-step when the OACK leaves windowsize out, as RFC 7440
//! says, and to 512-byte blocks when the server answers with DATA 1),
//! acknowledges every `windowsize` blocks, checks every block byte for
//! byte against the original, retransmits on timeout and counts what
//! happened. The driver in `main.rs` feeds it datagrams and timer ticks.

use std::time::{Duration, Instant};

use metalherd::tftp::packet::{self, Mode, OP_DATA, Packet, Request, code};

/// What the client asks for and how patient it is.
#[derive(Clone, Debug)]
pub struct Params {
    pub file: String,
    pub blksize: u16,
    /// `None`: lock-step (no windowsize option sent).
    pub windowsize: Option<u16>,
    pub tsize: bool,
    pub timeout: Duration,
    /// Retransmissions without progress before the transfer fails.
    pub max_retries: u32,
}

/// Why a transfer failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    ServerError {
        code: u16,
        message: String,
    },
    TimedOut,
    /// A block differs from the original at this file offset.
    Mismatch {
        offset: u64,
    },
    /// The file ended at this length; the original is longer or shorter.
    Length {
        got: u64,
        want: u64,
    },
    /// The OACK carried an option not asked for, or a bad value.
    BadOack(String),
}

/// Counters one transfer keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub retransmissions: u64,
    pub duplicate_blocks: u64,
    pub out_of_order: u64,
    pub acks_sent: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Request sent, no answer yet.
    Requested,
    Receiving,
    Done,
}

pub struct Transfer<'a> {
    params: Params,
    /// The original file: every received block is compared with it.
    want: &'a [u8],
    state: State,
    blksize: usize,
    window: u16,
    /// Next block expected (absolute, from 1; the wire wraps at 65536).
    next: u64,
    /// Blocks received since the last ACK.
    since_ack: u16,
    /// A gap in this window was already answered with an ACK.
    gap_acked: bool,
    received: u64,
    /// The datagram to repeat on timeout (the request, then the last ACK).
    last: Vec<u8>,
    retries: u32,
    deadline: Instant,
    pub stats: Stats,
}

/// What the driver must do after feeding the transfer.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    Nothing,
    Send(Vec<u8>),
    /// Send this (the last ACK, or an ERROR), then the transfer is over.
    Finish(Option<Vec<u8>>, Result<u64, Failure>),
}

pub fn ack(block: u16) -> Vec<u8> {
    let mut b = packet::OP_ACK.to_be_bytes().to_vec();
    b.extend_from_slice(&block.to_be_bytes());
    b
}

impl<'a> Transfer<'a> {
    /// A transfer of `want` (the original bytes); returns it with the
    /// read request to send first.
    pub fn new(params: Params, want: &'a [u8], now: Instant) -> (Transfer<'a>, Vec<u8>) {
        let mut options = vec![("blksize".to_string(), params.blksize.to_string())];
        if params.tsize {
            options.push(("tsize".into(), "0".into()));
        }
        if let Some(w) = params.windowsize {
            options.push(("windowsize".into(), w.to_string()));
        }
        let rrq = Packet::Rrq(Request {
            filename: params.file.clone(),
            mode: Mode::Octet,
            options,
        })
        .encode()
        .to_vec();
        let t = Transfer {
            deadline: now + params.timeout,
            params,
            want,
            state: State::Requested,
            blksize: 512,
            window: 1,
            next: 1,
            since_ack: 0,
            gap_acked: false,
            received: 0,
            last: rrq.clone(),
            retries: 0,
            stats: Stats::default(),
        };
        (t, rrq)
    }

    /// When [`Transfer::on_timer`] is due.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Agreed block size and window (after the first answer).
    pub fn agreed(&self) -> (usize, u16) {
        (self.blksize, self.window)
    }

    fn progress(&mut self, now: Instant) {
        self.retries = 0;
        self.deadline = now + self.params.timeout;
    }

    fn fail(&mut self, f: Failure, send: Option<Vec<u8>>) -> Step {
        self.state = State::Done;
        Step::Finish(send, Err(f))
    }

    /// A datagram from the server's transfer id.
    pub fn on_datagram(&mut self, now: Instant, buf: &[u8]) -> Step {
        if self.state == State::Done {
            return Step::Nothing;
        }
        // DATA is the hot path: parse its header here, without copying.
        if buf.len() >= 4 && u16::from_be_bytes([buf[0], buf[1]]) == OP_DATA {
            let block = u16::from_be_bytes([buf[2], buf[3]]);
            return self.on_data(now, block, &buf[4..]);
        }
        match Packet::decode(buf) {
            Ok(Packet::Oack { options }) if self.state == State::Requested => {
                self.on_oack(now, &options)
            }
            Ok(Packet::Error { code, message }) => {
                self.fail(Failure::ServerError { code, message }, None)
            }
            // A repeated OACK (our ACK 0 was lost), or noise: ACK 0 again
            // only for the OACK.
            Ok(Packet::Oack { .. }) if self.next == 1 => {
                self.stats.duplicate_blocks += 1;
                Step::Send(self.last.clone())
            }
            _ => Step::Nothing,
        }
    }

    fn on_oack(&mut self, now: Instant, options: &[(String, String)]) -> Step {
        let mut window = 1;
        let mut blksize = 512;
        for (k, v) in options {
            let n = v.parse::<u64>().ok();
            match (k.to_ascii_lowercase().as_str(), n) {
                ("blksize", Some(b)) if (8..=u64::from(self.params.blksize)).contains(&b) => {
                    blksize = b as usize
                }
                ("windowsize", Some(w))
                    if self
                        .params
                        .windowsize
                        .is_some_and(|asked| (1..=u64::from(asked)).contains(&w)) =>
                {
                    window = w as u16
                }
                ("tsize", Some(s)) if self.params.tsize => {
                    if s != self.want.len() as u64 {
                        let e = packet::encode_error(code::OPTION_REFUSED, "wrong tsize").to_vec();
                        return self.fail(
                            Failure::Length {
                                got: s,
                                want: self.want.len() as u64,
                            },
                            Some(e),
                        );
                    }
                }
                _ => {
                    let e =
                        packet::encode_error(code::OPTION_REFUSED, "unexpected option").to_vec();
                    return self.fail(Failure::BadOack(format!("{k}={v}")), Some(e));
                }
            }
        }
        self.blksize = blksize;
        self.window = window;
        self.state = State::Receiving;
        self.progress(now);
        self.last = ack(0);
        self.stats.acks_sent += 1;
        Step::Send(self.last.clone())
    }

    fn on_data(&mut self, now: Instant, block: u16, data: &[u8]) -> Step {
        if self.state == State::Requested {
            // The server ignored every option: RFC 1350 defaults.
            self.state = State::Receiving;
            self.blksize = 512;
            self.window = 1;
        }
        if block == self.next as u16 {
            if data.len() > self.blksize {
                return self.fail(
                    Failure::BadOack(format!("block of {} bytes", data.len())),
                    None,
                );
            }
            let offset = self.received;
            let end = offset + data.len() as u64;
            let want = self
                .want
                .get(offset as usize..(end as usize).min(self.want.len()))
                .unwrap_or_default();
            if want != data {
                let e = packet::encode_error(code::NOT_DEFINED, "corrupt block").to_vec();
                return self.fail(Failure::Mismatch { offset }, Some(e));
            }
            self.received = end;
            self.next += 1;
            self.since_ack += 1;
            self.gap_acked = false;
            self.progress(now);
            if data.len() < self.blksize {
                self.state = State::Done;
                self.stats.acks_sent += 1;
                let result = if self.received == self.want.len() as u64 {
                    Ok(self.received)
                } else {
                    Err(Failure::Length {
                        got: self.received,
                        want: self.want.len() as u64,
                    })
                };
                return Step::Finish(Some(ack(block)), result);
            }
            if self.since_ack >= self.window {
                self.since_ack = 0;
                self.last = ack(block);
                self.stats.acks_sent += 1;
                return Step::Send(self.last.clone());
            }
            return Step::Nothing;
        }
        let behind = (self.next as u16).wrapping_sub(block);
        if behind != 0 && behind <= 0x8000 {
            // Seen already: the server timed out on our ACK. Answer once, at
            // the last block we have, so a resent window costs one ACK.
            self.stats.duplicate_blocks += 1;
            if behind == 1 {
                self.since_ack = 0;
                self.last = ack(block);
                self.stats.acks_sent += 1;
                return Step::Send(self.last.clone());
            }
            return Step::Nothing;
        }
        // A block ahead of the next one: something in between was lost.
        // RFC 7440: acknowledge the last block received in order, once.
        self.stats.out_of_order += 1;
        if self.gap_acked {
            return Step::Nothing;
        }
        self.gap_acked = true;
        self.since_ack = 0;
        self.last = ack((self.next - 1) as u16);
        self.stats.acks_sent += 1;
        Step::Send(self.last.clone())
    }

    /// The deadline passed (the driver may call early: then nothing).
    pub fn on_timer(&mut self, now: Instant) -> Step {
        if self.state == State::Done || now < self.deadline {
            return Step::Nothing;
        }
        if self.retries >= self.params.max_retries {
            return self.fail(Failure::TimedOut, None);
        }
        self.retries += 1;
        self.stats.retransmissions += 1;
        self.deadline = now + self.params.timeout;
        self.since_ack = 0;
        Step::Send(self.last.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(windowsize: Option<u16>) -> Params {
        Params {
            file: "f".into(),
            blksize: 8,
            windowsize,
            tsize: true,
            timeout: Duration::from_secs(1),
            max_retries: 2,
        }
    }

    fn oack(opts: &[(&str, &str)]) -> Vec<u8> {
        Packet::Oack {
            options: opts
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
        .encode()
        .to_vec()
    }

    fn data(block: u16, d: &[u8]) -> Vec<u8> {
        packet::encode_data(block, d).to_vec()
    }

    const FILE: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz"; // 36 bytes: 4 full blocks + 4

    #[test]
    fn request_carries_the_firmware_options() {
        let now = Instant::now();
        let (_, rrq) = Transfer::new(params(Some(4)), FILE, now);
        let Ok(Packet::Rrq(r)) = Packet::decode(&rrq) else {
            panic!()
        };
        assert_eq!(r.option("blksize"), Some("8"));
        assert_eq!(r.option("tsize"), Some("0"));
        assert_eq!(r.option("windowsize"), Some("4"));
        let (_, rrq) = Transfer::new(params(None), FILE, now);
        let Ok(Packet::Rrq(r)) = Packet::decode(&rrq) else {
            panic!()
        };
        assert_eq!(r.option("windowsize"), None);
    }

    #[test]
    fn windowed_transfer_acks_once_per_window() {
        let now = Instant::now();
        let (mut t, _) = Transfer::new(params(Some(4)), FILE, now);
        let s = t.on_datagram(
            now,
            &oack(&[("blksize", "8"), ("tsize", "36"), ("windowsize", "4")]),
        );
        assert_eq!(s, Step::Send(ack(0)));
        assert_eq!(t.agreed(), (8, 4));
        for b in 1..=3u16 {
            let off = (b as usize - 1) * 8;
            assert_eq!(
                t.on_datagram(now, &data(b, &FILE[off..off + 8])),
                Step::Nothing
            );
        }
        assert_eq!(
            t.on_datagram(now, &data(4, &FILE[24..32])),
            Step::Send(ack(4))
        );
        assert_eq!(
            t.on_datagram(now, &data(5, &FILE[32..])),
            Step::Finish(Some(ack(5)), Ok(36))
        );
        assert_eq!(t.stats.acks_sent, 3);
    }

    #[test]
    fn oack_without_windowsize_falls_back_to_lock_step() {
        // tftpd-hpa 5.2 leaves windowsize out of its OACK.
        let now = Instant::now();
        let (mut t, _) = Transfer::new(params(Some(8)), FILE, now);
        t.on_datagram(now, &oack(&[("blksize", "8"), ("tsize", "36")]));
        assert_eq!(t.agreed(), (8, 1));
        assert_eq!(t.on_datagram(now, &data(1, &FILE[..8])), Step::Send(ack(1)));
        assert_eq!(
            t.on_datagram(now, &data(2, &FILE[8..16])),
            Step::Send(ack(2))
        );
    }

    #[test]
    fn data_without_oack_means_rfc1350_defaults() {
        let now = Instant::now();
        let (mut t, _) = Transfer::new(params(Some(8)), FILE, now);
        assert_eq!(
            t.on_datagram(now, &data(1, FILE)),
            Step::Finish(Some(ack(1)), Ok(36))
        );
        assert_eq!(t.agreed(), (512, 1));
    }

    #[test]
    fn a_gap_is_acked_once_and_duplicates_reacked_at_the_window_end() {
        let now = Instant::now();
        let (mut t, _) = Transfer::new(params(Some(4)), FILE, now);
        t.on_datagram(now, &oack(&[("blksize", "8"), ("windowsize", "4")]));
        assert_eq!(t.on_datagram(now, &data(1, &FILE[..8])), Step::Nothing);
        // Block 2 lost.
        assert_eq!(
            t.on_datagram(now, &data(3, &FILE[16..24])),
            Step::Send(ack(1))
        );
        assert_eq!(t.on_datagram(now, &data(4, &FILE[24..32])), Step::Nothing);
        assert_eq!(t.stats.out_of_order, 2);
        // The server resends from block 2.
        assert_eq!(t.on_datagram(now, &data(2, &FILE[8..16])), Step::Nothing);
        // A stale copy of block 1 is ignored; of block 2 (the last) re-acked.
        assert_eq!(t.on_datagram(now, &data(1, &FILE[..8])), Step::Nothing);
        assert_eq!(
            t.on_datagram(now, &data(2, &FILE[8..16])),
            Step::Send(ack(2))
        );
        assert_eq!(t.stats.duplicate_blocks, 2);
    }

    #[test]
    fn timeouts_resend_the_last_packet_then_give_up() {
        let now = Instant::now();
        let (mut t, rrq) = Transfer::new(params(None), FILE, now);
        assert_eq!(t.on_timer(now), Step::Nothing, "early tick");
        let later = t.deadline();
        assert_eq!(t.on_timer(later), Step::Send(rrq));
        t.on_datagram(later, &oack(&[("blksize", "8")]));
        t.on_datagram(later, &data(1, &FILE[..8]));
        let d = t.deadline();
        assert_eq!(t.on_timer(d), Step::Send(ack(1)));
        let d = t.deadline();
        assert_eq!(t.on_timer(d), Step::Send(ack(1)));
        let d = t.deadline();
        assert_eq!(t.on_timer(d), Step::Finish(None, Err(Failure::TimedOut)));
        assert_eq!(t.stats.retransmissions, 3);
    }

    #[test]
    fn corrupt_data_wrong_tsize_and_server_errors_fail() {
        let now = Instant::now();
        let (mut t, _) = Transfer::new(params(None), FILE, now);
        t.on_datagram(now, &oack(&[("blksize", "8")]));
        assert!(matches!(
            t.on_datagram(now, &data(1, b"XXXXXXXX")),
            Step::Finish(Some(_), Err(Failure::Mismatch { offset: 0 }))
        ));
        let (mut t, _) = Transfer::new(params(None), FILE, now);
        assert!(matches!(
            t.on_datagram(now, &oack(&[("tsize", "35")])),
            Step::Finish(Some(_), Err(Failure::Length { got: 35, want: 36 }))
        ));
        let (mut t, _) = Transfer::new(params(None), FILE, now);
        assert!(matches!(
            t.on_datagram(now, &oack(&[("windowsize", "4")])),
            Step::Finish(Some(_), Err(Failure::BadOack(_)))
        ));
        let (mut t, _) = Transfer::new(params(None), FILE, now);
        let e = packet::encode_error(1, "file not found");
        assert_eq!(
            t.on_datagram(now, &e),
            Step::Finish(
                None,
                Err(Failure::ServerError {
                    code: 1,
                    message: "file not found".into()
                })
            )
        );
        // A file shorter than the original.
        let (mut t, _) = Transfer::new(params(None), FILE, now);
        t.on_datagram(now, &oack(&[("blksize", "8")]));
        assert!(matches!(
            t.on_datagram(now, &data(1, b"0123")),
            Step::Finish(Some(_), Err(Failure::Length { got: 4, want: 36 }))
        ));
    }

    #[test]
    fn block_numbers_wrap() {
        let big: Vec<u8> = (0..(65536 + 3) * 8 + 1).map(|i| (i % 251) as u8).collect();
        let now = Instant::now();
        let (mut t, _) = Transfer::new(
            Params {
                tsize: false,
                ..params(Some(16))
            },
            &big,
            now,
        );
        t.on_datagram(now, &oack(&[("blksize", "8"), ("windowsize", "16")]));
        let mut done = None;
        for (i, chunk) in big.chunks(8).enumerate() {
            match t.on_datagram(now, &data((i + 1) as u16, chunk)) {
                Step::Finish(_, r) => done = Some(r),
                Step::Send(_) | Step::Nothing => {}
            }
        }
        assert_eq!(done, Some(Ok(big.len() as u64)));
    }
}
