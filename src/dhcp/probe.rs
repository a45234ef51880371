//! Ping check before a dynamic offer, as ISC's DHCP server does: an ICMP
//! echo request to the address, and "in use" if an echo reply from it
//! comes back within the timeout. The policy decides what to probe
//! ([`super::policy::Probe`]); this is only the I/O.
//!
//! Why: a new leader (after a failover) starts with its own lease table;
//! addresses the previous leader leased are unknown to it until their
//! holders renew, so without a check it could hand one out twice.
//!
//! A raw ICMP socket per probe (CAP_NET_RAW; the Deployment grants it),
//! blocking reads with a deadline on the blocking pool, at most
//! [`MAX_IN_FLIGHT`] at once.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use socket2::{Domain, Protocol, Socket, Type};

/// Probes running at once; an offer beyond this is dropped (counted), and
/// the client's retransmission tries again.
pub const MAX_IN_FLIGHT: usize = 256;

/// Whether raw ICMP sockets can be opened here (checked once at start, so
/// a missing capability is an error then, not a silent pass later).
pub fn check_available() -> io::Result<()> {
    Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4)).map(|_| ())
}

/// Ping `ip` once; `Ok(true)` if it answered within `timeout`.
pub async fn in_use(ip: Ipv4Addr, timeout: Duration) -> io::Result<bool> {
    tokio::task::spawn_blocking(move || ping(ip, timeout))
        .await
        .map_err(io::Error::other)?
}

fn ping(ip: Ipv4Addr, timeout: Duration) -> io::Result<bool> {
    use std::io::Read;
    let mut sock = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))?;
    // Connected: the kernel hands this socket only packets from `ip`.
    sock.connect(&SocketAddrV4::new(ip, 0).into())?;
    // Identifier and sequence tell our reply from other pings of `ip`.
    let id = (std::process::id() as u16) ^ (u32::from(ip) as u16);
    let seq = (SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos() as u16)
        | 1;
    sock.send(&echo_request(id, seq))?;
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 1500];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        sock.set_read_timeout(Some(left))?;
        match sock.read(&mut buf) {
            Ok(n) if is_echo_reply(buf.get(..n).unwrap_or_default(), id, seq) => return Ok(true),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(false);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// ICMP echo request: type 8, code 0, checksum, identifier, sequence and
/// a short payload.
pub fn echo_request(id: u16, seq: u16) -> Vec<u8> {
    let mut p = vec![8, 0, 0, 0];
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(b"metalherd-dhcp-ping");
    let c = checksum(&p);
    p[2..4].copy_from_slice(&c.to_be_bytes());
    p
}

/// Whether `packet` (as a raw socket returns it: IPv4 header first) is an
/// echo reply with our identifier and sequence.
pub fn is_echo_reply(packet: &[u8], id: u16, seq: u16) -> bool {
    let Some(first) = packet.first() else {
        return false;
    };
    let ihl = usize::from(first & 0x0f) * 4;
    let Some(icmp) = packet.get(ihl..) else {
        return false;
    };
    icmp.len() >= 8
        && icmp[0] == 0
        && icmp[1] == 0
        && icmp[4..6] == id.to_be_bytes()
        && icmp[6..8] == seq.to_be_bytes()
}

/// The Internet checksum (RFC 1071).
fn checksum(b: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in b.chunks(2) {
        let w = u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]);
        sum = sum.wrapping_add(u32::from(w));
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_request_checksums_to_zero() {
        let p = echo_request(0x1234, 7);
        assert_eq!(checksum(&p), 0);
        assert_eq!(&p[..2], &[8, 0]);
    }

    #[test]
    fn only_our_echo_reply_counts() {
        let mut reply = vec![0x45u8; 20];
        reply.extend_from_slice(&[0, 0, 0, 0, 0x12, 0x34, 0, 7]);
        assert!(is_echo_reply(&reply, 0x1234, 7));
        assert!(!is_echo_reply(&reply, 0x1234, 8));
        assert!(!is_echo_reply(&reply, 0x4321, 7));
        reply[20] = 8; // a request, not a reply
        assert!(!is_echo_reply(&reply, 0x1234, 7));
        assert!(!is_echo_reply(&reply[..24], 0x1234, 7));
        assert!(!is_echo_reply(&[], 0x1234, 7));
        assert!(!is_echo_reply(&[0x4f], 0x1234, 7));
    }

    #[tokio::test]
    async fn loopback_answers() {
        // Root (or CAP_NET_RAW) is needed for raw sockets; the test suite
        // runs as root.
        check_available().expect("raw ICMP socket (run as root)");
        assert!(
            in_use(Ipv4Addr::LOCALHOST, Duration::from_secs(2))
                .await
                .unwrap()
        );
    }
}
