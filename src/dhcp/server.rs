//! The UDP driver: binds port 67 (and 4011 in proxy mode) on the boot
//! interface with SO_BINDTODEVICE, feeds each datagram to the policy, and
//! sends replies (broadcast, unicast or to the relay). Datagrams are read
//! in bursts (whatever is queued, up to [`BURST`]); the lease writes of a
//! burst are persisted together (`persist`, `lease_store`) before the
//! replies that depend on them are sent. No DHCP decisions here.

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
use super::discovery::DiscoveredClient;
use super::lease::{LeaseTable, LeaseWrite};
use super::lease_store::{DEFAULT_RECORDS, LeaseStore, LeaseStoreError};
use super::lease_view::LeaseView;
use super::limit::Limiter;
use super::metrics::DhcpMetrics;
use super::observe::Seen;
use super::packet::MAX_LEN;
use super::persist::{Held, Outbox, Persister};
use super::policy::{Notice, Outcome, Policy, Probe, Via};
use super::probe;
use crate::api::BootEvent;
use crate::directory::{BootRecorder, Directory};

pub use super::lease_store::LEASE_FILE;
/// Datagrams read before their lease writes are persisted and the replies
/// sent.
const BURST: usize = 64;

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
    Leases(#[from] LeaseStoreError),
    #[error("dhcp: cannot create data directory {path}: {source}")]
    DataDir {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("dhcp: lease task failed: {0}")]
    Task(String),
    #[error("dhcp: pingCheck needs raw ICMP sockets (root or CAP_NET_RAW): {0}")]
    Probe(#[source] io::Error),
}

/// Append the policy's boot-history note for a known Machine (its OFFER or
/// ACK) to the Machine's `status.bootHistory`.
pub fn record_notice(recorder: &BootRecorder, n: Notice) {
    recorder.record(
        &n.namespace,
        &n.name,
        BootEvent {
            time: jiff::Timestamp::now(),
            step: n.step,
            detail: n.detail,
            bytes: None,
            boot_id: n.boot_id,
        },
    );
}

/// Milliseconds since the Unix epoch (the rate limiter's clock).
fn millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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
    store: Option<LeaseStore>,
    table: LeaseTable,
    view: LeaseView,
    release_tx: mpsc::Sender<[u8; 6]>,
    release_rx: mpsc::Receiver<[u8; 6]>,
    observer: Option<mpsc::Sender<Seen>>,
}

/// Gives a retired machine's lease back from outside the server (the
/// controller, when a Machine is deprovisioned). Never blocks: a full queue
/// drops the request, and the lease then simply expires.
#[derive(Clone)]
pub struct LeaseReleaser {
    tx: mpsc::Sender<[u8; 6]>,
}

impl LeaseReleaser {
    /// Release whatever address `mac` holds; true when the request was queued.
    pub fn release(&self, mac: [u8; 6]) -> bool {
        self.tx.try_send(mac).is_ok()
    }
}

impl BoundServer {
    /// Resolve our address, open and recover the leases, bind the sockets.
    /// Fails fast with a clear error; nothing is served yet.
    pub async fn bind(settings: DhcpSettings, data_dir: &Path) -> Result<BoundServer, DhcpError> {
        let server_ip = match settings.server_address {
            Some(a) => a,
            None => interface_ipv4(&settings.interface)?,
        };
        let (store, table, view) = if settings.mode == DhcpMode::Authoritative {
            std::fs::create_dir_all(data_dir).map_err(|source| DhcpError::DataDir {
                path: data_dir.display().to_string(),
                source,
            })?;
            let (dir, sync) = (data_dir.to_path_buf(), settings.lease_sync);
            let (store, rec) =
                tokio::task::spawn_blocking(move || LeaseStore::open(&dir, DEFAULT_RECORDS, sync))
                    .await
                    .map_err(|e| DhcpError::Task(e.to_string()))??;
            if rec.torn > 0 {
                tracing::warn!(
                    journals = rec.torn,
                    "lease journal ended in a torn or corrupt record (power loss?); records before it were recovered"
                );
            }
            tracing::info!(leases = rec.leases.len(), replayed = rec.replayed, sync = ?settings.lease_sync, "leases recovered");
            let view = LeaseView::new(&rec.leases);
            (Some(store), LeaseTable::load(rec.leases), view)
        } else {
            (None, LeaseTable::new(), LeaseView::default())
        };
        let sock67 = Arc::new(udp_socket(&settings.interface, 67)?);
        let sock4011 = if settings.mode == DhcpMode::Proxy && settings.proxy_port_4011 {
            Some(Arc::new(udp_socket(&settings.interface, 4011)?))
        } else {
            None
        };
        tracing::info!(interface = %settings.interface, server = %server_ip, mode = ?settings.mode, leases = table.len(), "dhcp server bound");
        let (release_tx, release_rx) = mpsc::channel(256);
        let mut policy = Policy::new(settings, server_ip);
        if policy.cfg.ping_check == Some(true) && policy.cfg.mode == DhcpMode::Authoritative {
            super::probe::check_available().map_err(DhcpError::Probe)?;
            policy.probe_until = unix_now() + policy.cfg.max_lease_time();
            tracing::info!(
                seconds = policy.cfg.max_lease_time(),
                "dhcp: dynamic offers of addresses unknown to this lease table are pinged first"
            );
        }
        Ok(BoundServer {
            policy,
            sock67,
            sock4011,
            store,
            table,
            view,
            release_tx,
            release_rx,
            observer: None,
        })
    }

    /// Also hand every well-formed request read to `tx` (never waiting:
    /// when `tx` is full the watcher misses the packet). `hw-test` watches
    /// a server PXE-boot through this.
    pub fn observe(mut self, tx: mpsc::Sender<Seen>) -> BoundServer {
        self.observer = Some(tx);
        self
    }

    /// A handle that releases leases while the server runs.
    pub fn releaser(&self) -> LeaseReleaser {
        LeaseReleaser {
            tx: self.release_tx.clone(),
        }
    }

    /// A read handle on the bound leases (by MAC), for the boot services.
    pub fn lease_view(&self) -> LeaseView {
        self.view.clone()
    }

    /// Serve until `cancel` fires.
    pub async fn serve(
        self,
        directory: Directory,
        discovered: Option<mpsc::Sender<DiscoveredClient>>,
        recorder: BootRecorder,
        metrics: DhcpMetrics,
        cancel: CancellationToken,
    ) -> Result<(), DhcpError> {
        let BoundServer {
            policy,
            sock67,
            sock4011,
            store: leases,
            mut table,
            view,
            release_tx,
            mut release_rx,
            observer,
        } = self;
        drop(release_tx);
        let disc_tx = discovered.filter(|_| policy.cfg.discovery && policy.cfg.record_discovered);
        let out = Outbox {
            sock67: sock67.clone(),
            sock4011: sock4011.clone(),
            metrics: metrics.clone(),
        };
        let mut persister = Persister::start(leases, view, out.clone(), cancel.clone());
        let mut sweep = tokio::time::interval(Duration::from_secs(5));
        let mut b67 = vec![0u8; MAX_LEN + 1];
        let mut b4011 = vec![0u8; MAX_LEN + 1];
        let limiter = std::sync::Mutex::new(Limiter::new(policy.cfg.rate_limit, millis()));
        let ctx = Handler {
            limiter: &limiter,
            policy: &policy,
            directory: &directory,
            recorder: &recorder,
            disc_tx: disc_tx.as_ref(),
            metrics: &metrics,
            out: &out,
            observer: observer.as_ref(),
        };
        let mut writes: Vec<LeaseWrite> = Vec::new();
        let mut held: Vec<Held> = Vec::new();
        let mut probing: Vec<(Held, Probe)> = Vec::new();
        let mut probes = Probes::new(policy.cfg.ping_timeout);
        let (probe_tx, mut probe_rx) = mpsc::channel(probe::MAX_IN_FLIGHT);
        loop {
            probes.start(&mut probing, &probe_tx, &metrics);
            tokio::select! {
                _ = cancel.cancelled() => break,
                r = sock67.recv_from(&mut b67) => {
                    if let Ok((n, src)) = r {
                        let now = unix_now();
                        ctx.packet(&b67[..n], src, Via::Port67, &mut table, now, &mut writes, &mut held, &mut probing).await;
                        // Take what is already queued, then persist once.
                        for _ in 1..BURST {
                            match sock67.try_recv_from(&mut b67) {
                                Ok((n, src)) => ctx.packet(&b67[..n], src, Via::Port67, &mut table, now, &mut writes, &mut held, &mut probing).await,
                                Err(_) => break,
                            }
                        }
                        persister.persist(&mut writes, &mut held, &out).await;
                    }
                }
                r = recv_opt(sock4011.as_deref(), &mut b4011) => {
                    if let Ok((n, src)) = r {
                        ctx.packet(&b4011[..n], src, Via::Port4011, &mut table, unix_now(), &mut writes, &mut held, &mut probing).await;
                        persister.persist(&mut writes, &mut held, &out).await;
                    }
                }
                Some(mac) = release_rx.recv() => {
                    for (ip, client) in table.bound_to_mac(&mac) {
                        writes.extend(table.release(ip, &client, &mac));
                        tracing::info!(%ip, "lease released for a retired machine");
                    }
                    persister.persist(&mut writes, &mut held, &out).await;
                    metrics.leases_bound.set(table.bound(unix_now()).count() as i64);
                }
                Some((h, p, answered)) = probe_rx.recv() => {
                    probes.done();
                    match answered {
                        Ok(false) => held.push(h),
                        Ok(true) => {
                            writes.extend(policy.address_in_use(&p, &mut table, unix_now()));
                            metrics.drop("address_in_use");
                            tracing::warn!(ip = %p.ip, "dhcp: an address about to be offered answered a ping: quarantined, not offered");
                        }
                        Err(e) => {
                            // As ISC's server does: a failed probe does not hold the offer back.
                            tracing::warn!(ip = %p.ip, error = %e, "dhcp: ping check failed; offering anyway");
                            held.push(h);
                        }
                    }
                    persister.persist(&mut writes, &mut held, &out).await;
                }
                _ = sweep.tick() => {
                    let now = unix_now();
                    table.sweep(now);
                    metrics.leases_bound.set(table.bound(now).count() as i64);
                }
            }
        }
        // Let pending writes finish so their replies are not lost, and
        // checkpoint so the next start replays nothing.
        let _ = tokio::time::timeout(Duration::from_secs(5), persister.close()).await;
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
    discovered: Option<mpsc::Sender<DiscoveredClient>>,
    recorder: BootRecorder,
    data_dir: &Path,
    metrics: DhcpMetrics,
    cancel: CancellationToken,
) -> Result<(), DhcpError> {
    BoundServer::bind(settings, data_dir)
        .await?
        .serve(directory, discovered, recorder, metrics, cancel)
        .await
}

struct Handler<'a> {
    limiter: &'a std::sync::Mutex<Limiter>,
    policy: &'a Policy,
    directory: &'a Directory,
    recorder: &'a BootRecorder,
    disc_tx: Option<&'a mpsc::Sender<DiscoveredClient>>,
    metrics: &'a DhcpMetrics,
    out: &'a Outbox,
    observer: Option<&'a mpsc::Sender<Seen>>,
}

impl Handler<'_> {
    #[allow(clippy::too_many_arguments)]
    async fn packet(
        &self,
        bytes: &[u8],
        src: SocketAddr,
        via: Via,
        table: &mut LeaseTable,
        now: u64,
        writes: &mut Vec<LeaseWrite>,
        held: &mut Vec<Held>,
        probing: &mut Vec<(Held, Probe)>,
    ) {
        // Before the rate limiter: a watcher sees what arrived.
        if let Some(tx) = self.observer
            && let Some(seen) = Seen::parse(bytes)
        {
            let _ = tx.try_send(seen);
        }
        if let Some(mac) = super::packet::peek_mac(bytes) {
            let known = self.directory.by_mac(&mac).is_some();
            let checked = self
                .limiter
                .lock()
                .map(|mut l| l.check(mac, known, millis()))
                .unwrap_or(Ok(()));
            if let Err(d) = checked {
                self.metrics.drop(d.label());
                return;
            }
        }
        let out = self.policy.handle(bytes, via, self.directory, table, now);
        // The span's fields are only formatted when debug logging is on.
        let span = tracing::debug_span!(
            "dhcp",
            %src,
            xid = ?super::packet::peek_xid(bytes),
            mac = %crate::api::MacAddr(super::packet::peek_mac(bytes).unwrap_or_default()),
        );
        let now_reply = {
            let _e = span.enter();
            self.after(out, src, via, writes, held, probing)
        };
        if let Some(h) = now_reply {
            self.out.send(&h.reply, h.src, h.via).instrument(span).await;
        }
    }

    /// Count, record, and sort the reply: returned when it can go now,
    /// held (with its writes queued) when it depends on lease writes.
    fn after(
        &self,
        out: Outcome,
        src: SocketAddr,
        via: Via,
        writes: &mut Vec<LeaseWrite>,
        held: &mut Vec<Held>,
        probing: &mut Vec<(Held, Probe)>,
    ) -> Option<Held> {
        let m = self.metrics;
        m.requested(out.request_type);
        if let Some(d) = out.dropped {
            m.drop(d.label());
            tracing::debug!(reason = %d, "no reply");
        }
        if let Some(n) = out.notice {
            record_notice(self.recorder, n);
        }
        if let Some(w) = out.warning {
            self.recorder
                .warn(&w.namespace, &w.name, w.reason, &w.message);
        }
        if let (Some(d), Some(tx)) = (out.discovered, self.disc_tx)
            && tx.try_send(d.into()).is_err()
        {
            m.discovered_dropped.inc();
        }
        let reply = out.reply.map(|reply| Held { reply, src, via });
        writes.extend_from_slice(&out.writes);
        if let Some(p) = out.probe {
            // Sent once the ping check finds the address free.
            probing.extend(reply.map(|h| (h, p)));
            return None;
        }
        if out.writes.is_empty() {
            return reply;
        }
        held.extend(reply);
        None
    }
}

type ProbeResult = (Held, Probe, io::Result<bool>);

/// The ping checks in flight (at most [`probe::MAX_IN_FLIGHT`]).
struct Probes {
    timeout: Duration,
    in_flight: usize,
}

impl Probes {
    fn new(timeout: Duration) -> Probes {
        Probes {
            timeout,
            in_flight: 0,
        }
    }

    /// Start a ping for each held-back offer; over the cap, drop the offer
    /// (counted): the client sends its DISCOVER again.
    fn start(
        &mut self,
        probing: &mut Vec<(Held, Probe)>,
        tx: &mpsc::Sender<ProbeResult>,
        metrics: &DhcpMetrics,
    ) {
        for (h, p) in probing.drain(..) {
            if self.in_flight >= probe::MAX_IN_FLIGHT {
                metrics.drop("probe_busy");
                continue;
            }
            self.in_flight += 1;
            let (tx, timeout) = (tx.clone(), self.timeout);
            tokio::spawn(async move {
                let r = probe::in_use(p.ip, timeout).await;
                let _ = tx.send((h, p, r)).await;
            });
        }
    }

    fn done(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }
}
