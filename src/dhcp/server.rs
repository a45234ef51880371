//! The UDP driver: binds port 67 (and 4011 in proxy mode) on the boot
//! interface with SO_BINDTODEVICE, feeds each datagram to the policy, and
//! sends replies (broadcast, unicast or to the relay). Lease writes go to a
//! committer task that commits them in batches (one fsync'd redb
//! transaction per batch: group commit) and only then sends the replies
//! that depend on them. No DHCP decisions here.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::config::{DhcpMode, DhcpSettings};
use super::discovery;
use super::lease::{LeaseTable, LeaseWrite};
use super::lease_db::{LeaseDb, LeaseDbError};
use super::metrics::{DhcpMetrics, TypeLabel, type_label};
use super::packet::MAX_LEN;
use super::policy::{Dest, Outcome, Policy, Reply, Via};
use crate::api::BootEvent;
use crate::directory::{BootRecorder, Directory};
use crate::store::Store;

/// File name of the lease database inside the data directory.
pub const LEASE_FILE: &str = "dhcp-leases.redb";
/// Replies waiting for one lease commit at most.
const MAX_BATCH: usize = 2048;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DhcpError {
    #[error("dhcp: interface {interface}: {message}")]
    Interface { interface: String, message: String },
    #[error("dhcp: cannot bind UDP port {port} on {interface}: {source}")]
    Bind {
        interface: String,
        port: u16,
        #[source]
        source: io::Error,
    },
    #[error("dhcp: {0}")]
    Leases(#[from] LeaseDbError),
    #[error("dhcp: cannot create data directory {path}: {source}")]
    DataDir {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("dhcp: lease task failed: {0}")]
    Task(String),
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The first IPv4 address of `iface`.
pub fn interface_ipv4(iface: &str) -> Result<Ipv4Addr, DhcpError> {
    let e = |m: String| DhcpError::Interface {
        interface: iface.to_string(),
        message: m,
    };
    let addrs = nix::ifaddrs::getifaddrs().map_err(|x| e(x.to_string()))?;
    let mut exists = false;
    for a in addrs {
        if a.interface_name != iface {
            continue;
        }
        exists = true;
        if let Some(sin) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) {
            return Ok(sin.ip());
        }
    }
    Err(e(if exists {
        "has no IPv4 address (set dhcp.serverAddress or add one)".into()
    } else {
        "no such interface".into()
    }))
}

fn udp_socket(iface: &str, port: u16) -> Result<UdpSocket, DhcpError> {
    let bind_err = |source| DhcpError::Bind {
        interface: iface.to_string(),
        port,
        source,
    };
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(bind_err)?;
    s.set_reuse_address(true).map_err(bind_err)?;
    s.set_broadcast(true).map_err(bind_err)?;
    s.bind_device(Some(iface.as_bytes())).map_err(bind_err)?;
    // Bursts (a rack powering on) must queue, not drop: ask for 4 MiB.
    let _ = s.set_recv_buffer_size(4 << 20);
    s.set_nonblocking(true).map_err(bind_err)?;
    s.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port).into())
        .map_err(bind_err)?;
    UdpSocket::from_std(s.into()).map_err(bind_err)
}

/// A DHCP server with its sockets bound and its leases loaded.
pub struct BoundServer {
    policy: Policy,
    sock67: Arc<UdpSocket>,
    sock4011: Option<Arc<UdpSocket>>,
    db: Option<Arc<LeaseDb>>,
    table: LeaseTable,
}

impl BoundServer {
    /// Resolve our address, open the lease file, bind the sockets. Fails
    /// fast with a clear error; nothing is served yet.
    pub async fn bind(settings: DhcpSettings, data_dir: &Path) -> Result<BoundServer, DhcpError> {
        let server_ip = match settings.server_address {
            Some(a) => a,
            None => interface_ipv4(&settings.interface)?,
        };
        let (db, table) = if settings.mode == DhcpMode::Authoritative {
            std::fs::create_dir_all(data_dir).map_err(|source| DhcpError::DataDir {
                path: data_dir.display().to_string(),
                source,
            })?;
            let path = data_dir.join(LEASE_FILE);
            let (db, leases) = tokio::task::spawn_blocking(move || {
                let db = LeaseDb::open(&path)?;
                let leases = db.load()?;
                Ok::<_, LeaseDbError>((db, leases))
            })
            .await
            .map_err(|e| DhcpError::Task(e.to_string()))??;
            (Some(Arc::new(db)), LeaseTable::load(leases))
        } else {
            (None, LeaseTable::new())
        };
        let sock67 = Arc::new(udp_socket(&settings.interface, 67)?);
        let sock4011 = if settings.mode == DhcpMode::Proxy && settings.proxy_port_4011 {
            Some(Arc::new(udp_socket(&settings.interface, 4011)?))
        } else {
            None
        };
        tracing::info!(interface = %settings.interface, server = %server_ip, mode = ?settings.mode, leases = table.len(), "dhcp server bound");
        Ok(BoundServer {
            policy: Policy::new(settings, server_ip),
            sock67,
            sock4011,
            db,
            table,
        })
    }

    /// Serve until `cancel` fires.
    pub async fn serve(
        self,
        directory: Directory,
        store: Arc<dyn Store>,
        recorder: BootRecorder,
        metrics: DhcpMetrics,
        cancel: CancellationToken,
    ) -> Result<(), DhcpError> {
        let BoundServer {
            policy,
            sock67,
            sock4011,
            db,
            mut table,
        } = self;
        let disc_tx = (policy.cfg.discovery && policy.cfg.record_discovered)
            .then(|| discovery::spawn(store, cancel.clone()));
        let out = Outbox {
            sock67: sock67.clone(),
            sock4011: sock4011.clone(),
            metrics: metrics.clone(),
        };
        let (commit_tx, commit_rx) = mpsc::channel::<Pending>(MAX_BATCH);
        let committer = db.map(|db| tokio::spawn(committer(db, commit_rx, out.clone())));
        let mut sweep = tokio::time::interval(Duration::from_secs(5));
        let mut b67 = vec![0u8; MAX_LEN + 1];
        let mut b4011 = vec![0u8; MAX_LEN + 1];
        let ctx = Handler {
            policy: &policy,
            directory: &directory,
            recorder: &recorder,
            disc_tx: disc_tx.as_ref(),
            metrics: &metrics,
            out: &out,
            commit_tx: &commit_tx,
        };
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                r = sock67.recv_from(&mut b67) => {
                    if let Ok((n, src)) = r {
                        ctx.packet(&b67[..n], src, Via::Port67, &mut table).await;
                        // Drain what is already queued before yielding.
                        for _ in 0..64 {
                            match sock67.try_recv_from(&mut b67) {
                                Ok((n, src)) => ctx.packet(&b67[..n], src, Via::Port67, &mut table).await,
                                Err(_) => break,
                            }
                        }
                    }
                }
                r = recv_opt(sock4011.as_deref(), &mut b4011) => {
                    if let Ok((n, src)) = r {
                        ctx.packet(&b4011[..n], src, Via::Port4011, &mut table).await;
                    }
                }
                _ = sweep.tick() => {
                    let now = unix_now();
                    table.sweep(now);
                    metrics.leases_bound.set(table.bound(now).count() as i64);
                }
            }
        }
        drop(commit_tx);
        if let Some(c) = committer {
            // Let pending commits finish so their replies are not lost.
            let _ = tokio::time::timeout(Duration::from_secs(5), c).await;
        }
        Ok(())
    }
}

async fn recv_opt(s: Option<&UdpSocket>, b: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
    match s {
        Some(s) => s.recv_from(b).await,
        None => std::future::pending().await,
    }
}

/// Bind and serve: what `metalherd serve` runs when the config has `dhcp:`.
pub async fn run(
    settings: DhcpSettings,
    directory: Directory,
    store: Arc<dyn Store>,
    recorder: BootRecorder,
    data_dir: &Path,
    metrics: DhcpMetrics,
    cancel: CancellationToken,
) -> Result<(), DhcpError> {
    BoundServer::bind(settings, data_dir)
        .await?
        .serve(directory, store, recorder, metrics, cancel)
        .await
}

/// A reply waiting for its lease writes to be durable.
struct Pending {
    writes: Vec<LeaseWrite>,
    reply: Option<(Reply, SocketAddr, Via)>,
}

#[derive(Clone)]
struct Outbox {
    sock67: Arc<UdpSocket>,
    sock4011: Option<Arc<UdpSocket>>,
    metrics: DhcpMetrics,
}

impl Outbox {
    async fn send(&self, r: &Reply, src: SocketAddr, via: Via) {
        let (sock, to) = match r.to {
            Dest::Relay(g) => (&self.sock67, SocketAddr::from((g, 67))),
            Dest::Broadcast => (&self.sock67, SocketAddr::from((Ipv4Addr::BROADCAST, 68))),
            Dest::Unicast(ip) => (&self.sock67, SocketAddr::from((ip, 68))),
            Dest::Source => match (via, &self.sock4011) {
                (Via::Port4011, Some(s)) => (s, src),
                _ => (&self.sock67, src),
            },
        };
        match sock.send_to(&r.bytes, to).await {
            Ok(_) => {
                self.metrics
                    .replies
                    .get_or_create(&TypeLabel {
                        message_type: type_label(r.msg_type),
                    })
                    .inc();
            }
            Err(e) => {
                tracing::debug!(%to, error = %e, "dhcp send failed");
                self.metrics.drop("send_failed");
            }
        }
    }
}

async fn committer(db: Arc<LeaseDb>, mut rx: mpsc::Receiver<Pending>, out: Outbox) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        let writes: Vec<LeaseWrite> = batch
            .iter()
            .flat_map(|p| p.writes.iter().cloned())
            .collect();
        let db2 = db.clone();
        let res = tokio::task::spawn_blocking(move || db2.apply(&writes)).await;
        match res {
            Ok(Ok(())) => {
                out.metrics.lease_commits.inc();
                for p in &batch {
                    if let Some((r, src, via)) = &p.reply {
                        out.send(r, *src, *via).await;
                    }
                }
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, replies = batch.len(), "lease commit failed; replies withheld");
                out.metrics.lease_commit_errors.inc();
            }
            Err(e) => {
                tracing::error!(error = %e, "lease commit task failed; replies withheld");
                out.metrics.lease_commit_errors.inc();
            }
        }
    }
}

struct Handler<'a> {
    policy: &'a Policy,
    directory: &'a Directory,
    recorder: &'a BootRecorder,
    disc_tx: Option<&'a mpsc::Sender<super::policy::Discovered>>,
    metrics: &'a DhcpMetrics,
    out: &'a Outbox,
    commit_tx: &'a mpsc::Sender<Pending>,
}

impl Handler<'_> {
    async fn packet(&self, bytes: &[u8], src: SocketAddr, via: Via, table: &mut LeaseTable) {
        let xid = bytes
            .get(4..8)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        let mac = bytes.get(28..34).map(hex::encode);
        let span = tracing::debug_span!("dhcp", %src, xid = ?xid, mac = ?mac);
        let out = self
            .policy
            .handle(bytes, via, self.directory, table, unix_now());
        self.after(out, src, via).instrument(span).await;
    }

    async fn after(&self, out: Outcome, src: SocketAddr, via: Via) {
        let m = self.metrics;
        m.requests
            .get_or_create(&TypeLabel {
                message_type: out.request_type.map(type_label).unwrap_or("malformed"),
            })
            .inc();
        if let Some(d) = out.dropped {
            m.drop(d.label());
            tracing::debug!(reason = %d, "no reply");
        }
        if let Some(n) = out.notice {
            self.recorder.record(
                &n.namespace,
                &n.name,
                BootEvent {
                    time: jiff::Timestamp::now(),
                    step: n.step.to_string(),
                    detail: n.detail,
                    bytes: None,
                    boot_id: n.boot_id,
                },
            );
        }
        if let (Some(d), Some(tx)) = (out.discovered, self.disc_tx)
            && tx.try_send(d).is_err()
        {
            m.discovered_dropped.inc();
        }
        if out.writes.is_empty() {
            if let Some(r) = out.reply {
                self.out.send(&r, src, via).await;
            }
            return;
        }
        let p = Pending {
            writes: out.writes,
            reply: out.reply.map(|r| (r, src, via)),
        };
        if self.commit_tx.send(p).await.is_err() {
            m.drop("commit_closed");
        }
    }
}
