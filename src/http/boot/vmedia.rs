//! `GET|HEAD /vmedia/{mac}/{token}/boot.iso`: a virtual media boot's ISO,
//! which the machine's BMC fetches after the controller inserts the URL
//! into its virtual CD (Redfish `VirtualMedia.InsertMedia`). The ISO holds
//! the live kernel and initrd and a command line with the same arguments
//! the iPXE script carries ([`script_handler::live`]), plus the static
//! network of `spec.network` (there may be no DHCP on the segment).
//!
//! Who may fetch it: the BMC, not the machine, so no address rule (a BMC's
//! address says nothing about the machine's). The path carries the boot's
//! *media* token, `HMAC(key, uid | boot id | "/media")`, another token than
//! the Ignition config's: the BMC's `VirtualMedia` resource shows the URL
//! to whoever reads the BMC. It is valid while the boot is open, for the
//! token TTL from the boot's minting (the BMC fetches before the power-on,
//! and may read the ISO again, in ranges, while the machine boots). The
//! Ignition token inside the ISO keeps its own rules (armed at power-on,
//! the machine's address, served once). The token is in the path, not the
//! query: BMCs name the downloaded file after the path's last segment.
//!
//! The ISO is built once per boot into `<data-dir>/vmedia/<boot id>.iso`
//! (the first request records the `Media` step) and served from there with
//! Range and ETag like every image.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, State};
use axum::response::Response;
use http::{HeaderMap, Method, StatusCode};
use tracing::Instrument;

use super::access::Refusal;
use super::metrics::{Endpoint, ErrorReason};
use super::script_handler::{Live, Via, live};
use super::send_file::{self, FileError, Source};
use super::token::TokenKey;
use super::{BootState, reply};
use crate::api::{BootMethod, BootStep, MacAddr, Machine};

/// The file name at the end of every media URL.
pub const ISO_NAME: &str = "boot.iso";

/// The media token of machine `uid`'s boot `boot_id`.
pub fn media_token(key: &TokenKey, uid: &str, boot_id: &str) -> String {
    key.mint(uid, &format!("{boot_id}/media"))
}

/// The URL a BMC fetches boot `boot_id`'s ISO from.
pub fn media_url(base: &str, mac: [u8; 6], token: &str) -> String {
    format!(
        "{base}/vmedia/{}/{token}/{ISO_NAME}",
        MacAddr(mac).hyphenated()
    )
}

/// A request path as logs may show it: a media path's token segment
/// (`/vmedia/{mac}/{token}/boot.iso`) becomes `...`; other paths as they are.
pub fn logged_path(path: &str) -> std::borrow::Cow<'_, str> {
    match path
        .strip_prefix("/vmedia/")
        .and_then(|r| r.split_once('/'))
    {
        Some((mac, rest)) => {
            let name = rest.split_once('/').map_or("", |(_, n)| n);
            format!("/vmedia/{mac}/.../{name}").into()
        }
        None => path.into(),
    }
}

pub use super::netargs::network_args;

/// Whether `m` boots from virtual media (its own `spec.boot`, else its
/// class's, which the caller looked up).
pub fn boots_from_media(m: &Machine, class: Option<BootMethod>) -> bool {
    m.spec.boot.or(class) == Some(BootMethod::VirtualMedia)
}

pub async fn handler(
    State(st): State<Arc<BootState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path((mac, token, name)): Path<(String, String, String)>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let span = tracing::info_span!("boot_media", mac = %mac, peer = %peer.ip());
    let r = serve(&st, peer, &mac, &token, &name, &method, &headers)
        .instrument(span)
        .await;
    st.metrics.request(Endpoint::media, r.status());
    r
}

async fn serve(
    st: &Arc<BootState>,
    peer: SocketAddr,
    mac: &str,
    token: &str,
    name: &str,
    method: &Method,
    headers: &HeaderMap,
) -> Response {
    let Ok(mac) = mac.parse::<MacAddr>().map(MacAddr::octets) else {
        return st.bad_request("mac: not a MAC address (aa-bb-cc-dd-ee-ff)");
    };
    if name != ISO_NAME {
        st.metrics.error(ErrorReason::not_found);
        return reply(StatusCode::NOT_FOUND, "not found");
    }
    let Some(entry) = st.directory.by_mac(&mac) else {
        return st.refuse_unknown("virtual media", peer);
    };
    let m: Machine =
        match crate::store::TypedStore::get_obj(st.store.as_ref(), &entry.namespace, &entry.name)
            .await
        {
            Ok(m) => m,
            Err(e) => return st.store_error(e),
        };
    let boot_id = match authorize(st, &m, token) {
        Ok(id) => id,
        Err(why) => {
            return st
                .refuse(&m, "MediaRefused", "virtual media", peer, why)
                .await;
        }
    };
    let class_boot = match st.class_of(&m).await {
        Ok(c) => c.spec.boot,
        Err(r) => return r,
    };
    if !boots_from_media(&m, class_boot) {
        let why = Refusal::NotThisBootsConfig;
        return st
            .refuse(&m, "MediaRefused", "virtual media", peer, why)
            .await;
    }
    let path = st
        .settings
        .data_dir
        .join(crate::datadir::VMEDIA_DIR)
        .join(format!("{boot_id}.iso"));
    let built = match build_once(st, &m, mac, &boot_id, &path).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    if built {
        let size = std::fs::metadata(&path).map(|m| m.len()).ok();
        st.record(&entry, BootStep::Media, ISO_NAME, size, Some(&boot_id));
        tracing::info!(bytes = ?size, "virtual media ISO built");
    }
    send(st, path, method, headers).await
}

/// The boot the media token belongs to: the current one, open, within
/// the token TTL from its minting.
fn authorize(st: &BootState, m: &Machine, token: &str) -> Result<String, Refusal> {
    let boot = m
        .status
        .as_ref()
        .and_then(|s| s.boot.as_ref())
        .ok_or(Refusal::NoBoot)?;
    let uid = m.metadata.uid.as_deref().unwrap_or_default();
    if uid.is_empty() || !st.key.verify(uid, &format!("{}/media", boot.id), token) {
        return Err(Refusal::WrongToken);
    }
    if boot.completed_at.is_some() {
        return Err(Refusal::BootCompleted);
    }
    let until = super::access::valid_until(boot.minted_at, boot, st.settings.token_ttl);
    if jiff::Timestamp::now() >= until {
        return Err(Refusal::Expired);
    }
    Ok(boot.id.clone())
}

/// Build the boot's ISO unless it exists; `true` when this call built it.
/// One build at a time (BMCs may open several ranges at once).
async fn build_once(
    st: &Arc<BootState>,
    m: &Machine,
    mac: [u8; 6],
    boot_id: &str,
    path: &std::path::Path,
) -> Result<bool, Response> {
    let _one = st.media_build.lock().await;
    if path.exists() {
        return Ok(false);
    }
    // The static network of `spec.network` is among the arguments.
    let Live { shas, args, .. } = live(st, m, &mac, boot_id, Via::Media).await?;
    let cmdline = args.join(" ");
    let (Some(kernel), Some(initrd)) = (
        st.cache.lookup(&shas[0]).await,
        st.cache.lookup(&shas[1]).await,
    ) else {
        st.metrics.error(ErrorReason::cache);
        return Err(reply(StatusCode::BAD_GATEWAY, "image unavailable"));
    };
    let loader = st.settings.virtual_media_loader.clone();
    let out = path.to_path_buf();
    let keep = st.settings.token_ttl;
    let r = tokio::task::spawn_blocking(move || {
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir).map_err(crate::vmedia::VmediaError::from)?;
            forget_old(dir, keep);
        }
        crate::vmedia::write_iso_file(&out, &loader, &kernel, &initrd, &cmdline)
    })
    .await;
    match r {
        Ok(Ok(())) => Ok(true),
        Ok(Err(e)) => {
            st.metrics.error(ErrorReason::render);
            tracing::warn!(error = %e, "cannot build the virtual media ISO");
            st.warn(m, "MediaBuildFailed", &format!("virtual media ISO: {e}"))
                .await;
            Err(reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot build the ISO",
            ))
        }
        Err(e) => {
            st.metrics.error(ErrorReason::io);
            tracing::warn!(error = %e, "virtual media build task");
            Err(reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot build the ISO",
            ))
        }
    }
}

/// Remove the ISOs of boots whose media token has expired (older than the
/// token TTL): no BMC can fetch them any more.
fn forget_old(dir: &std::path::Path, ttl: std::time::Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > ttl);
        if old && e.path().extension().is_some_and(|x| x == "iso") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

async fn send(
    st: &Arc<BootState>,
    path: PathBuf,
    method: &Method,
    headers: &HeaderMap,
) -> Response {
    let opened = tokio::task::spawn_blocking(move || {
        let f = std::fs::File::open(&path)?;
        let meta = f.metadata()?;
        Ok::<_, std::io::Error>((f, meta))
    })
    .await
    .map_err(std::io::Error::other)
    .and_then(|r| r);
    let (f, meta) = match opened {
        Ok(x) => x,
        Err(e) => {
            st.metrics.error(ErrorReason::io);
            tracing::warn!(error = %e, "opening the virtual media ISO");
            return reply(StatusCode::INTERNAL_SERVER_ERROR, "cannot read the ISO");
        }
    };
    let etag = send_file::etag_of(&meta);
    let source = Source::File(f, meta, st.streams.clone());
    let metrics = st.clone();
    let done: send_file::OnDone = Box::new(move |bytes, complete| {
        metrics.metrics.transfer(Endpoint::media, bytes, complete);
    });
    match send_file::serve(
        source,
        method,
        headers,
        Some(etag),
        "application/octet-stream",
        Some(done),
    )
    .await
    {
        Ok(s) => s.response,
        Err(FileError::NotFound) => reply(StatusCode::NOT_FOUND, "not found"),
        Err(FileError::Io(e)) => {
            st.metrics.error(ErrorReason::io);
            tracing::warn!(error = %e, "reading the virtual media ISO");
            reply(StatusCode::INTERNAL_SERVER_ERROR, "cannot read the ISO")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_never_show_a_media_token() {
        assert_eq!(
            logged_path("/vmedia/52-54-00-00-00-01/abcdef/boot.iso"),
            "/vmedia/52-54-00-00-00-01/.../boot.iso"
        );
        assert_eq!(logged_path("/vmedia/x/secret"), "/vmedia/x/.../");
        assert_eq!(logged_path("/boot.ipxe"), "/boot.ipxe");
    }

    #[test]
    fn the_media_token_is_not_the_ignition_token() {
        let key = TokenKey::from_bytes([7; 32]);
        let media = media_token(&key, "uid-1", "boot-1");
        assert_ne!(media, key.mint("uid-1", "boot-1"));
        assert!(key.verify("uid-1", "boot-1/media", &media));
        assert_eq!(
            media_url("http://10.89.0.1:8080", [0x52, 0x54, 0, 0, 0, 1], "ab"),
            "http://10.89.0.1:8080/vmedia/52-54-00-00-00-01/ab/boot.iso"
        );
    }
}
