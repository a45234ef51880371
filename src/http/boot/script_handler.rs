//! `GET /boot.ipxe[?mac=..&arch=..&platform=..]`: picks and renders a
//! machine's iPXE script. Without a MAC it answers a chain script that asks
//! again with iPXE's own values. An unknown MAC gets a script that says so
//! and hands back to the firmware: it never gets an OS (DHCP records it as a
//! DiscoveredMachine; this only refreshes that object's `lastSeen`). The
//! install script carries the boot's token: it goes only to the machine's
//! own address (see `access.rs`); a request from elsewhere is refused and
//! leaves a Warning event.
//!
//! The same choice, checks and boot step give a Secure Boot machine's
//! signed GRUB its configuration ([`pick`] with [`Loader::Grub`]), which it
//! reads over TFTP (`tftp_boot.rs`): Debian's signed network GRUB has no
//! HTTP.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, RawQuery, State};
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use tracing::Instrument;

use super::access;
use super::grub;
use super::metrics::{Endpoint, ErrorReason};
use super::netargs;
use super::script::{self, InstallParams, Platform, WaitReason, is_word};
use super::{BootState, Params, reply};
use crate::api::{BootPurpose, BootStep, DiscoveredMachine, MacAddr, Machine};
use crate::directory::{BootIntent, MachineEntry};
use crate::store::TypedStore;

/// The loader a script is for: iPXE (`/boot.ipxe` over HTTP) or the signed
/// GRUB of a Secure Boot machine (`grub/<mac>.cfg` over TFTP). The same
/// choice (install, local disk, wait), the same checks and the same boot
/// step, in its language.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loader {
    Ipxe,
    Grub,
}

impl Loader {
    fn word(self) -> &'static str {
        match self {
            Loader::Ipxe => "ipxe",
            Loader::Grub => "grub",
        }
    }
}

pub async fn handler(
    State(st): State<Arc<BootState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    RawQuery(q): RawQuery,
) -> Response {
    let r = serve(&st, peer, q.as_deref().unwrap_or_default()).await;
    st.metrics.request(Endpoint::script, r.status());
    r
}

fn ipxe(body: String) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

async fn serve(st: &BootState, peer: SocketAddr, q: &str) -> Response {
    let p = Params::parse(q);
    let wait = st.settings.wait_seconds;
    if p.get("mac").is_none() {
        return match script::render_chain(st.settings.base_url_for(peer.ip()), wait) {
            Ok(s) => ipxe(s),
            Err(e) => render_failed(st, e),
        };
    }
    let mac = match p.mac() {
        Ok(m) => m,
        Err(r) => return st.bad_request(r),
    };
    let arch = p.get("arch").filter(|a| !a.is_empty());
    let plat = p.get("platform").filter(|a| !a.is_empty());
    for (name, v) in [("arch", arch), ("platform", plat)] {
        if v.is_some_and(|v| !is_word(v)) {
            return st.bad_request(&format!("{name}: must be a short word like x86_64 or efi"));
        }
    }
    let platform = Platform::from_query(plat, arch);
    let query = Query { arch, plat };
    match pick(st, peer, mac, query, platform, Loader::Ipxe).await {
        Ok(s) => ipxe(s),
        Err(r) => r,
    }
}

/// The firmware values of a script request, carried into its retry URL.
#[derive(Clone, Copy, Debug, Default)]
pub struct Query<'a> {
    pub arch: Option<&'a str>,
    pub plat: Option<&'a str>,
}

/// The script for one MAC's machine, as its boot intent calls for, in the
/// loader's language (recorded as its `Script` step), or the refusal.
pub async fn pick(
    st: &BootState,
    peer: SocketAddr,
    mac: [u8; 6],
    at: Query<'_>,
    platform: Platform,
    loader: Loader,
) -> Result<String, Response> {
    let span = tracing::info_span!("boot_script", mac = %MacAddr(mac).hyphenated(),
        peer = %peer.ip(), loader = loader.word());
    pick_in_span(st, peer, mac, at, platform, loader)
        .instrument(span)
        .await
}

async fn pick_in_span(
    st: &BootState,
    peer: SocketAddr,
    mac: [u8; 6],
    at: Query<'_>,
    platform: Platform,
    loader: Loader,
) -> Result<String, Response> {
    let wait = st.settings.wait_seconds;
    let render_wait = |why| match loader {
        Loader::Ipxe => script::render_wait(&mac, why, wait),
        Loader::Grub => grub::render_wait(&mac, why, wait),
    };
    let Some(entry) = st.directory.by_mac(&mac) else {
        discovered(st, &mac, peer).await;
        tracing::info!("unknown machine: discovery script");
        return render_wait(WaitReason::Unknown).map_err(|e| render_failed(st, e));
    };
    // The directory may lag the store by a moment; the store decides.
    let m: Machine = match st.store.get_obj(&entry.namespace, &entry.name).await {
        Ok(m) => m,
        Err(e) => return Err(st.store_error(e)),
    };
    let intent = MachineEntry::from_machine(&m).map_or(BootIntent::Idle, |e| e.intent);
    let (kind, rendered) = match &intent {
        BootIntent::Install { boot_id, purpose } => {
            if !access::from_machine(&m, peer.ip(), &st.leases_of(&mac)) {
                let why = access::Refusal::WrongAddress;
                return Err(st
                    .refuse(&m, "BootScriptRefused", "install script", peer, why)
                    .await);
            }
            // A deprovisioning boot's live OS is the wiper (its Ignition
            // is the wipe config); the script is the same live boot.
            let kind = if *purpose == BootPurpose::Deprovision {
                "wipe"
            } else {
                "install"
            };
            (
                kind,
                install(st, &m, &mac, boot_id, *purpose, at, loader, peer).await?,
            )
        }
        BootIntent::LocalDisk => (
            "localDisk",
            match loader {
                Loader::Ipxe => script::render_local(&entry.name, platform),
                Loader::Grub => grub::render_local(&entry.name),
            },
        ),
        BootIntent::Idle => ("idle", render_wait(WaitReason::Idle)),
    };
    let s = match rendered {
        Ok(s) => s,
        Err(e) => {
            st.warn(&m, "BootScriptFailed", &e.to_string()).await;
            return Err(render_failed(st, e));
        }
    };
    let boot_id = match &intent {
        BootIntent::Install { boot_id, .. } => Some(boot_id.as_str()),
        _ => None,
    };
    let detail = match loader {
        Loader::Ipxe => kind.to_string(),
        Loader::Grub => format!("{kind} ({})", loader.word()),
    };
    st.record(
        &entry,
        BootStep::Script,
        &detail,
        Some(s.len() as u64),
        boot_id,
    );
    st.metrics.transfer(Endpoint::script, s.len() as u64, true);
    tracing::info!(script = kind, "boot script served");
    Ok(s)
}

fn render_failed(st: &BootState, e: script::ScriptError) -> Response {
    st.metrics.error(ErrorReason::render);
    tracing::warn!(error = %e, "cannot render iPXE script");
    reply(
        StatusCode::INTERNAL_SERVER_ERROR,
        &format!("cannot render the script: {e}"),
    )
}

/// What the live system of machine `m`'s boot `boot_id` runs: its OS
/// image, the cached digests of its kernel, initrd and (Fedora CoreOS)
/// root filesystem, and its kernel arguments (the class's, the site's,
/// the static network when the live system needs one, then the Ignition
/// URL with the boot's token). The iPXE script, GRUB's configuration and
/// the virtual media ISO are three spellings of it.
pub struct Live {
    pub image: crate::api::OsImage,
    pub shas: Vec<String>,
    pub args: Vec<String>,
    /// The base URL of every URL in `args` (see [`Via`]).
    pub base: String,
}

/// How the machine reaches boot HTTP for this boot, which decides the base
/// URL of its live system's URLs and whether its network is static.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// Network boot: the script (or GRUB's configuration) was asked for
    /// from this address. URLs use the base URL of its family
    /// ([`BootSettings::base_url_for`](super::config::BootSettings::base_url_for)).
    /// A machine whose `spec.network.address` is IPv6 that came over IPv6
    /// gets that address as a static network (`ip=[addr]::[gw]:len:...`):
    /// the lab's live installer has no DHCPv6 client, and the address is
    /// the one the access rule lets in. Over IPv4 the live system asks
    /// DHCP, as it always did.
    Network(std::net::IpAddr),
    /// Virtual media: no DHCP may run on the segment, so the static
    /// network of `spec.network` always goes on the command line, and the
    /// URLs use the base URL of that address's family.
    Media,
}

/// [`Live`] for one boot, its images cached (an image that cannot be is a
/// 502 and a Warning event).
pub async fn live(
    st: &BootState,
    m: &Machine,
    mac: &[u8; 6],
    boot_id: &str,
    via: Via,
) -> Result<Live, Response> {
    let class = st.class_of(m).await?;
    let image = m
        .spec
        .overrides
        .as_ref()
        .and_then(|o| o.image.clone())
        .unwrap_or_else(|| class.spec.image.clone());
    let mut shas = Vec::new();
    // A Fedora CoreOS live PXE boot fetches its root filesystem itself, from
    // `coreos.live.rootfs_url`: it is cached and served like the kernel.
    let parts = [
        Some(&image.kernel),
        Some(&image.initrd),
        image.rootfs.as_ref(),
    ];
    for a in parts.into_iter().flatten() {
        match st.cache.ensure(a).await {
            Ok(s) => shas.push(s),
            Err(e) => {
                st.metrics.error(ErrorReason::cache);
                tracing::warn!(error = %e, "image cache");
                st.warn(m, "ImageUnavailable", &e.to_string()).await;
                return Err(reply(
                    StatusCode::BAD_GATEWAY,
                    &format!("image unavailable: {e}"),
                ));
            }
        }
    }
    let net = m.spec.network.as_ref();
    let v6 = netargs::address6(net);
    let (base, static_net) = match via {
        Via::Network(peer) => {
            let over_v6 = crate::directory::plain_ip(peer).is_ipv6();
            let args = if over_v6 && v6.is_some() {
                netargs::network_args(net, Some(*mac))
            } else {
                Vec::new()
            };
            (st.settings.base_url_for(peer), args)
        }
        Via::Media => {
            let boot_mac = m
                .spec
                .boot_mac_address
                .as_deref()
                .and_then(|s| s.parse::<MacAddr>().ok())
                .map(MacAddr::octets);
            let base = match v6 {
                Some(a) => st.settings.base_url_for(std::net::IpAddr::V6(a.addr())),
                None => st.settings.base_url.as_str(),
            };
            (base, netargs::network_args(net, boot_mac))
        }
    };
    let uid = m.metadata.uid.as_deref().unwrap_or_default();
    let token = st.key.mint(uid, boot_id);
    let ctx = st.ignition_context(base, mac, &token, boot_id);
    let mh = MacAddr(*mac).hyphenated();
    let ignition_url = format!("{base}/ignition?{}", ctx.callhome_query);
    let mut args = class.spec.kernel_args.clone();
    args.extend(st.settings.kernel_args.iter().cloned());
    if let Some(sha) = shas.get(2) {
        args.push(format!(
            "coreos.live.rootfs_url={base}/images/{sha}/rootfs?mac={mh}"
        ));
    }
    // The static network before the Ignition arguments: the Ignition URL
    // stays last.
    args.extend(static_net);
    args.extend([
        "ignition.firstboot".to_string(),
        "ignition.platform.id=metal".to_string(),
        format!("ignition.config.url={ignition_url}"),
        // metalherd's own installer and test OS read this one; they call
        // home at the same URL with `/ignition?` -> `/callhome/{what}?`.
        format!("metalherd.ignition={ignition_url}"),
    ]);
    Ok(Live {
        image,
        shas,
        args,
        base: base.to_string(),
    })
}

// One caller; each argument is a different fact of the request (a struct
// for them would only be unpacked here again).
#[allow(clippy::too_many_arguments)]
async fn install(
    st: &BootState,
    m: &Machine,
    mac: &[u8; 6],
    boot_id: &str,
    purpose: BootPurpose,
    at: Query<'_>,
    loader: Loader,
    peer: SocketAddr,
) -> Result<Result<String, script::ScriptError>, Response> {
    let Live {
        image,
        shas,
        args,
        base,
    } = live(st, m, mac, boot_id, Via::Network(peer.ip())).await?;
    let mh = MacAddr(*mac).hyphenated();
    let image_url = |sha: &str, name: &str| format!("{base}/images/{sha}/{name}?mac={mh}");
    // GRUB reads its files over TFTP, from the server it booted from.
    let (kernel_url, initrd_url) = match loader {
        Loader::Ipxe => (image_url(&shas[0], "kernel"), image_url(&shas[1], "initrd")),
        Loader::Grub => (
            format!("/images/{}/kernel", shas[0]),
            format!("/images/{}/initrd", shas[1]),
        ),
    };
    let retry = match loader {
        Loader::Ipxe => {
            let mut retry = format!("{base}/boot.ipxe?mac={mh}");
            for (k, v) in [("arch", at.arch), ("platform", at.plat)] {
                if let Some(v) = v {
                    retry.push_str(&format!("&{k}={v}"));
                }
            }
            retry
        }
        Loader::Grub => grub::config_path(mac),
    };
    let name = m.metadata.name.as_deref().unwrap_or_default();
    let render = match loader {
        Loader::Ipxe => script::render_install,
        Loader::Grub => grub::render_install,
    };
    Ok(render(&InstallParams {
        machine: name,
        boot_id,
        purpose: purpose.as_str(),
        os: &image.os,
        version: &image.version,
        kernel_url: &kernel_url,
        initrd_url: &initrd_url,
        kernel_args: &args,
        retry_url: &retry,
        wait_seconds: st.settings.wait_seconds,
    }))
}

/// Refresh `lastSeen` of the DiscoveredMachine the DHCP server recorded for
/// this MAC (at most once a minute). HTTP never creates one: anyone can ask
/// for any MAC over HTTP, and objects must not be minted from that.
async fn discovered(st: &BootState, mac: &[u8; 6], peer: SocketAddr) {
    let name = crate::dhcp::discovery::object_name(mac);
    let now = jiff::Timestamp::now();
    let store = st.store.as_ref();
    let r = match store.get_obj::<DiscoveredMachine>("default", &name).await {
        Ok(mut d) => {
            if now.duration_since(d.spec.last_seen) < jiff::SignedDuration::from_secs(60) {
                return;
            }
            d.spec.last_seen = now;
            // An IPv4 client of a dual-stack listener as its IPv4 address.
            d.spec.address = Some(super::once::plain(peer.ip()));
            store.update_obj(&d).await.map(|_| ())
        }
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e),
    };
    if let Err(e) = r {
        tracing::warn!(error = %e, "cannot refresh discovered machine");
    }
}
