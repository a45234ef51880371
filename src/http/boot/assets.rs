//! `GET|HEAD /assets/{path}` (files under the assets directory, iPXE
//! binaries among them) and `GET|HEAD /images/{sha256}/{name}` (cached OS
//! images). Assets are opened through the shared file source
//! ([`crate::files::DirSource`], its one path check), images from the image
//! cache; both are sent by [`send_file::serve`] (Range, ETag, streaming). A
//! finished kernel or initrd is a boot step of the machine that fetched it
//! (by its `mac` query parameter, else its reserved address, IPv4 or IPv6).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::response::Response;
use http::{HeaderMap, Method, StatusCode};

use super::metrics::{Endpoint, ErrorReason};
use super::send_file::{self, FileError, OnDone, Source};
use super::{BootState, Params, reply};
use crate::api::BootStep;
use crate::directory::{BootIntent, MachineEntry};
use crate::files::{Opened, SourceError};

fn machine_for(st: &BootState, q: Option<&str>, peer: SocketAddr) -> Option<Arc<MachineEntry>> {
    let p = Params::parse(q.unwrap_or_default());
    if let Ok(mac) = p.mac() {
        return st.directory.by_mac(&mac);
    }
    st.directory.by_peer(peer.ip())
}

fn on_done(
    st: &Arc<BootState>,
    endpoint: Endpoint,
    machine: Option<Arc<MachineEntry>>,
    step: BootStep,
    detail: String,
) -> OnDone {
    let st = st.clone();
    Box::new(move |bytes, complete| {
        st.metrics.transfer(endpoint, bytes, complete);
        if !complete {
            tracing::info!(bytes, detail = %detail, "transfer cut short");
        }
        if let Some(e) = machine
            && complete
        {
            let boot_id = match &e.intent {
                BootIntent::Install { boot_id, .. } => Some(boot_id.as_str()),
                _ => None,
            };
            st.record(&e, step.clone(), &detail, Some(bytes), boot_id);
        }
    })
}

fn content_type(path: &str) -> &'static str {
    if path.ends_with(".ipxe") {
        "text/plain; charset=utf-8"
    } else if path.ends_with(".json") || path.ends_with(".ign") {
        "application/json"
    } else {
        "application/octet-stream"
    }
}

fn file_error(st: &BootState, e: FileError) -> Response {
    match e {
        FileError::NotFound => {
            st.metrics.error(ErrorReason::not_found);
            reply(StatusCode::NOT_FOUND, "not found")
        }
        FileError::Io(e) => {
            st.metrics.error(ErrorReason::io);
            tracing::warn!(error = %e, "reading a boot file");
            reply(StatusCode::INTERNAL_SERVER_ERROR, "cannot read the file")
        }
    }
}

pub async fn asset(
    State(st): State<Arc<BootState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(rel): Path<String>,
    RawQuery(q): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let opened = match st.assets() {
        Some(src) => src.open_whole(&rel).await,
        None => Err(SourceError::NotFound),
    };
    let file = match opened {
        // Small files come from memory and go out in one piece.
        Ok((Opened::Memory(data), meta)) => Source::Memory(data, meta),
        Ok((Opened::Disk(f), meta)) => Source::File(f, meta, st.streams.clone()),
        Err(SourceError::Io(e)) => {
            let r = file_error(&st, FileError::Io(e));
            st.metrics.request(Endpoint::asset, r.status());
            return r;
        }
        Err(_) => {
            st.metrics.error(ErrorReason::not_found);
            st.metrics.request(Endpoint::asset, StatusCode::NOT_FOUND);
            return reply(StatusCode::NOT_FOUND, "not found");
        }
    };
    let m = machine_for(&st, q.as_deref(), peer);
    let done = on_done(&st, Endpoint::asset, m, BootStep::Asset, rel.clone());
    let r = match send_file::serve(
        file,
        &method,
        &headers,
        None,
        content_type(&rel),
        Some(done),
    )
    .await
    {
        Ok(s) => s.response,
        Err(e) => file_error(&st, e),
    };
    st.metrics.request(Endpoint::asset, r.status());
    r
}

pub async fn image(
    State(st): State<Arc<BootState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path((sha, name)): Path<(String, String)>,
    RawQuery(q): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let Some(path) = st.cache.lookup(&sha).await else {
        st.metrics.error(ErrorReason::not_found);
        st.metrics.request(Endpoint::image, StatusCode::NOT_FOUND);
        return reply(StatusCode::NOT_FOUND, "no such image in the cache");
    };
    let step = match name.as_str() {
        "kernel" => BootStep::Kernel,
        "initrd" => BootStep::Initrd,
        _ => BootStep::Image,
    };
    let m = machine_for(&st, q.as_deref(), peer);
    let done = on_done(&st, Endpoint::image, m, step, sha.to_ascii_lowercase());
    let etag = format!("\"{}\"", sha.to_ascii_lowercase());
    let opened = tokio::task::spawn_blocking(move || {
        let f = std::fs::File::open(&path)?;
        let meta = f.metadata()?;
        Ok::<_, std::io::Error>((f, meta))
    })
    .await
    .map_err(std::io::Error::other)
    .and_then(|r| r);
    let file = match opened {
        Ok((f, meta)) => Source::File(f, meta, st.streams.clone()),
        Err(e) => {
            let e = match e.kind() {
                std::io::ErrorKind::NotFound => FileError::NotFound,
                _ => FileError::Io(e),
            };
            let r = file_error(&st, e);
            st.metrics.request(Endpoint::image, r.status());
            return r;
        }
    };
    let r = match send_file::serve(
        file,
        &method,
        &headers,
        Some(etag),
        "application/octet-stream",
        Some(done),
    )
    .await
    {
        Ok(s) => s.response,
        Err(e) => file_error(&st, e),
    };
    st.metrics.request(Endpoint::image, r.status());
    r
}
