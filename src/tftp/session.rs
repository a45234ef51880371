//! One read transfer as a pure state machine: fed the client's packets, the
//! file's bytes and timer ticks (each with `now`), it answers with
//! [`Action`]s for the driver to carry out. Owns option negotiation
//! (RFC 2347/2348/2349/7440), windowing, retransmission with backoff and
//! the end of a transfer. No sockets, no files, no clocks here.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::packet::{self, Packet, Request};

/// Smallest and largest `blksize` values RFC 2348 allows.
pub const MIN_BLKSIZE: u16 = 8;
pub const MAX_BLKSIZE: u16 = 65464;
pub const DEFAULT_BLKSIZE: u16 = 512;

/// Limits and timing a session runs with (from the server's config).
#[derive(Clone, Debug)]
pub struct Limits {
    /// Retransmission timeout when the client does not ask for one.
    pub timeout: Duration,
    /// Ceiling for the timeout after backoff.
    pub max_timeout: Duration,
    /// Retransmissions without progress before the client counts as gone.
    pub max_retries: u32,
    pub max_blksize: u16,
    pub max_windowsize: u16,
    /// Largest `timeout` option (RFC 2349, seconds) acknowledged; a client
    /// asking more is not acknowledged and runs on the server's timeout,
    /// so no client can hold a transfer slot for minutes per retry.
    pub max_client_timeout: u64,
}

/// Default of [`Limits::max_client_timeout`].
pub const MAX_CLIENT_TIMEOUT: u64 = 10;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(1),
            max_timeout: Duration::from_secs(8),
            max_retries: 5,
            max_blksize: MAX_BLKSIZE,
            max_windowsize: 64,
            max_client_timeout: MAX_CLIENT_TIMEOUT,
        }
    }
}

/// What was agreed with the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    pub blksize: u16,
    pub windowsize: u16,
    pub timeout: Duration,
    /// Options to acknowledge in an OACK (empty: no OACK, start with DATA 1).
    pub oack: Vec<(String, String)>,
}

/// Decide the options of a request (RFC 2347: options the server does not
/// know or cannot honour are left out of the OACK, never an error).
pub fn negotiate(req: &Request, size: Option<u64>, limits: &Limits) -> Negotiated {
    let mut n = Negotiated {
        blksize: DEFAULT_BLKSIZE,
        windowsize: 1,
        timeout: limits.timeout,
        oack: Vec::new(),
    };
    let mut seen: Vec<String> = Vec::new();
    for (name, value) in &req.options {
        let key = name.to_ascii_lowercase();
        if seen.contains(&key) {
            continue;
        }
        seen.push(key.clone());
        let num = value.trim().parse::<u64>().ok();
        let accepted = match (key.as_str(), num) {
            ("blksize", Some(v)) if v >= u64::from(MIN_BLKSIZE) => {
                n.blksize = v.min(u64::from(
                    limits.max_blksize.clamp(MIN_BLKSIZE, MAX_BLKSIZE),
                )) as u16;
                Some(n.blksize.to_string())
            }
            ("windowsize", Some(v)) if v >= 1 => {
                n.windowsize = v.min(u64::from(limits.max_windowsize.max(1))) as u16;
                Some(n.windowsize.to_string())
            }
            ("timeout", Some(v)) if (1..=limits.max_client_timeout.min(255)).contains(&v) => {
                n.timeout = Duration::from_secs(v);
                Some(v.to_string())
            }
            // curl (7.88) rejects an OACK with `tsize 0` as invalid, so an
            // empty file's size is left out; the client learns it anyway.
            ("tsize", Some(_)) => size.filter(|&s| s > 0).map(|s| s.to_string()),
            _ => None,
        };
        if let Some(v) = accepted {
            n.oack.push((key, v));
        }
    }
    n
}

/// What the driver must do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send these bytes to the client.
    Send(Bytes),
    /// Read the next `len` bytes of the file (fewer only at its end) and
    /// hand them to [`Session::on_read`]. Always the last action of a batch.
    Read { len: usize },
    /// Call [`Session::on_timer`] at this instant (replaces any earlier one).
    Arm(Instant),
    /// The transfer is over; nothing more will be asked.
    Finish(Outcome),
}

/// How a transfer ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The last block was acknowledged.
    Complete { bytes: u64 },
    /// The client sent an ERROR packet (UEFI's tsize probe ends this way).
    ClientError { code: u16, message: String },
    /// No progress after the configured number of retransmissions.
    TimedOut,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// OACK sent, waiting for ACK 0.
    AwaitOackAck,
    /// Sending DATA blocks.
    Sending,
    Done,
}

/// Counters a session keeps for the driver's metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub retransmissions: u64,
    pub duplicate_acks: u64,
    pub unexpected_packets: u64,
}

pub struct Session {
    state: State,
    neg: Negotiated,
    limits: Limits,
    oack: Option<Bytes>,
    /// Last block the client acknowledged (absolute, not wrapped).
    acked: u64,
    /// Encoded DATA packets for blocks `acked+1 ..= acked+window.len()`,
    /// each already sent at least once.
    window: std::collections::VecDeque<Bytes>,
    /// The last block (shorter than blksize) has been read.
    eof: bool,
    read_pending: bool,
    bytes_read: u64,
    retries: u32,
    timeout: Duration,
    deadline: Option<Instant>,
    pub stats: Stats,
}

impl Session {
    /// Start a transfer for `req` of a file of `size` bytes (if known).
    pub fn new(
        req: &Request,
        size: Option<u64>,
        limits: &Limits,
        now: Instant,
        out: &mut Vec<Action>,
    ) -> Session {
        let neg = negotiate(req, size, limits);
        let mut s = Session {
            state: State::Sending,
            timeout: neg.timeout,
            oack: None,
            neg,
            limits: limits.clone(),
            acked: 0,
            window: Default::default(),
            eof: false,
            read_pending: false,
            bytes_read: 0,
            retries: 0,
            deadline: None,
            stats: Stats::default(),
        };
        if s.neg.oack.is_empty() {
            s.fill(now, out);
        } else {
            let oack = Packet::Oack {
                options: s.neg.oack.clone(),
            }
            .encode();
            s.oack = Some(oack.clone());
            s.state = State::AwaitOackAck;
            out.push(Action::Send(oack));
            s.arm(now, out);
        }
        s
    }

    pub fn negotiated(&self) -> &Negotiated {
        &self.neg
    }

    /// File bytes sent so far (first transmissions only).
    pub fn bytes_sent(&self) -> u64 {
        self.bytes_read
    }

    /// When the session wants [`Session::on_timer`] called (the last
    /// [`Action::Arm`]); `None` once done.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// A datagram arrived from the client (already filtered by its TID).
    /// Returns the decode error for a malformed one, which changes nothing.
    pub fn on_packet(
        &mut self,
        now: Instant,
        bytes: &[u8],
        out: &mut Vec<Action>,
    ) -> Result<(), packet::PacketError> {
        let pkt = Packet::decode(bytes)?;
        match (self.state, pkt) {
            (State::Done, _) => {}
            (_, Packet::Error { code, message }) => {
                self.finish(Outcome::ClientError { code, message }, out);
            }
            (State::AwaitOackAck, Packet::Ack { block: 0 }) => {
                self.state = State::Sending;
                self.retries = 0;
                self.timeout = self.neg.timeout;
                self.fill(now, out);
            }
            (State::Sending, Packet::Ack { block }) => self.on_ack(now, block, out),
            (_, Packet::Ack { .. }) => self.stats.duplicate_acks += 1,
            _ => self.stats.unexpected_packets += 1,
        }
        Ok(())
    }

    fn on_ack(&mut self, now: Instant, block: u16, out: &mut Vec<Action>) {
        // Map the 16-bit block number onto the outstanding window (block
        // numbers wrap to 0 after 65535, as curl, atftp and tftpd-hpa do).
        let delta = u64::from(block.wrapping_sub(self.acked as u16));
        if delta == 0 || delta > self.window.len() as u64 {
            // A duplicate or stale ACK: never answer it with data, or each
            // duplicate doubles the traffic (sorcerer's apprentice). The
            // retransmission timer recovers real losses.
            self.stats.duplicate_acks += 1;
            return;
        }
        self.acked += delta;
        self.window.drain(..delta as usize);
        self.retries = 0;
        self.timeout = self.neg.timeout;
        if self.eof && self.window.is_empty() {
            self.finish(
                Outcome::Complete {
                    bytes: self.bytes_read,
                },
                out,
            );
            return;
        }
        if !self.window.is_empty() {
            // RFC 7440: an ACK inside the window means the client lost the
            // block after it; send the rest of the window again.
            self.stats.retransmissions += self.window.len() as u64;
            out.extend(self.window.iter().cloned().map(Action::Send));
        }
        self.fill(now, out);
    }

    /// The bytes of the next block the session asked for with [`Action::Read`].
    pub fn on_read(&mut self, now: Instant, data: &[u8], out: &mut Vec<Action>) {
        if !self.read_pending || self.state != State::Sending {
            return;
        }
        self.read_pending = false;
        let data = data.get(..usize::from(self.neg.blksize)).unwrap_or(data);
        let block = self.acked + self.window.len() as u64 + 1;
        let pkt = packet::encode_data(block as u16, data);
        self.bytes_read += data.len() as u64;
        if data.len() < usize::from(self.neg.blksize) {
            self.eof = true;
        }
        self.window.push_back(pkt.clone());
        out.push(Action::Send(pkt));
        self.fill(now, out);
    }

    /// The timer armed with [`Action::Arm`] fired.
    pub fn on_timer(&mut self, now: Instant, out: &mut Vec<Action>) {
        // Ignore early ticks, ticks after the end, and ticks while a read is
        // outstanding (the driver finishes reads before it waits on timers).
        match self.deadline {
            Some(d) if now >= d && self.state != State::Done && !self.read_pending => {}
            _ => return,
        }
        if self.retries >= self.limits.max_retries {
            self.finish(Outcome::TimedOut, out);
            return;
        }
        self.retries += 1;
        self.timeout = (self.timeout * 2).min(self.limits.max_timeout.max(self.neg.timeout));
        match self.state {
            State::AwaitOackAck => {
                if let Some(o) = &self.oack {
                    self.stats.retransmissions += 1;
                    out.push(Action::Send(o.clone()));
                }
            }
            State::Sending => {
                self.stats.retransmissions += self.window.len() as u64;
                out.extend(self.window.iter().cloned().map(Action::Send));
            }
            State::Done => {}
        }
        self.arm(now, out);
    }

    /// Read (and send) blocks until the window is full or the file ends.
    fn fill(&mut self, now: Instant, out: &mut Vec<Action>) {
        if !self.eof && self.window.len() < usize::from(self.neg.windowsize) {
            self.read_pending = true;
            // Arm before asking for the read so the batch ends with Read.
            if !self.window.is_empty() {
                self.arm(now, out);
            }
            out.push(Action::Read {
                len: usize::from(self.neg.blksize),
            });
        } else {
            self.arm(now, out);
        }
    }

    fn arm(&mut self, now: Instant, out: &mut Vec<Action>) {
        let d = now + self.timeout;
        self.deadline = Some(d);
        out.push(Action::Arm(d));
    }

    fn finish(&mut self, outcome: Outcome, out: &mut Vec<Action>) {
        self.state = State::Done;
        self.deadline = None;
        self.read_pending = false;
        out.push(Action::Finish(outcome));
    }
}

#[cfg(test)]
mod tests;
