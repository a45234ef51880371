//! An established RMCP+ session: outgoing session sequence numbers and
//! request sequence numbers, incoming replay window, and the match of each
//! reply to its request. Pure: IVs come from the caller, packets are bytes.

use super::crypto::{CipherSuite, SessionKeys};
use super::error::IpmiError;
use super::wire::{self, Response, Security, payload};

/// How far behind the newest inbound sequence number a packet may be.
const REPLAY_WINDOW: u32 = 32;

/// A request in flight, to match its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    pub netfn: u8,
    pub cmd: u8,
    pub rq_seq: u8,
}

pub struct Session {
    suite: CipherSuite,
    keys: SessionKeys,
    /// The BMC's session ID: what we put in our packets.
    managed_sid: u32,
    /// Our session ID: what the BMC puts in its packets.
    console_sid: u32,
    out_seq: u32,
    rq_seq: u8,
    in_highest: u32,
    /// Bit i set: sequence number `in_highest - i` was seen.
    in_seen: u64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("suite", &self.suite)
            .field("managed_sid", &format_args!("{:#010x}", self.managed_sid))
            .field("out_seq", &self.out_seq)
            .finish_non_exhaustive()
    }
}

impl Session {
    pub fn new(
        suite: CipherSuite,
        keys: SessionKeys,
        managed_sid: u32,
        console_sid: u32,
    ) -> Session {
        Session {
            suite,
            keys,
            managed_sid,
            console_sid,
            out_seq: 0,
            rq_seq: 0,
            in_highest: 0,
            in_seen: 0,
        }
    }

    pub fn suite(&self) -> CipherSuite {
        self.suite
    }

    pub fn managed_sid(&self) -> u32 {
        self.managed_sid
    }

    fn next_out_seq(&mut self) -> u32 {
        self.out_seq = self.out_seq.wrapping_add(1);
        if self.out_seq == 0 {
            self.out_seq = 1;
        }
        self.out_seq
    }

    /// A new request with the next request sequence number.
    pub fn request(
        &mut self,
        netfn: u8,
        cmd: u8,
        data: &[u8],
        iv: &[u8; 16],
    ) -> Result<(Vec<u8>, Pending), IpmiError> {
        self.rq_seq = (self.rq_seq + 1) & 0x3f;
        let pending = Pending {
            netfn,
            cmd,
            rq_seq: self.rq_seq,
        };
        let pkt = self.retransmit(&pending, data, iv)?;
        Ok((pkt, pending))
    }

    /// The same request again (same request sequence number, so the BMC can
    /// recognise a duplicate), in a packet with a fresh session sequence.
    pub fn retransmit(
        &mut self,
        p: &Pending,
        data: &[u8],
        iv: &[u8; 16],
    ) -> Result<Vec<u8>, IpmiError> {
        let msg = wire::encode_request(p.netfn, p.cmd, p.rq_seq, data);
        let seq = self.next_out_seq();
        let sec = Security {
            suite: self.suite,
            keys: &self.keys,
        };
        wire::encode_v2(payload::IPMI, self.managed_sid, seq, &msg, Some((&sec, iv)))
    }

    /// Decode a datagram as the reply to `p`. Stray packets (another
    /// request's reply, a replay) give errors for which
    /// [`IpmiError::is_stray`] is true.
    pub fn response(&mut self, data: &[u8], p: &Pending) -> Result<Response, IpmiError> {
        let sec = Security {
            suite: self.suite,
            keys: &self.keys,
        };
        let pkt = wire::decode(data, Some(&sec))?;
        if pkt.payload_type != payload::IPMI {
            return Err(IpmiError::UnexpectedPayload {
                expected: payload::IPMI,
                got: pkt.payload_type,
            });
        }
        if pkt.session_id != self.console_sid {
            return Err(IpmiError::WrongSession {
                expected: self.console_sid,
                got: pkt.session_id,
            });
        }
        self.accept_seq(pkt.seq)?;
        let r = wire::decode_response(&pkt.payload)?;
        wire::check_response(&r, p.netfn, p.cmd, p.rq_seq)?;
        Ok(r)
    }

    /// Sliding-window replay check on the BMC's session sequence number.
    fn accept_seq(&mut self, seq: u32) -> Result<(), IpmiError> {
        if seq == 0 {
            return Err(IpmiError::Replay { seq });
        }
        if seq > self.in_highest {
            let shift = seq - self.in_highest;
            self.in_seen = if shift >= 64 {
                0
            } else {
                self.in_seen << shift
            };
            self.in_seen |= 1;
            self.in_highest = seq;
            return Ok(());
        }
        let back = self.in_highest - seq;
        if back >= REPLAY_WINDOW || self.in_seen & (1u64 << back) != 0 {
            return Err(IpmiError::Replay { seq });
        }
        self.in_seen |= 1u64 << back;
        Ok(())
    }
}
