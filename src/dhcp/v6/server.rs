//! The DHCPv6 UDP driver: binds `[::]:547` (IPv6 only) on the boot
//! interface with SO_BINDTODEVICE and joins ff02::1:2 there (and `[::]:4011`
//! in proxy mode, for EDK2 PXE's boot-service Request); feeds each datagram
//! to the policy and sends replies to the client's link-local address on
//! port 546, to the relay on 547, or back to a 4011 sender. Datagrams are
//! read in bursts; the lease writes of a burst are journaled together
//! before the replies that depend on them are sent. No DHCP decisions here.

use std::io;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::config::Dhcp6Settings;
use super::lease::{LeaseTable6, LeaseWrite6, duid_key};
use super::lease_store::{Lease6Store, Lease6StoreError};
use super::lease_view::LeaseView6;
use super::message::{Duid, MAX_LEN, Message};
use super::metrics::Dhcp6Metrics;
use super::policy::{Dest6, Outcome6, Policy6, Reply6, Via6, eui64_mac};
use crate::dhcp::config::DhcpMode;
use crate::dhcp::lease_store::LeaseSync;
use crate::dhcp::limit::Limiter;
use crate::dhcp::server::{record_notice, unix_now};
use crate::directory::{BootRecorder, Directory};

/// Datagrams read before their lease writes are journaled and the replies
/// sent.
const BURST: usize = 64;
pub const SERVER_PORT: u16 = 547;
pub const CLIENT_PORT: u16 = 546;
pub const ALL_DHCP: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 1, 2);

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Dhcp6Error {
    #[error("dhcp6: interface {interface}: {message}")]
    Interface { interface: String, message: String },
    #[error("dhcp6: cannot bind UDP port {port} on {interface}: {source}")]
    Bind {
        interface: String,
        port: u16,
        #[source]
        source: io::Error,
    },
    #[error("dhcp6: {0}")]
    Leases(#[from] Lease6StoreError),
    #[error("dhcp6: cannot create data directory {path}: {source}")]
    DataDir {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("dhcp6: lease task failed: {0}")]
    Task(String),
}

/// What the interface has: its index, MAC and first non-link-local IPv6.
struct Iface {
    index: u32,
    mac: Option<[u8; 6]>,
    global: Option<Ipv6Addr>,
}

fn interface(name: &str) -> Result<Iface, Dhcp6Error> {
    let e = |m: String| Dhcp6Error::Interface {
        interface: name.to_string(),
        message: m,
    };
    let index =
        nix::net::if_::if_nametoindex(name).map_err(|x| e(format!("no such interface ({x})")))?;
    let mut out = Iface {
        index,
        mac: None,
        global: None,
    };
    for a in nix::ifaddrs::getifaddrs().map_err(|x| e(x.to_string()))? {
        if a.interface_name != name {
            continue;
        }
        let Some(s) = a.address else { continue };
        if let Some(l) = s.as_link_addr()
            && let Some(m) = l.addr()
            && m != [0; 6]
        {
            out.mac.get_or_insert(m);
        }
        if let Some(v6) = s.as_sockaddr_in6() {
            let ip = v6.ip();
            if !ip.is_unicast_link_local() && !ip.is_loopback() && !ip.is_multicast() {
                out.global.get_or_insert(ip);
            }
        }
    }
    Ok(out)
}

fn udp_socket(iface: &str, index: u32, port: u16) -> Result<UdpSocket, Dhcp6Error> {
    let bind_err = |source| Dhcp6Error::Bind {
        interface: iface.to_string(),
        port,
        source,
    };
    let s = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP)).map_err(bind_err)?;
    s.set_only_v6(true).map_err(bind_err)?;
    s.set_reuse_address(true).map_err(bind_err)?;
    s.bind_device(Some(iface.as_bytes())).map_err(bind_err)?;
    // Bursts (a rack powering on) must queue, not drop: ask for 4 MiB.
    let _ = s.set_recv_buffer_size(4 << 20);
    s.set_nonblocking(true).map_err(bind_err)?;
    s.bind(&SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0).into())
        .map_err(bind_err)?;
    if port == SERVER_PORT {
        s.join_multicast_v6(&ALL_DHCP, index).map_err(bind_err)?;
    }
    s.set_multicast_if_v6(index).map_err(bind_err)?;
    UdpSocket::from_std(s.into()).map_err(bind_err)
}

/// A DHCPv6 server with its sockets bound and its leases loaded.
pub struct BoundServer6 {
    policy: Policy6,
    index: u32,
    sock547: Arc<UdpSocket>,
    sock4011: Option<Arc<UdpSocket>>,
    store: Option<Lease6Store>,
    table: LeaseTable6,
    view: LeaseView6,
}

impl BoundServer6 {
    /// Resolve our DUID and address, recover the leases, bind the sockets.
    pub async fn bind(
        settings: Dhcp6Settings,
        data_dir: &Path,
    ) -> Result<BoundServer6, Dhcp6Error> {
        let ifc = interface(&settings.interface)?;
        let duid = match (&settings.server_duid, ifc.mac) {
            (Some(d), _) => d.clone(),
            (None, Some(mac)) => Duid::link_layer(mac),
            (None, None) => {
                return Err(Dhcp6Error::Interface {
                    interface: settings.interface.clone(),
                    message: "has no MAC address to build a DUID from (set dhcp6.serverDuid)"
                        .into(),
                });
            }
        };
        let address = settings.server_address.or(ifc.global);
        let (store, table, view) = if settings.mode == DhcpMode::Authoritative {
            std::fs::create_dir_all(data_dir).map_err(|source| Dhcp6Error::DataDir {
                path: data_dir.display().to_string(),
                source,
            })?;
            let (dir, sync) = (data_dir.to_path_buf(), settings.lease_sync);
            let (store, rec) = tokio::task::spawn_blocking(move || Lease6Store::open(&dir, sync))
                .await
                .map_err(|e| Dhcp6Error::Task(e.to_string()))??;
            if rec.snapshot_damaged {
                tracing::error!(
                    "DHCPv6 lease snapshot is damaged: leases recorded in it from the damage on are lost (a client that renews gets its address back unless another client took it first)"
                );
            }
            if rec.torn {
                tracing::warn!(
                    "DHCPv6 lease journal ended in a torn or corrupt record (power loss?); records before it were recovered"
                );
            }
            tracing::info!(
                leases = rec.leases.len(),
                replayed = rec.replayed,
                "DHCPv6 leases recovered"
            );
            let view = LeaseView6::new(&rec.leases);
            (Some(store), LeaseTable6::load(rec.leases, unix_now()), view)
        } else {
            (None, LeaseTable6::new(), LeaseView6::default())
        };
        let sock547 = Arc::new(udp_socket(&settings.interface, ifc.index, SERVER_PORT)?);
        let sock4011 = if settings.mode == DhcpMode::Proxy && settings.proxy_port_4011 {
            Some(Arc::new(udp_socket(&settings.interface, ifc.index, 4011)?))
        } else {
            None
        };
        if address.is_none() {
            tracing::warn!(interface = %settings.interface, "dhcp6: no ULA/global address on the interface and no dhcp6.serverAddress: PXE clients get no tftp:// URL");
        }
        tracing::info!(interface = %settings.interface, duid = %duid.hex(), address = ?address, mode = ?settings.mode, leases = table.len(), "dhcp6 server bound");
        Ok(BoundServer6 {
            policy: Policy6::new(settings, duid, address),
            index: ifc.index,
            sock547,
            sock4011,
            store,
            table,
            view,
        })
    }

    /// A read handle on the bound leases (by MAC), for the boot services.
    pub fn lease_view(&self) -> LeaseView6 {
        self.view.clone()
    }

    /// Serve until `cancel` fires.
    pub async fn serve(
        self,
        directory: Directory,
        recorder: BootRecorder,
        metrics: Dhcp6Metrics,
        cancel: CancellationToken,
    ) -> Result<(), Dhcp6Error> {
        let BoundServer6 {
            policy,
            index,
            sock547,
            sock4011,
            mut store,
            mut table,
            view,
        } = self;
        let syncer = start_syncer(&store, &metrics, &cancel);
        let limiter = Mutex::new(Limiter::new(policy.cfg.rate_limit, millis()));
        let h = Handler {
            policy: &policy,
            directory: &directory,
            recorder: &recorder,
            metrics: &metrics,
            limiter: &limiter,
            index,
            sock547: &sock547,
            sock4011: sock4011.as_deref(),
        };
        let mut b547 = vec![0u8; MAX_LEN + 1];
        let mut b4011 = vec![0u8; MAX_LEN + 1];
        let mut sweep = tokio::time::interval(Duration::from_secs(5));
        let mut writes: Vec<LeaseWrite6> = Vec::new();
        let mut held: Vec<(Reply6, SocketAddrV6)> = Vec::new();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                r = sock547.recv_from(&mut b547) => {
                    if let Ok((n, src)) = r {
                        let now = unix_now();
                        h.packet(&b547[..n], src, Via6::Port547, &mut table, now, &mut writes, &mut held).await;
                        for _ in 1..BURST {
                            match sock547.try_recv_from(&mut b547) {
                                Ok((n, src)) => h.packet(&b547[..n], src, Via6::Port547, &mut table, now, &mut writes, &mut held).await,
                                Err(_) => break,
                            }
                        }
                        h.persist(&mut store, &view, &table, &mut writes, &mut held).await;
                    }
                }
                r = recv_opt(sock4011.as_deref(), &mut b4011) => {
                    if let Ok((n, src)) = r {
                        h.packet(&b4011[..n], src, Via6::Port4011, &mut table, unix_now(), &mut writes, &mut held).await;
                        h.persist(&mut store, &view, &table, &mut writes, &mut held).await;
                    }
                }
                _ = sweep.tick() => {
                    let now = unix_now();
                    table.sweep(now);
                    metrics.leases_bound.set(table.bound(now).count() as i64);
                }
            }
        }
        if let Some(t) = syncer {
            t.abort();
        }
        if let Some(s) = store
            && let Ok(Err(e)) = tokio::task::spawn_blocking(move || s.close()).await
        {
            tracing::warn!(error = %e, "DHCPv6 lease journal flush at shutdown failed");
        }
        Ok(())
    }
}

/// Bind and serve: what `metalherd serve` runs when the config has `dhcp6:`.
pub async fn run(
    settings: Dhcp6Settings,
    directory: Directory,
    recorder: BootRecorder,
    data_dir: &Path,
    metrics: Dhcp6Metrics,
    cancel: CancellationToken,
) -> Result<(), Dhcp6Error> {
    BoundServer6::bind(settings, data_dir)
        .await?
        .serve(directory, recorder, metrics, cancel)
        .await
}

/// In `batch` mode, flush the journal every interval in the background.
fn start_syncer(
    store: &Option<Lease6Store>,
    metrics: &Dhcp6Metrics,
    cancel: &CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    let s = store.as_ref()?;
    let LeaseSync::Batch { interval } = s.sync_mode() else {
        return None;
    };
    let (file, m, cancel) = (s.sync_handle(), metrics.clone(), cancel.clone());
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tick.tick() => {}
            }
            let f = file.clone();
            if !matches!(
                tokio::task::spawn_blocking(move || f.sync_data()).await,
                Ok(Ok(()))
            ) {
                tracing::error!("DHCPv6 lease journal flush failed");
                m.lease_sync_errors.inc();
            }
        }
    }))
}

async fn recv_opt(s: Option<&UdpSocket>, b: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
    match s {
        Some(s) => s.recv_from(b).await,
        None => std::future::pending().await,
    }
}

fn millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

struct Handler<'a> {
    policy: &'a Policy6,
    directory: &'a Directory,
    recorder: &'a BootRecorder,
    metrics: &'a Dhcp6Metrics,
    limiter: &'a Mutex<Limiter>,
    index: u32,
    sock547: &'a UdpSocket,
    sock4011: Option<&'a UdpSocket>,
}

/// The rate limiter's key of a message: the client's MAC when it shows
/// one, else six bytes of its DUID's key.
fn rate_key(m: &Message, src: &SocketAddrV6) -> Option<[u8; 6]> {
    if let Some(mac) = m
        .mac()
        .or_else(|| eui64_mac(src.ip()).filter(|_| m.relays.is_empty()))
    {
        return Some(mac);
    }
    let k = duid_key(&m.msg.client_id.as_ref()?.0).0;
    let mut out = [0u8; 6];
    out.copy_from_slice(&k[10..16]);
    out[0] |= 0x02;
    Some(out)
}

impl Handler<'_> {
    #[allow(clippy::too_many_arguments)]
    async fn packet(
        &self,
        bytes: &[u8],
        src: SocketAddr,
        via: Via6,
        table: &mut LeaseTable6,
        now: u64,
        writes: &mut Vec<LeaseWrite6>,
        held: &mut Vec<(Reply6, SocketAddrV6)>,
    ) {
        let SocketAddr::V6(src) = src else { return };
        let parsed = Message::parse(bytes).ok();
        let span = tracing::debug_span!(
            "dhcp6",
            %src,
            xid = parsed.as_ref().map(|m| m.msg.xid),
            mac = %crate::api::MacAddr(parsed.as_ref().and_then(|m| rate_key(m, &src)).unwrap_or_default()),
        );
        if let Some(key) = parsed.as_ref().and_then(|m| rate_key(m, &src)) {
            let known = self.directory.by_mac(&key).is_some();
            let checked = self
                .limiter
                .lock()
                .map(|mut l| l.check(key, known, millis()))
                .unwrap_or(Ok(()));
            if let Err(d) = checked {
                self.metrics.drop(d.label());
                return;
            }
        }
        let out = self
            .policy
            .handle(bytes, via, src, self.directory, table, now);
        let now_reply = {
            let _e = span.enter();
            self.after(out, src, writes, held)
        };
        if let Some((r, to)) = now_reply {
            self.send(&r, to).instrument(span).await;
        }
    }

    /// Count and record; the reply is returned when it can go now, held
    /// when it depends on lease writes.
    fn after(
        &self,
        out: Outcome6,
        src: SocketAddrV6,
        writes: &mut Vec<LeaseWrite6>,
        held: &mut Vec<(Reply6, SocketAddrV6)>,
    ) -> Option<(Reply6, SocketAddrV6)> {
        self.metrics.requested(out.request_type);
        if let Some(d) = out.dropped {
            self.metrics.drop(d.label());
            tracing::debug!(reason = %d, "no reply");
        }
        if let Some(n) = out.notice {
            record_notice(self.recorder, n);
        }
        if let Some(w) = out.warning {
            self.recorder
                .warn(&w.namespace, &w.name, w.reason, &w.message);
        }
        let reply = out.reply.map(|r| (r, src));
        if out.writes.is_empty() {
            return reply;
        }
        writes.extend(out.writes);
        held.extend(reply);
        None
    }

    /// Journal the burst's writes, then send the replies held for them.
    async fn persist(
        &self,
        store: &mut Option<Lease6Store>,
        view: &LeaseView6,
        table: &LeaseTable6,
        writes: &mut Vec<LeaseWrite6>,
        held: &mut Vec<(Reply6, SocketAddrV6)>,
    ) {
        let ok = match store {
            None => true,
            Some(_) if writes.is_empty() => true,
            Some(s) => match s.append(writes) {
                Ok(()) => {
                    self.metrics.lease_commits.inc();
                    view.apply(writes);
                    if s.wants_compaction()
                        && let Err(e) = s.compact(table.all())
                    {
                        tracing::error!(error = %e, "DHCPv6 lease compaction failed");
                    }
                    true
                }
                Err(e) => {
                    tracing::error!(error = %e, replies = held.len(), "DHCPv6 lease journal write failed; replies withheld");
                    self.metrics.lease_commit_errors.inc();
                    false
                }
            },
        };
        writes.clear();
        for (r, src) in held.drain(..) {
            if ok {
                self.send(&r, src).await;
            }
        }
    }

    async fn send(&self, r: &Reply6, src: SocketAddrV6) {
        let scope = if src.scope_id() != 0 {
            src.scope_id()
        } else {
            self.index
        };
        let (sock, to) = match r.to {
            Dest6::Client => (
                self.sock547,
                SocketAddrV6::new(*src.ip(), CLIENT_PORT, 0, scope),
            ),
            Dest6::Relay => (
                self.sock547,
                SocketAddrV6::new(*src.ip(), SERVER_PORT, 0, scope),
            ),
            Dest6::Source => (self.sock4011.unwrap_or(self.sock547), src),
        };
        let sent = match sock.try_send_to(&r.bytes, to.into()) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => sock.send_to(&r.bytes, to).await,
            other => other,
        };
        match sent {
            Ok(_) => self.metrics.replied(r.msg_type),
            Err(e) => {
                tracing::debug!(%to, error = %e, "dhcp6 send failed");
                self.metrics.drop("send_failed");
            }
        }
    }
}
