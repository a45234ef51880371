//! Thin tokio UDP driver around the sans-IO core: one connected socket per
//! session, per-attempt timeouts with retransmission inside a per-request
//! deadline, stray and garbled datagrams counted and dropped. Owns no
//! protocol logic beyond "send, wait, feed, repeat".

use std::net::SocketAddr;
use std::time::Duration;

use rand::Rng;
use tokio::net::UdpSocket;
use tokio::time::{Instant, timeout_at};

use super::crypto::CipherSuite;
use super::error::IpmiError;
use super::handshake::{Handshake, HandshakeParams, Step};
use super::metrics;
use super::session::Session;
use super::wire::Response;
use crate::bmc::Credentials;

/// Largest datagram we accept (IPMI LAN messages are far smaller).
const MAX_DATAGRAM: usize = 1024;
/// Whole handshakes tried before giving up (each restarts from scratch).
const HANDSHAKE_ATTEMPTS: u32 = 2;
/// Times one handshake step is sent before the handshake restarts.
const STEP_SENDS: u32 = 3;

/// How long one attempt waits before retransmitting: a quarter of the
/// request deadline, between 100 ms and 2 s.
pub fn attempt_timeout(request_timeout: Duration) -> Duration {
    (request_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(2))
}

/// A socket plus its established session.
#[derive(Debug)]
pub struct Conn {
    sock: UdpSocket,
    pub session: Session,
    /// When the last reply arrived (for the idle re-open rule).
    pub last_reply: Instant,
}

fn io(e: std::io::Error) -> IpmiError {
    IpmiError::Io(e.to_string())
}

async fn bind_connected(peer: SocketAddr) -> Result<UdpSocket, IpmiError> {
    let local: SocketAddr = if peer.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = UdpSocket::bind(local).await.map_err(io)?;
    sock.connect(peer).await.map_err(io)?;
    Ok(sock)
}

/// Errors that end a handshake at once (the BMC said no); any other bad
/// datagram is dropped. A RAKP 2 or 4 code that does not verify is held
/// until the step times out: a wrong password and a corrupted or forged
/// datagram look the same, and only the second is followed by a good one.
fn definitive(e: &IpmiError) -> bool {
    matches!(
        e,
        IpmiError::RakpStatus { .. }
            | IpmiError::AlgorithmMismatch { .. }
            | IpmiError::NoIpmi2
            | IpmiError::Completion { .. }
            | IpmiError::CredentialsTooLong
            | IpmiError::UnsupportedSuite(_)
    )
}

/// Open a session: Get Channel Auth Capabilities, Open Session, RAKP 1-4.
pub async fn establish(
    peer: SocketAddr,
    creds: &Credentials,
    suite: CipherSuite,
    request_timeout: Duration,
) -> Result<Conn, IpmiError> {
    let sock = bind_connected(peer).await?;
    let per_attempt = attempt_timeout(request_timeout);
    let mut buf = vec![0u8; MAX_DATAGRAM];
    for attempt in 0..HANDSHAKE_ATTEMPTS {
        let (console_sid, rm, tag) = {
            let mut rng = rand::rng();
            (
                rng.random_range(1..=u32::MAX),
                rng.random::<[u8; 16]>(),
                rng.random::<u8>(),
            )
        };
        let mut hs = Handshake::new(HandshakeParams {
            suite,
            username: creds.username.as_bytes().to_vec(),
            password: creds.password().as_bytes().to_vec(),
            console_sid,
            rm,
            tag,
        })?;
        let mut out = hs.start();
        sock.send(&out).await.map_err(io)?;
        // Each step gets its own attempt timeout; a silent step restarts the
        // handshake (a BMC may have kept state from the lost exchange).
        let mut step_deadline = Instant::now() + per_attempt;
        let mut sends = 1;
        let mut unverified: Option<IpmiError> = None;
        loop {
            let n = match timeout_at(step_deadline, sock.recv(&mut buf)).await {
                Err(_) => {
                    if let Some(e) = unverified {
                        return Err(e);
                    }
                    if sends >= STEP_SENDS {
                        tracing::debug!(attempt, "IPMI handshake step unanswered, restarting");
                        break;
                    }
                    // Resending a step is safe: a BMC answers a repeated
                    // request again, and a late first answer is stray.
                    metrics::retransmitted();
                    sock.send(&out).await.map_err(io)?;
                    sends += 1;
                    step_deadline = Instant::now() + per_attempt;
                    continue;
                }
                Ok(r) => r.map_err(io)?,
            };
            match hs.on_packet(&buf[..n]) {
                Ok(Step::Send(p)) => {
                    out = p;
                    sock.send(&out).await.map_err(io)?;
                    sends = 1;
                    step_deadline = Instant::now() + per_attempt;
                }
                Ok(Step::Established(session)) => {
                    return Ok(Conn {
                        sock,
                        session,
                        last_reply: Instant::now(),
                    });
                }
                Err(e) if definitive(&e) => return Err(e),
                Err(e @ (IpmiError::AuthCodeMismatch | IpmiError::Rakp4Mismatch)) => {
                    metrics::dropped(&e);
                    unverified = Some(e);
                }
                Err(e) => metrics::dropped(&e),
            }
        }
    }
    Err(IpmiError::Timeout(
        per_attempt * HANDSHAKE_ATTEMPTS * STEP_SENDS,
    ))
}

impl Conn {
    /// Send one request and wait for its reply, retransmitting on silence
    /// until `request_timeout` has passed. Completion codes are returned,
    /// not judged.
    pub async fn call(
        &mut self,
        netfn: u8,
        cmd: u8,
        data: &[u8],
        request_timeout: Duration,
    ) -> Result<Response, IpmiError> {
        let deadline = Instant::now() + request_timeout;
        let per_attempt = attempt_timeout(request_timeout);
        let iv = rand::rng().random::<[u8; 16]>();
        let (pkt, pending) = self.session.request(netfn, cmd, data, &iv)?;
        self.sock.send(&pkt).await.map_err(io)?;
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut attempt_deadline = (Instant::now() + per_attempt).min(deadline);
        loop {
            match timeout_at(attempt_deadline, self.sock.recv(&mut buf)).await {
                Ok(r) => {
                    let n = r.map_err(io)?;
                    match self.session.response(&buf[..n], &pending) {
                        Ok(resp) => {
                            self.last_reply = Instant::now();
                            return Ok(resp);
                        }
                        Err(e) => metrics::dropped(&e),
                    }
                }
                Err(_) => {
                    if Instant::now() >= deadline {
                        return Err(IpmiError::Timeout(request_timeout));
                    }
                    metrics::retransmitted();
                    let iv = rand::rng().random::<[u8; 16]>();
                    let pkt = self.session.retransmit(&pending, data, &iv)?;
                    self.sock.send(&pkt).await.map_err(io)?;
                    attempt_deadline = (Instant::now() + per_attempt).min(deadline);
                }
            }
        }
    }

    /// Like [`Conn::call`], but a non-zero completion code is an error.
    pub async fn call_ok(
        &mut self,
        netfn: u8,
        cmd: u8,
        data: &[u8],
        request_timeout: Duration,
    ) -> Result<Vec<u8>, IpmiError> {
        let r = self.call(netfn, cmd, data, request_timeout).await?;
        if r.completion != 0 {
            return Err(IpmiError::Completion {
                netfn,
                cmd,
                code: r.completion,
            });
        }
        Ok(r.data)
    }
}
