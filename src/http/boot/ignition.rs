//! `GET /ignition?mac=..&token=..[&stage=install|node]`: a Machine's
//! Ignition config, handed only to that machine during its open boot (see
//! `access.rs` for the rule). The content comes from an [`IgnitionSource`];
//! this module only decides who gets it and records that it was served.

use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use tracing::Instrument;

use super::access::{Need, authorize};
use super::metrics::{Endpoint, ErrorReason};
use super::{BootState, Params, reply};
use crate::api::{Machine, MachineClass};
use crate::store::TypedStore;

/// Which config is asked for: the live installer's, or the installed node's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IgnitionStage {
    Install,
    Node,
}

impl IgnitionStage {
    pub fn parse(s: Option<&str>) -> Option<IgnitionStage> {
        match s {
            None | Some("install") => Some(IgnitionStage::Install),
            Some("node") => Some(IgnitionStage::Node),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            IgnitionStage::Install => "install",
            IgnitionStage::Node => "node",
        }
    }
}

/// URLs and ids a renderer may need to write into a config. Debug hides the
/// token (it is in `node_config_url` and `callhome_query` too).
#[derive(Clone)]
pub struct IgnitionContext {
    /// The per-boot token.
    pub token: String,
    /// The MAC the machine booted from, `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
    /// `http://host:port` of the boot server.
    pub base_url: String,
    /// The node config URL (stage `node`) for this boot, token included.
    pub node_config_url: String,
    /// `POST {callhome_base}/{installed|failed|booted}?mac=..&token=..`
    pub callhome_base: String,
    /// Query string (`mac=..&token=..`) call-homes must carry.
    pub callhome_query: String,
    pub boot_id: String,
}

impl std::fmt::Debug for IgnitionContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IgnitionContext")
            .field("base_url", &self.base_url)
            .field("mac", &self.mac)
            .field("boot_id", &self.boot_id)
            .field("token", &"<redacted>")
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct IgnitionSourceError(pub String);

/// Where Ignition configs come from (the renderer in `crate::ignition`, or a
/// test double).
#[async_trait]
pub trait IgnitionSource: Send + Sync + 'static {
    async fn render(
        &self,
        machine: &Machine,
        class: &MachineClass,
        stage: IgnitionStage,
        ctx: &IgnitionContext,
    ) -> Result<Vec<u8>, IgnitionSourceError>;
}

pub async fn handler(
    State(st): State<Arc<BootState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    RawQuery(q): RawQuery,
) -> Response {
    let r = serve(&st, peer, q.as_deref().unwrap_or_default()).await;
    st.metrics.request(Endpoint::ignition, r.status());
    r
}

async fn serve(st: &BootState, peer: SocketAddr, q: &str) -> Response {
    let p = Params::parse(q);
    let mac = match p.mac() {
        Ok(m) => m,
        Err(r) => return st.bad_request(r),
    };
    let Some(token) = p.get("token") else {
        return st.bad_request("token: missing");
    };
    let Some(stage) = IgnitionStage::parse(p.get("stage")) else {
        return st.bad_request("stage: must be install or node");
    };
    let span = tracing::info_span!("ignition", mac = %crate::api::MacAddr(mac).hyphenated(), peer = %peer.ip(), stage = stage.as_str());
    serve_machine(st, peer, mac, token, stage)
        .instrument(span)
        .await
}

/// A well-formed Ignition request, inside its span: authorize and render.
async fn serve_machine(
    st: &BootState,
    peer: SocketAddr,
    mac: [u8; 6],
    token: &str,
    stage: IgnitionStage,
) -> Response {
    let Some(entry) = st.directory.by_mac(&mac) else {
        tracing::warn!("Ignition refused: unknown MAC");
        st.metrics.error(ErrorReason::forbidden);
        return reply(StatusCode::FORBIDDEN, "forbidden: unknown machine");
    };
    let m: Machine = match st.store.get_obj(&entry.namespace, &entry.name).await {
        Ok(m) => m,
        Err(e) => return st.store_error(e),
    };
    let lease = st.leases.as_ref().and_then(|l| l.address_of(&mac));
    let boot = match authorize(&st.key, &m, token, peer.ip(), lease, Need::OpenBoot) {
        Ok(b) => b.clone(),
        Err(why) => {
            return st
                .refuse(&m, "IgnitionRefused", "Ignition", peer, why)
                .await;
        }
    };
    let class = match st.class_of(&m).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let ctx = st.ignition_context(&mac, token, &boot.id);
    let body = match st.ignition.render(&m, &class, stage, &ctx).await {
        Ok(b) => b,
        Err(e) => {
            st.metrics.error(ErrorReason::render);
            tracing::warn!(error = %e, "cannot render Ignition");
            st.warn(&m, "IgnitionRenderFailed", &e.to_string()).await;
            return reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("cannot render Ignition: {e}"),
            );
        }
    };
    st.mark_ignition_served(&m, &boot.id).await;
    st.record(
        &entry,
        crate::api::BootStep::Ignition,
        stage.as_str(),
        Some(body.len() as u64),
        Some(&boot.id),
    );
    st.metrics
        .transfer(Endpoint::ignition, body.len() as u64, true);
    tracing::info!(bytes = body.len(), "Ignition served");
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/vnd.coreos.ignition+json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// A stand-in renderer: a valid, minimal Ignition 3.3.0 config that only
/// sets the hostname. Used by `serve` while no full renderer is wired in.
pub struct MinimalIgnition;

#[async_trait]
impl IgnitionSource for MinimalIgnition {
    async fn render(
        &self,
        machine: &Machine,
        _class: &MachineClass,
        _stage: IgnitionStage,
        _ctx: &IgnitionContext,
    ) -> Result<Vec<u8>, IgnitionSourceError> {
        let host = machine
            .spec
            .network
            .as_ref()
            .and_then(|n| n.hostname.clone())
            .or_else(|| machine.metadata.name.clone())
            .unwrap_or_default();
        let v = serde_json::json!({
            "ignition": { "version": "3.3.0" },
            "storage": { "files": [{
                "path": "/etc/hostname",
                "mode": 420,
                "overwrite": true,
                "contents": { "source": format!("data:,{}", url_escape(&host)) }
            }]}
        });
        serde_json::to_vec(&v).map_err(|e| IgnitionSourceError(e.to_string()))
    }
}

fn url_escape(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
