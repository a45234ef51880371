//! The tokio driver: one listening socket for requests, a fresh ephemeral
//! socket and a task per transfer (RFC 1350's TIDs), bounded by a
//! semaphore, ended by a cancellation token with a drain deadline. By
//! default it runs on a thread of its own with a current-thread runtime
//! (`threads: 1`): lock-step transfers are a ping-pong of tiny datagrams,
//! and on a shared multi-thread runtime a good part of each exchange went
//! to waking and parking worker threads. All
//! protocol decisions are the session's; this file only moves bytes
//! between sockets, the file source and the session, and keeps metrics.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::burst::Burst;
use super::config::{ConfigError, TftpConfig, TftpSettings};
use super::events::{TftpEvents, TransferReport};
use super::metrics::TftpMetrics;
use super::netascii::Netascii;
use super::packet::{self, Mode, Packet, Request, code};
use super::refuse::{ReplyBudget, refusal};
use super::session::{Action, Limits, Outcome, Session};
use crate::files::{FileSource, SourceError};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TftpError {
    #[error("tftp: cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// A bound listening socket, ready to serve. Binding apart from serving
/// lets `serve` fail fast and tests learn the port picked for `:0`.
pub struct TftpServer {
    /// Registered with a runtime only in `serve`, on the runtime that
    /// serves it.
    socket: std::net::UdpSocket,
    local: SocketAddr,
    settings: TftpSettings,
}

/// Bind the listening socket described by `settings`.
pub fn bind(settings: &TftpSettings) -> Result<TftpServer, TftpError> {
    let addr = settings.listen;
    let bind_err = |source| TftpError::Bind { addr, source };
    let socket = super::socket::listener(addr).map_err(bind_err)?;
    let local = socket.local_addr().map_err(bind_err)?;
    Ok(TftpServer {
        socket,
        local,
        settings: settings.clone(),
    })
}

/// Bind and serve until `cancel` fires, then let transfers drain.
pub async fn run(
    config: TftpConfig,
    source: Arc<dyn FileSource>,
    events: Arc<dyn TftpEvents>,
    cancel: CancellationToken,
) -> Result<(), TftpError> {
    bind(&TftpSettings::try_from(&config)?)?
        .serve(source, events, TftpMetrics::default(), cancel)
        .await;
    Ok(())
}

/// What every transfer task shares.
struct Ctx {
    source: Arc<dyn FileSource>,
    events: Arc<dyn TftpEvents>,
    metrics: TftpMetrics,
    limits: Limits,
    /// The listening address (its IP and scope; transfers bind beside it).
    local: SocketAddr,
    /// Peers with a transfer running, with a digest of the request that
    /// started it and the transfer's id: a retransmitted (byte-identical)
    /// request from the same address and port must not start a second
    /// transfer, while a different one (UEFI's real read right after its
    /// size probe, possibly from the same port) must not be dropped.
    active: Mutex<HashMap<SocketAddr, (u64, u64)>>,
    /// Transfers running per client address (any port), and the cap.
    per_client: Mutex<HashMap<IpAddr, usize>>,
    max_per_client: usize,
    next_id: AtomicU64,
    /// Every ERROR reply to a refused request draws from it.
    budget: Mutex<ReplyBudget>,
}

impl Ctx {
    /// Whether a refusal may be answered now; counts the ones that may not.
    fn may_refuse(&self) -> bool {
        let allowed = self
            .budget
            .lock()
            .map(|mut b| b.allow(Instant::now()))
            .unwrap_or(false);
        if !allowed {
            self.metrics.dropped("error_rate_limited");
        }
        allowed
    }
}

impl TftpServer {
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Serve requests until `cancel` fires; then stop accepting, give
    /// transfers in flight `drainMs` to finish, and abort the rest. With
    /// `threads` 0 on the caller's runtime; otherwise on a runtime of
    /// that many threads of its own, this future waiting for it to end.
    pub async fn serve(
        self,
        source: Arc<dyn FileSource>,
        events: Arc<dyn TftpEvents>,
        metrics: TftpMetrics,
        cancel: CancellationToken,
    ) {
        let threads = self.settings.threads;
        if threads == 0 {
            return self.serve_here(source, events, metrics, cancel).await;
        }
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("tftp".into())
            .spawn(move || {
                let rt = if threads == 1 {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                } else {
                    tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(threads)
                        .thread_name("tftp")
                        .enable_all()
                        .build()
                };
                match rt {
                    Ok(rt) => rt.block_on(self.serve_here(source, events, metrics, cancel)),
                    Err(e) => tracing::error!(error = %e, "cannot start the tftp runtime"),
                }
                let _ = done_tx.send(());
            });
        match spawned {
            Ok(_) => {
                let _ = done_rx.await;
            }
            Err(e) => tracing::error!(error = %e, "cannot start the tftp thread"),
        }
    }

    async fn serve_here(
        self,
        source: Arc<dyn FileSource>,
        events: Arc<dyn TftpEvents>,
        metrics: TftpMetrics,
        cancel: CancellationToken,
    ) {
        let socket = match UdpSocket::from_std(self.socket) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot register the tftp socket");
                return;
            }
        };
        let ctx = Arc::new(Ctx {
            source,
            events,
            metrics,
            limits: self.settings.limits,
            local: self.local,
            active: Mutex::new(HashMap::new()),
            per_client: Mutex::new(HashMap::new()),
            max_per_client: self.settings.max_transfers_per_client,
            next_id: AtomicU64::new(0),
            budget: Mutex::new(ReplyBudget::new(
                self.settings.error_replies_per_second,
                self.settings.error_reply_burst,
                Instant::now(),
            )),
        });
        let permits = Arc::new(Semaphore::new(self.settings.max_transfers));
        let tracker = TaskTracker::new();
        let hard_stop = CancellationToken::new();
        let mut buf = vec![0u8; 65536];
        tracing::info!(listen = %self.local, "tftp server listening");
        loop {
            let (n, peer) = tokio::select! {
                _ = cancel.cancelled() => break,
                r = socket.recv_from(&mut buf) => match r {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::debug!(error = %e, "tftp receive failed");
                        continue;
                    }
                },
            };
            let decoded = Packet::decode(buf.get(..n).unwrap_or_default());
            let refused = refusal(&decoded);
            let (write, req) = match decoded {
                Ok(Packet::Rrq(r)) => (false, r),
                Ok(Packet::Wrq(r)) => (true, r),
                Ok(_) => {
                    ctx.metrics.malformed("unexpected");
                    refuse(&ctx, &socket, peer, refused).await;
                    continue;
                }
                Err(e) => {
                    ctx.metrics.malformed(e.reason());
                    tracing::debug!(%peer, error = %e, "malformed tftp request refused");
                    refuse(&ctx, &socket, peer, refused).await;
                    continue;
                }
            };
            let raw = buf.get(..n).unwrap_or_default();
            let Some(guard) = ActiveGuard::claim(&ctx, peer, raw) else {
                ctx.metrics.dropped("duplicate");
                continue;
            };
            let Some(slot) = ClientSlot::claim(&ctx, peer.ip()) else {
                // One address holds its share; it retries like a busy one.
                ctx.metrics.dropped("client_busy");
                continue;
            };
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                // The client retries its request after its own timeout.
                ctx.metrics.dropped("busy");
                continue;
            };
            let span = tracing::info_span!("tftp_transfer", %peer, file = %req.filename);
            let ctx2 = ctx.clone();
            let stop = hard_stop.clone();
            tracker.spawn(
                async move {
                    transfer(&ctx2, peer, write, req, stop).await;
                    drop(guard);
                    drop(slot);
                    drop(permit);
                }
                .instrument(span),
            );
        }
        tracker.close();
        let drain = self.settings.drain;
        if tokio::time::timeout(drain, tracker.wait()).await.is_err() {
            tracing::info!(
                left = tracker.len(),
                "tftp drain deadline passed; aborting transfers"
            );
            hard_stop.cancel();
            tracker.wait().await;
        }
        tracing::info!("tftp server stopped");
    }
}

/// Answer a datagram the request port will not serve with an ERROR from
/// the request port itself (no transfer socket for junk), within budget.
async fn refuse(ctx: &Ctx, socket: &UdpSocket, peer: SocketAddr, refused: Option<(u16, String)>) {
    let Some((c, message)) = refused else {
        return;
    };
    if !ctx.may_refuse() {
        return;
    }
    if let Err(e) = socket
        .send_to(&packet::encode_error(c, &message), peer)
        .await
    {
        tracing::debug!(%peer, error = %e, "cannot send a tftp ERROR");
    }
}

/// Marks a peer as having a transfer running, for as long as it lives.
struct ActiveGuard {
    ctx: Arc<Ctx>,
    peer: SocketAddr,
    id: u64,
}

impl ActiveGuard {
    /// `None` when `request` repeats the one that started the peer's
    /// running transfer. A digest collision only drops a request, which
    /// the client retries.
    fn claim(ctx: &Arc<Ctx>, peer: SocketAddr, request: &[u8]) -> Option<ActiveGuard> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        request.hash(&mut h);
        let digest = h.finish();
        let mut map = ctx.active.lock().ok()?;
        if map.get(&peer).is_some_and(|&(d, _)| d == digest) {
            return None;
        }
        let id = ctx.next_id.fetch_add(1, Ordering::Relaxed);
        map.insert(peer, (digest, id));
        Some(ActiveGuard {
            ctx: ctx.clone(),
            peer,
            id,
        })
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        if let Ok(mut map) = self.ctx.active.lock()
            && map.get(&self.peer).is_some_and(|&(_, id)| id == self.id)
        {
            map.remove(&self.peer);
        }
    }
}

/// One of a client address's transfer slots, for as long as it lives.
struct ClientSlot {
    ctx: Arc<Ctx>,
    ip: IpAddr,
}

impl ClientSlot {
    /// `None` when `ip` already runs its cap of transfers.
    fn claim(ctx: &Arc<Ctx>, ip: IpAddr) -> Option<ClientSlot> {
        let mut map = ctx.per_client.lock().ok()?;
        let n = map.entry(ip).or_insert(0);
        if *n >= ctx.max_per_client {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            ctx: ctx.clone(),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        if let Ok(mut map) = self.ctx.per_client.lock()
            && let Some(n) = map.get_mut(&self.ip)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// How a transfer task ended, beyond what the session decides.
enum End {
    Session(Outcome),
    ReadError(std::io::Error),
    Socket(std::io::Error),
    Shutdown,
}

async fn transfer(ctx: &Ctx, peer: SocketAddr, write: bool, req: Request, stop: CancellationToken) {
    ctx.metrics.active.inc();
    let (outcome, bytes) = transfer_inner(ctx, peer, write, &req, stop).await;
    ctx.metrics.active.dec();
    ctx.metrics.transfer(outcome);
    if matches!(outcome, "complete" | "client_error" | "client_gone") {
        tracing::debug!(outcome, bytes, "tftp transfer finished");
    } else {
        tracing::info!(outcome, bytes, "tftp transfer failed");
    }
    ctx.events.transfer_finished(&TransferReport {
        peer,
        file: &req.filename,
        bytes,
        outcome,
    });
}

async fn transfer_inner(
    ctx: &Ctx,
    peer: SocketAddr,
    write: bool,
    req: &Request,
    stop: CancellationToken,
) -> (&'static str, u64) {
    let sock = match super::socket::transfer(ctx.local, peer).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot open a transfer socket");
            return ("socket_error", 0);
        }
    };
    if write {
        if ctx.may_refuse() {
            let _ = sock
                .send(&packet::encode_error(
                    code::ACCESS_VIOLATION,
                    "writes are not accepted",
                ))
                .await;
        }
        return ("write_refused", 0);
    }
    let mut file = match ctx.source.open_for(&req.filename, peer).await {
        Ok(f) => f,
        Err(e) => {
            let c = match e {
                SourceError::NotFound => code::FILE_NOT_FOUND,
                SourceError::Forbidden => code::ACCESS_VIOLATION,
                _ => code::NOT_DEFINED,
            };
            if ctx.may_refuse() {
                let _ = sock.send(&packet::encode_error(c, &e.to_string())).await;
            }
            let word = match e {
                SourceError::NotFound => "not_found",
                SourceError::Forbidden => "forbidden",
                _ => "read_error",
            };
            return (word, 0);
        }
    };

    if req.mode == Mode::Netascii {
        file = Box::new(Netascii::new(file));
    }
    let mut out = Vec::with_capacity(16);
    let mut batch = Vec::with_capacity(16);
    let mut session = Session::new(req, file.size(), &ctx.limits, Instant::now(), &mut out);
    let neg = session.negotiated();
    let blksize = usize::from(neg.blksize);
    // A window of full DATA packets can leave in one GSO send.
    let mut burst = Burst::new(&sock, (neg.windowsize > 1).then_some(blksize + 4));
    let mut data = vec![0u8; blksize];
    let mut rbuf = vec![0u8; 2048];
    // One timer and one cancellation waiter for the whole transfer. The
    // timer is moved only when a deadline comes earlier than the one it
    // holds, or when it fires early: progress (which pushes the session's
    // deadline on at every ACK) then costs no timer-wheel update.
    let mut timer_at = tokio::time::Instant::now() + Duration::from_secs(3600);
    let timer = tokio::time::sleep_until(timer_at);
    tokio::pin!(timer);
    let stopped = stop.cancelled();
    tokio::pin!(stopped);
    let end = 'run: loop {
        // Carry out what the session asked for; a Read feeds more actions.
        let mut finished = None;
        while !out.is_empty() {
            std::mem::swap(&mut out, &mut batch);
            for action in batch.drain(..) {
                match action {
                    Action::Send(b) => burst.push(b),
                    // The session's deadline() is the latest Arm.
                    Action::Arm(_) => {}
                    Action::Read { len } => {
                        let scratch = data.get_mut(..len).unwrap_or_default();
                        match file.next(scratch).await {
                            Ok(got) => session.on_read(Instant::now(), got, &mut out),
                            Err(e) => break 'run End::ReadError(e),
                        }
                    }
                    Action::Finish(o) => finished = Some(o),
                }
            }
        }
        // The whole burst (a window, or a window resent) at once.
        if let Err(e) = burst.flush(&sock, &ctx.metrics).await {
            break End::Socket(e);
        }
        if let Some(o) = finished {
            break End::Session(o);
        }
        if let Some(d) = session.deadline().map(tokio::time::Instant::from_std)
            && d < timer_at
        {
            timer_at = d;
            timer.as_mut().reset(d);
        }
        tokio::select! {
            biased;
            _ = &mut stopped => break End::Shutdown,
            r = sock.recv(&mut rbuf) => match r {
                Ok(n) => {
                    let bytes = rbuf.get(..n).unwrap_or_default();
                    if let Err(e) = session.on_packet(Instant::now(), bytes, &mut out) {
                        ctx.metrics.malformed(e.reason());
                    }
                }
                Err(e) => break End::Socket(e),
            },
            _ = &mut timer => {
                // Early ticks (the deadline moved on) do nothing but move
                // the timer to the deadline still pending.
                session.on_timer(Instant::now(), &mut out);
                timer_at = session
                    .deadline()
                    .map(tokio::time::Instant::from_std)
                    .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
                timer.as_mut().reset(timer_at);
            }
        }
    };

    let st = session.stats;
    ctx.metrics.retransmissions.inc_by(st.retransmissions);
    ctx.metrics.duplicate_acks.inc_by(st.duplicate_acks);
    if st.unexpected_packets > 0 {
        ctx.metrics
            .malformed
            .get_or_create(&super::metrics::ReasonLabel {
                reason: "unexpected",
            })
            .inc_by(st.unexpected_packets);
    }
    let bytes = session.bytes_sent();
    ctx.metrics.bytes.inc_by(bytes);
    let word = match end {
        End::Session(Outcome::Complete { .. }) => "complete",
        End::Session(Outcome::ClientError { code, message }) => {
            tracing::debug!(code, message = %message.escape_debug(), "client ended the transfer");
            "client_error"
        }
        End::Session(Outcome::TimedOut) => "timed_out",
        End::ReadError(e) => {
            tracing::warn!(error = %e, "tftp read failed");
            let _ = sock
                .send(&packet::encode_error(code::NOT_DEFINED, "read error"))
                .await;
            "read_error"
        }
        // The client's port is closed (ICMP port unreachable): it is gone.
        End::Socket(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => "client_gone",
        End::Socket(e) => {
            tracing::debug!(error = %e, "tftp transfer socket failed");
            "socket_error"
        }
        End::Shutdown => {
            let _ = sock
                .send(&packet::encode_error(
                    code::NOT_DEFINED,
                    "server shutting down",
                ))
                .await;
            "shutdown"
        }
    };
    (word, bytes)
}
