//! An optional IPv6 router advertisement on the boot interface (an ICMPv6
//! service of its own, started by `serve` beside the boot HTTP server).
//!
//! By default it is the least intrusive one that ends iPXE's wait for IPv6
//! autoconfiguration (about 13 s per boot with Debian's iPXE when no router
//! answers): router lifetime 0 (not a default router), no prefix options
//! (nobody forms an address from it), M and O flags clear (no DHCPv6), hop
//! limit, reachable time and retransmit timer 0 (unspecified: hosts keep
//! their own). iPXE takes any solicited advertisement as "IPv6
//! configuration done" and moves on with IPv4. Trade-offs: every host on
//! the link sees an extra router that offers nothing; a link that has a
//! real IPv6 router needs none of this (leave it off); switches with RA
//! guard may drop it; and iPXE then has no IPv6 beyond link-local, so it
//! boots over IPv4 only.
//!
//! For an IPv6-only boot network the settings ([`config`]) add what the
//! firmware needs: the M flag (iPXE runs stateful DHCPv6 only when an
//! advertisement sets it; O alone makes it stateless), a Prefix
//! Information option with L set for the boot prefix (EDK2's PXE and HTTP
//! boot reach a server only through an on-link prefix or a default
//! router), and a router lifetime when hosts should route through this
//! host. The bytes are built by [`advert`] (pure).
//!
//! Solicitations (ICMPv6 133) are answered at once with a multicast
//! advertisement (at most one per 500 ms); an unsolicited one goes out every
//! `interval`. Needs CAP_NET_RAW. The socket loop is thin.

pub mod advert;
pub mod config;

pub use advert::{Advertisement, Prefix, is_solicitation};
pub use config::{PrefixConfig, RaConfigError, RouterAdvertisementConfig};

use std::io::Read;
use std::net::SocketAddrV6;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tokio::io::unix::AsyncFd;
use tokio_util::sync::CancellationToken;

/// Validated settings (from `boot.routerAdvertisement` in the config file,
/// see [`config`]).
#[derive(Clone, Debug)]
pub struct RaSettings {
    pub interface: String,
    pub interval: Duration,
    /// What every advertisement says.
    pub advertisement: Advertisement,
}

use advert::{ALL_NODES, ALL_ROUTERS};

#[derive(Debug, thiserror::Error)]
pub enum RaError {
    #[error("router advertisements on {interface}: {source}")]
    Io {
        interface: String,
        #[source]
        source: std::io::Error,
    },
}

fn open(interface: &str) -> Result<(Socket, u32), std::io::Error> {
    let ifindex = nix::net::if_::if_nametoindex(interface).map_err(std::io::Error::from)?;
    let s = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::ICMPV6))?;
    s.bind_device(Some(interface.as_bytes()))?;
    s.set_multicast_hops_v6(255)?;
    s.set_unicast_hops_v6(255)?;
    s.set_multicast_if_v6(ifindex)?;
    s.set_multicast_loop_v6(false)?;
    s.join_multicast_v6(&ALL_ROUTERS, ifindex)?;
    s.set_nonblocking(true)?;
    Ok((s, ifindex))
}

/// Advertise until cancelled. Errors are logged, and the socket reopened
/// after a pause (the interface may come up later).
pub async fn run(cfg: RaSettings, cancel: CancellationToken) {
    loop {
        match run_once(&cfg, &cancel).await {
            Ok(()) => return,
            Err(e) => tracing::warn!(error = %e, "router advertisement; retrying in 5 s"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
}

async fn run_once(cfg: &RaSettings, cancel: &CancellationToken) -> Result<(), RaError> {
    let io = |source| RaError::Io {
        interface: cfg.interface.clone(),
        source,
    };
    let (sock, ifindex) = open(&cfg.interface).map_err(io)?;
    // The socket owns its descriptor and lives inside the AsyncFd, so the
    // I/O-safety concern behind the deprecation does not arise here (and
    // `register` is unsafe, which this crate forbids).
    #[allow(deprecated)]
    let fd = AsyncFd::new(sock).map_err(io)?;
    let dest = SockAddr::from(SocketAddrV6::new(ALL_NODES, 0, 0, ifindex));
    let pkt = cfg.advertisement.encode();
    let mut tick = tokio::time::interval(cfg.interval);
    let mut last_sent: Option<Instant> = None;
    let mut buf = [0u8; 1500];
    let a = &cfg.advertisement;
    tracing::info!(interface = %cfg.interface, managed = a.managed, other = a.other,
        router_lifetime = a.router_lifetime, prefixes = a.prefixes.len(),
        "sending IPv6 router advertisements");
    loop {
        let send = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tick.tick() => true,
            r = fd.readable() => {
                let mut guard = r.map_err(io)?;
                let mut solicited = false;
                // Drain everything queued; answer once.
                loop {
                    match guard.try_io(|inner| inner.get_ref().read(&mut buf)) {
                        Ok(Ok(n)) => solicited |= is_solicitation(&buf[..n]),
                        Ok(Err(e)) => return Err(io(e)),
                        Err(_would_block) => break,
                    }
                }
                solicited && last_sent.is_none_or(|t| t.elapsed() >= Duration::from_millis(500))
            }
        };
        if send {
            match fd.get_ref().send_to(&pkt, &dest) {
                Ok(_) => last_sent = Some(Instant::now()),
                // No link-local address yet (DAD), or the link is down: try later.
                Err(e) => tracing::debug!(error = %e, "router advertisement not sent"),
            }
        }
    }
}
