//! Sending the datagrams a session asked for in one go, to the one peer
//! of a transfer socket, with as few syscalls as the kernel allows: a run
//! of equal-size DATA packets (a window, RFC 7440) goes out as one UDP GSO
//! send (`UDP_SEGMENT`) that the kernel cuts into datagrams; a socket or
//! path that refuses GSO falls back to one send per packet for the rest
//! of the transfer. Owns no protocol logic: it sends what it is given, in
//! order.

use std::io::ErrorKind;

use bytes::Bytes;
use nix::sys::socket::{setsockopt, sockopt::UdpGsoSegment};
use tokio::net::UdpSocket;

use super::metrics::TftpMetrics;

/// Segments per GSO send: the kernel's `UDP_MAX_SEGMENTS` (64 on older
/// kernels), and one send carries at most 64 KiB.
const MAX_SEGMENTS: usize = 64;
const MAX_GSO_BYTES: usize = 65_000;

pub struct Burst {
    /// The GSO segment size set on the socket, while GSO is in use.
    seg: Option<usize>,
    pending: Vec<Bytes>,
    buf: Vec<u8>,
}

impl Burst {
    /// Packets of `seg` bytes (a full DATA packet) will be batched when the
    /// socket accepts `UDP_SEGMENT`; `None` sends one packet per call.
    pub fn new(sock: &UdpSocket, seg: Option<usize>) -> Burst {
        let seg = seg.filter(|&s| {
            s > 0 && 2 * s <= MAX_GSO_BYTES && setsockopt(sock, UdpGsoSegment, &(s as i32)).is_ok()
        });
        Burst {
            seg,
            pending: Vec::with_capacity(16),
            buf: Vec::new(),
        }
    }

    pub fn push(&mut self, packet: Bytes) {
        self.pending.push(packet);
    }

    /// Send everything pushed since the last flush, in order.
    pub async fn flush(&mut self, sock: &UdpSocket, metrics: &TftpMetrics) -> std::io::Result<()> {
        let pending = std::mem::take(&mut self.pending);
        let mut rest: &[Bytes] = &pending;
        while !rest.is_empty() {
            let n = self.batchable(rest);
            let (now, later) = rest.split_at(n.max(1));
            if n >= 2 {
                self.buf.clear();
                for p in now {
                    self.buf.extend_from_slice(p);
                }
                match sock.send(&self.buf).await {
                    Ok(_) => {
                        metrics.send_calls("gso");
                        rest = later;
                        continue;
                    }
                    Err(e) if refused(&e) => self.disable(sock, metrics),
                    Err(e) => return Err(e),
                }
                // Send this batch again, one packet at a time.
                continue;
            }
            if self.seg.is_some_and(|seg| now[0].len() > seg) {
                // The kernel would cut it into segments: never the case for
                // TFTP (no packet exceeds a DATA packet), but stay correct.
                self.disable(sock, metrics);
            }
            match sock.send(&now[0]).await {
                Ok(_) => {}
                Err(e) if self.seg.is_some() && refused(&e) => {
                    // With UDP_SEGMENT set, the kernel checks every send
                    // against the path MTU; retry without it.
                    self.disable(sock, metrics);
                    continue;
                }
                Err(e) => return Err(e),
            }
            metrics.send_calls("single");
            rest = later;
        }
        self.pending = pending;
        self.pending.clear();
        Ok(())
    }

    /// How many packets from the front of `rest` one GSO send can carry:
    /// all but the last of exactly the segment size, the last no larger.
    fn batchable(&self, rest: &[Bytes]) -> usize {
        let Some(seg) = self.seg else { return 0 };
        let max = MAX_SEGMENTS.min(MAX_GSO_BYTES / seg);
        let mut n = 0;
        for p in rest.iter().take(max) {
            if p.len() > seg {
                break;
            }
            n += 1;
            if p.len() < seg {
                break;
            }
        }
        n
    }

    fn disable(&mut self, sock: &UdpSocket, metrics: &TftpMetrics) {
        tracing::debug!("UDP GSO refused on this path; sending one datagram per call");
        metrics.gso_fallbacks.inc();
        let _ = setsockopt(sock, UdpGsoSegment, &0);
        self.seg = None;
    }

    #[cfg(test)]
    fn gso(&self) -> bool {
        self.seg.is_some()
    }
}

/// Errors with which the kernel refuses a GSO send it cannot do: a
/// segment larger than the path MTU (EMSGSIZE; EINVAL before Linux 6.x),
/// too many segments (EINVAL), no checksum offload on the way (EIO).
fn refused(e: &std::io::Error) -> bool {
    e.kind() == ErrorKind::InvalidInput
        || matches!(e.raw_os_error(), Some(libc::EIO | libc::EMSGSIZE))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        a.connect(b.local_addr().unwrap()).await.unwrap();
        (a, b)
    }

    fn packets(sizes: &[usize]) -> Vec<Bytes> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| Bytes::from(vec![i as u8; n]))
            .collect()
    }

    async fn received(b: &UdpSocket, count: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 70_000];
        for _ in 0..count {
            let n = b.recv(&mut buf).await.unwrap();
            out.push(buf[..n].to_vec());
        }
        out
    }

    #[tokio::test]
    async fn a_window_arrives_as_separate_datagrams_in_order() {
        let (a, b) = pair().await;
        let m = TftpMetrics::default();
        let mut burst = Burst::new(&a, Some(1472));
        assert!(burst.gso(), "loopback takes UDP_SEGMENT");
        // A window of 70 full blocks and a short last one, then a lone
        // small packet (an OACK, say) and a lone full block.
        let mut sizes = vec![1472; 70];
        sizes.push(100);
        sizes.extend([9, 1472]);
        let want = packets(&sizes);
        for p in &want {
            burst.push(p.clone());
        }
        burst.flush(&a, &m).await.unwrap();
        let got = received(&b, want.len()).await;
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!(g[..] == w[..], "{} bytes, want {}", g.len(), w.len());
        }
        // 71 packets in two GSO sends (64 + 7), then two single sends.
        assert_eq!(m.send_calls_with("gso"), 2);
        assert_eq!(m.send_calls_with("single"), 2);
    }

    #[tokio::test]
    async fn without_gso_every_packet_is_its_own_send() {
        let (a, b) = pair().await;
        let m = TftpMetrics::default();
        let mut burst = Burst::new(&a, None);
        let want = packets(&[516, 516, 100]);
        for p in &want {
            burst.push(p.clone());
        }
        burst.flush(&a, &m).await.unwrap();
        assert_eq!(received(&b, 3).await.concat(), want.concat());
        assert_eq!(m.send_calls_with("single"), 3);
        assert_eq!(m.send_calls_with("gso"), 0);
    }

    #[tokio::test]
    async fn a_refused_gso_send_falls_back_to_single_sends() {
        let (a, b) = pair().await;
        let m = TftpMetrics::default();
        let mut burst = Burst::new(&a, Some(1472));
        assert!(burst.gso());
        // Make the kernel refuse: with 8-byte segments a window needs more
        // than UDP_MAX_SEGMENTS of them (EINVAL), as a path it cannot
        // segment for would refuse it.
        setsockopt(&a, UdpGsoSegment, &8).unwrap();
        let want = packets(&[1472, 1472, 1472, 100]);
        for p in &want {
            burst.push(p.clone());
        }
        burst.flush(&a, &m).await.unwrap();
        assert_eq!(received(&b, want.len()).await.concat(), want.concat());
        assert!(!burst.gso());
        assert_eq!(m.gso_fallbacks.get(), 1);
        assert_eq!(m.send_calls_with("single"), 4);
    }
}
