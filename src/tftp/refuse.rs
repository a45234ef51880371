//! What the request port answers to a datagram it will not serve, and how
//! often. Pure: decided from the datagram's decode result and `now`; no
//! sockets here.
//!
//! - A request the server cannot serve (malformed name, a mode other than
//!   netascii/octet, malformed options) is answered with an ERROR packet
//!   (RFC 1350 §5: code 4 "illegal TFTP operation"; RFC 2347: code 8 for
//!   option problems), so the client stops at once instead of waiting out
//!   its retransmission timeouts.
//! - Any other packet on the request port (DATA, ACK, OACK, an unknown
//!   opcode) gets code 4 too. An ERROR packet is never answered (RFC 1350:
//!   errors are not acknowledged, and two servers answering each other's
//!   errors would loop), nor is a datagram too short to carry an opcode.
//! - ERROR replies go to addresses nobody verified, so they are
//!   rate-limited by a token bucket shared by every refusal of the server.
//!   A refusal over the budget is not answered: the client retransmits its
//!   request and is answered once the bucket refills.

use std::time::Instant;

use super::packet::{Packet, PacketError, code};

/// The ERROR to answer a datagram on the request port with, if any.
/// `Ok(Rrq | Wrq)` is a request to serve and gets `None` here.
pub fn refusal(decoded: &Result<Packet, PacketError>) -> Option<(u16, String)> {
    match decoded {
        Ok(Packet::Rrq(_) | Packet::Wrq(_) | Packet::Error { .. }) => None,
        Ok(Packet::Data { .. } | Packet::Ack { .. } | Packet::Oack { .. }) => Some((
            code::ILLEGAL_OPERATION,
            "only read requests are accepted on this port".into(),
        )),
        Err(PacketError::Truncated { len }) if *len < 2 => None,
        Err(PacketError::BadMode) => Some((
            code::ILLEGAL_OPERATION,
            "unsupported transfer mode (octet or netascii)".into(),
        )),
        Err(e @ (PacketError::OddOptions | PacketError::MalformedOption)) => {
            Some((code::OPTION_REFUSED, e.to_string()))
        }
        Err(e) => Some((code::ILLEGAL_OPERATION, format!("malformed request: {e}"))),
    }
}

/// A token bucket: `rate` replies per second on average, bursts up to
/// `burst`.
#[derive(Debug)]
pub struct ReplyBudget {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl ReplyBudget {
    /// A full bucket. With `rate` 0 only the first `burst` replies go out;
    /// with `burst` 0 none do.
    pub fn new(rate: u32, burst: u32, now: Instant) -> ReplyBudget {
        ReplyBudget {
            rate: f64::from(rate),
            burst: f64::from(burst),
            tokens: f64::from(burst),
            at: now,
        }
    }

    /// Take one reply from the budget; `false` when it is spent.
    pub fn allow(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at);
        self.at = now;
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn answer(bytes: &[u8]) -> Option<u16> {
        refusal(&Packet::decode(bytes)).map(|(c, _)| c)
    }

    #[test]
    fn every_unservable_request_gets_an_error() {
        // Malformed names: unterminated, not UTF-8, empty.
        assert_eq!(answer(b"\x00\x01file"), Some(4));
        assert_eq!(answer(b"\x00\x01\xff\xfe\x00octet\x00"), Some(4));
        assert_eq!(answer(b"\x00\x01\x00octet\x00"), Some(4));
        assert_eq!(answer(b"\x00\x02\x00octet\x00"), Some(4));
        // Modes other than netascii/octet (mail is obsolete).
        assert_eq!(answer(b"\x00\x01f\x00mail\x00"), Some(4));
        assert_eq!(answer(b"\x00\x01f\x00binary\x00"), Some(4));
        // Malformed options: RFC 2347's code 8.
        assert_eq!(answer(b"\x00\x01f\x00octet\x00blksize\x00"), Some(8));
        assert_eq!(answer(b"\x00\x01f\x00octet\x00blksize\x001468"), Some(8));
        assert_eq!(answer(b"\x00\x01f\x00octet\x00\xff\x00\x31\x00"), Some(8));
        // Not a request at all.
        assert_eq!(answer(b"\x00\x09hello"), Some(4));
        assert_eq!(answer(b"\x00\x04\x00\x01"), Some(4));
        assert_eq!(answer(b"\x00\x03\x00\x01data"), Some(4));
        assert_eq!(answer(b"\x00\x04\x00"), Some(4));
    }

    #[test]
    fn errors_and_non_tftp_crumbs_are_not_answered() {
        assert_eq!(answer(b"\x00\x05\x00\x00oops\x00"), None);
        assert_eq!(answer(b""), None);
        assert_eq!(answer(b"\x00"), None);
        // Requests to serve are not refused here.
        assert_eq!(answer(b"\x00\x01f\x00octet\x00"), None);
        assert_eq!(
            answer(b"\x00\x01f\x00NetASCII\x00blksize\x001468\x00"),
            None
        );
    }

    #[test]
    fn the_budget_allows_a_burst_then_its_rate() {
        let t0 = Instant::now();
        let mut b = ReplyBudget::new(10, 3, t0);
        assert!(b.allow(t0));
        assert!(b.allow(t0));
        assert!(b.allow(t0));
        assert!(!b.allow(t0));
        assert!(!b.allow(t0 + Duration::from_millis(50)));
        assert!(b.allow(t0 + Duration::from_millis(100)));
        // A long quiet spell refills to the burst, not beyond.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert!(b.allow(later));
        }
        assert!(!b.allow(later));
        let mut none = ReplyBudget::new(0, 0, t0);
        assert!(!none.allow(t0 + Duration::from_secs(5)));
    }
}
