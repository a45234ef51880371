//! Serving plain HTTP on a network where any host may be hostile: a cap on
//! open connections in total and per client address, a deadline for each
//! request's header (which also ends a keep-alive connection left idle),
//! and a deadline for a response write the client stops reading. Without
//! these, a few hundred half-open "slow" connections hold the server's
//! tasks and descriptors for as long as their sender likes.
//!
//! A connection over a cap is accepted, told `503` in one non-blocking
//! write, and closed at once, and the refusal is counted: the listener's
//! backlog never fills with connections nobody will serve. What a client
//! may do within the limits is unchanged: iPXE and UEFI HTTP boot open one
//! connection at a time.
//!
//! The write deadline applies only while a write is blocked, so a handler
//! that takes long to answer (an image being fetched into the cache) never
//! trips it; a request body a client drips slowly is bounded by the
//! handlers' body caps and the per-client cap.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tracing::Instrument;

/// Connection limits of one listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// Open connections at most, from all clients together.
    pub max: usize,
    /// Open connections at most from one client address.
    pub per_client: usize,
    /// Time a client has to send a request's complete header, counted
    /// from the moment the server is ready for it (so also the longest a
    /// keep-alive connection stays idle).
    pub header_timeout: Duration,
    /// Time a response write may stay blocked because the client does not
    /// read.
    pub stall_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max: 1024,
            per_client: 32,
            header_timeout: Duration::from_secs(15),
            stall_timeout: Duration::from_secs(60),
        }
    }
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Refused {
    /// `max` connections were open.
    busy,
    /// `per_client` connections from this address were open.
    per_client,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Closed {
    /// The request header did not arrive in time (or the connection sat
    /// idle past the same deadline).
    header_timeout,
    /// The client stopped reading a response.
    stalled,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    pub reason: Refused,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClosedLabels {
    pub reason: Closed,
}

/// `connections_open`, `connections_refused_total{reason}` and
/// `connections_timed_out_total{reason}` under the registry given.
#[derive(Clone, Debug, Default)]
pub struct ConnMetrics {
    pub open: Gauge,
    pub refused: Family<RefusedLabels, Counter>,
    pub timed_out: Family<ClosedLabels, Counter>,
}

impl ConnMetrics {
    pub fn register_into(&self, r: &mut Registry) {
        r.register("connections_open", "Open connections", self.open.clone());
        r.register(
            "connections_refused",
            "Connections closed at once because a connection cap was reached, by cap",
            self.refused.clone(),
        );
        r.register(
            "connections_timed_out",
            "Connections closed by a deadline, by deadline",
            self.timed_out.clone(),
        );
    }

    fn refuse(&self, reason: Refused) {
        self.refused.get_or_create(&RefusedLabels { reason }).inc();
    }
}

/// Open connections per client address; a [`ClientSlot`] gives its place
/// back when dropped.
#[derive(Debug, Default)]
struct Clients {
    open: Mutex<HashMap<IpAddr, usize>>,
}

struct ClientSlot {
    clients: Arc<Clients>,
    ip: IpAddr,
}

impl Clients {
    fn enter(self: &Arc<Self>, ip: IpAddr, cap: usize) -> Option<ClientSlot> {
        let mut open = self.open.lock().ok()?;
        let n = open.entry(ip).or_insert(0);
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            clients: self.clone(),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        if let Ok(mut open) = self.clients.open.lock()
            && let Some(n) = open.get_mut(&self.ip)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

const BUSY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// Serve `app` on `listener` within `limits` until `cancel`, then give
/// in-flight requests up to `drain` to finish. Handlers see the peer as
/// `ConnectInfo<std::net::SocketAddr>`. Accepted connections have TCP_NODELAY set
/// (see [`super::no_delay`] for why).
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: ConnLimits,
    metrics: ConnMetrics,
    cancel: CancellationToken,
    drain: Duration,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max));
    let clients = Arc::new(Clients::default());
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    while let Some((tcp, peer)) = crate::accept::next(&listener, &cancel).await {
        let ip = peer.ip().to_canonical();
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            metrics.refuse(Refused::busy);
            tracing::debug!(%peer, "connection refused: connection cap reached");
            let _ = tcp.try_write(BUSY);
            continue;
        };
        let Some(client) = clients.enter(ip, limits.per_client) else {
            metrics.refuse(Refused::per_client);
            tracing::debug!(%peer, "connection refused: per-client connection cap reached");
            let _ = tcp.try_write(BUSY);
            continue;
        };
        let service =
            app.clone()
                .map_request(move |mut r: http::Request<hyper::body::Incoming>| {
                    r.extensions_mut().insert(ConnectInfo(peer));
                    r
                });
        let io = TokioIo::new(StallIo::new(tcp, limits.stall_timeout));
        let conn =
            builder.serve_connection(io, hyper_util::service::TowerToHyperService::new(service));
        let conn = graceful.watch(conn);
        let metrics = metrics.clone();
        metrics.open.inc();
        tokio::spawn(
            async move {
                if let Err(e) = conn.await {
                    match closed_by(&e) {
                        Some(reason) => {
                            metrics
                                .timed_out
                                .get_or_create(&ClosedLabels { reason })
                                .inc();
                            tracing::debug!(?reason, "connection closed by deadline");
                        }
                        None => tracing::debug!(error = %e, "connection ended with an error"),
                    }
                }
                metrics.open.dec();
                drop(client);
                drop(slot);
            }
            .instrument(tracing::debug_span!("connection", %peer)),
        );
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(drain) => {
            tracing::debug!("drain time over; closing remaining connections");
        }
    }
}

/// Which deadline ended a connection, if one did.
fn closed_by(e: &hyper::Error) -> Option<Closed> {
    if e.is_timeout() {
        return Some(Closed::header_timeout);
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<io::Error>()
            && io.kind() == io::ErrorKind::TimedOut
        {
            return Some(Closed::stalled);
        }
        source = s.source();
    }
    None
}

/// A stream whose writes fail with `TimedOut` once one has stayed blocked
/// for `stall` (the deadline starts when a write first blocks and is
/// dropped as soon as a write makes progress).
pub struct StallIo<T> {
    inner: T,
    stall: Duration,
    blocked: Option<Pin<Box<Sleep>>>,
}

impl<T> StallIo<T> {
    pub fn new(inner: T, stall: Duration) -> Self {
        StallIo {
            inner,
            stall,
            blocked: None,
        }
    }

    fn on_write<R>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        match r {
            Poll::Pending => {
                let stall = self.stall;
                let timer = self
                    .blocked
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
                if timer.as_mut().poll(cx).is_ready() {
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client stopped reading",
                    )))
                } else {
                    Poll::Pending
                }
            }
            ready => {
                self.blocked = None;
                ready
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for StallIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StallIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.on_write(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.on_write(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.on_write(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
