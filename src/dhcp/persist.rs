//! After the decision: lease writes are persisted (`lease_store`) and only
//! then are the replies that depend on them sent. Thin tokio glue: in
//! `batch` mode the journal write (one `pwrite` per burst of packets) is
//! made inline by the receive loop and a background task flushes the
//! journals every interval; in `always` mode a committer task journals and
//! flushes each batch on a blocking thread while the receive loop goes on.
//! No DHCP decisions here.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::lease::LeaseWrite;
use super::lease_store::{LeaseStore, LeaseSync};
use super::lease_view::LeaseView;
use super::metrics::DhcpMetrics;
use super::policy::{Dest, Reply, Via};

/// Batches waiting for the committer (always mode) at most.
const QUEUE: usize = 64;

/// A reply and where it goes.
pub(crate) struct Held {
    pub reply: Reply,
    pub src: SocketAddr,
    pub via: Via,
}

/// The sending side of the sockets.
#[derive(Clone)]
pub(crate) struct Outbox {
    pub sock67: Arc<UdpSocket>,
    pub sock4011: Option<Arc<UdpSocket>>,
    pub metrics: DhcpMetrics,
}

impl Outbox {
    pub async fn send(&self, r: &Reply, src: SocketAddr, via: Via) {
        let (sock, to) = match r.to {
            Dest::Relay(g) => (&self.sock67, SocketAddr::from((g, 67))),
            Dest::Broadcast => (&self.sock67, SocketAddr::from((Ipv4Addr::BROADCAST, 68))),
            Dest::Unicast(ip) => (&self.sock67, SocketAddr::from((ip, 68))),
            Dest::Source => match (via, &self.sock4011) {
                (Via::Port4011, Some(s)) => (s, src),
                _ => (&self.sock67, src),
            },
        };
        // Replies are small and the socket is rarely full: try first, and
        // only wait for writability when the kernel says so.
        let sent = match sock.try_send_to(&r.bytes, to) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                sock.send_to(&r.bytes, to).await
            }
            other => other,
        };
        match sent {
            Ok(_) => self.metrics.replied(r.msg_type),
            Err(e) => {
                tracing::debug!(%to, error = %e, "dhcp send failed");
                self.metrics.drop("send_failed");
            }
        }
    }

    async fn send_all(&self, held: &[Held]) {
        for h in held {
            self.send(&h.reply, h.src, h.via).await;
        }
    }
}

type Batch = (Vec<LeaseWrite>, Vec<Held>);

/// Where lease writes go.
pub(crate) enum Persister {
    /// Proxy mode: no leases, nothing to write.
    Off,
    /// Batch mode: journal inline, flush in the background.
    Inline {
        store: Box<LeaseStore>,
        view: LeaseView,
        syncer: JoinHandle<()>,
    },
    /// Always mode: a committer task journals and flushes.
    Committer {
        tx: mpsc::Sender<Batch>,
        task: JoinHandle<()>,
    },
}

impl Persister {
    pub fn start(
        store: Option<LeaseStore>,
        view: LeaseView,
        out: Outbox,
        cancel: CancellationToken,
    ) -> Persister {
        let Some(store) = store else {
            return Persister::Off;
        };
        match store.sync_mode() {
            LeaseSync::Batch { interval } => {
                let files = store.sync_handles();
                let m = out.metrics.clone();
                let syncer = tokio::spawn(async move {
                    let mut tick = tokio::time::interval(interval);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        tokio::select! {
                            _ = cancel.cancelled() => break,
                            _ = tick.tick() => {}
                        }
                        let files = files.clone();
                        let r = tokio::task::spawn_blocking(move || {
                            files.iter().try_for_each(|f| f.sync_data())
                        })
                        .await;
                        if !matches!(r, Ok(Ok(()))) {
                            tracing::error!("lease journal flush failed");
                            m.lease_sync_errors.inc();
                        }
                    }
                });
                Persister::Inline {
                    store: Box::new(store),
                    view,
                    syncer,
                }
            }
            LeaseSync::Always => {
                let (tx, rx) = mpsc::channel(QUEUE);
                let task = tokio::spawn(committer(store, view, rx, out));
                Persister::Committer { tx, task }
            }
        }
    }

    /// Persist `writes`, then send `held` (both are emptied).
    pub async fn persist(
        &mut self,
        writes: &mut Vec<LeaseWrite>,
        held: &mut Vec<Held>,
        out: &Outbox,
    ) {
        match self {
            Persister::Off => {
                out.send_all(held).await;
            }
            Persister::Inline { store, view, .. } => {
                let metrics = &out.metrics;
                if !writes.is_empty() {
                    let before = store.checkpoints;
                    match store.append(writes) {
                        Ok(()) => {
                            metrics.lease_commits.inc();
                            metrics.lease_checkpoints.inc_by(store.checkpoints - before);
                            view.apply(writes);
                            out.send_all(held).await;
                        }
                        Err(e) => {
                            tracing::error!(error = %e, replies = held.len(), "lease journal write failed; replies withheld");
                            metrics.lease_commit_errors.inc();
                        }
                    }
                } else {
                    out.send_all(held).await;
                }
            }
            Persister::Committer { tx, .. } => {
                let batch = (std::mem::take(writes), std::mem::take(held));
                if tx.send(batch).await.is_err() {
                    out.metrics.drop("commit_closed");
                }
            }
        }
        writes.clear();
        held.clear();
    }

    /// Finish pending writes and checkpoint (clean shutdown).
    pub async fn close(self) {
        let store = match self {
            Persister::Off => return,
            Persister::Inline { store, syncer, .. } => {
                syncer.abort();
                Some(*store)
            }
            Persister::Committer { tx, task } => {
                drop(tx);
                // The committer closes the store itself.
                let _ = task.await;
                None
            }
        };
        if let Some(s) = store {
            match tokio::task::spawn_blocking(move || s.close()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "lease checkpoint at shutdown failed"),
                Err(e) => tracing::warn!(error = %e, "lease checkpoint at shutdown failed"),
            }
        }
    }
}

async fn committer(store: LeaseStore, view: LeaseView, mut rx: mpsc::Receiver<Batch>, out: Outbox) {
    let mut store = Some(store);
    while let Some((mut writes, mut held)) = rx.recv().await {
        while let Ok((w, h)) = rx.try_recv() {
            writes.extend(w);
            held.extend(h);
        }
        let Some(mut s) = store.take() else { break };
        let r = tokio::task::spawn_blocking(move || {
            let before = s.checkpoints;
            let r = s.append(&writes);
            (s, r, writes, before)
        })
        .await;
        let Ok((s, r, writes, before)) = r else {
            tracing::error!("lease journal task failed; replies withheld");
            out.metrics.lease_commit_errors.inc();
            break;
        };
        match r {
            Ok(()) => {
                out.metrics.lease_commits.inc();
                out.metrics.lease_checkpoints.inc_by(s.checkpoints - before);
                view.apply(&writes);
                out.send_all(&held).await;
            }
            Err(e) => {
                tracing::error!(error = %e, replies = held.len(), "lease journal write failed; replies withheld");
                out.metrics.lease_commit_errors.inc();
            }
        }
        store = Some(s);
    }
    if let Some(s) = store
        && let Ok(Err(e)) = tokio::task::spawn_blocking(move || s.close()).await
    {
        tracing::warn!(error = %e, "lease checkpoint at shutdown failed");
    }
}
