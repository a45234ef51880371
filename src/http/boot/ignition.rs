//! `GET /ignition?mac=..&token=..[&stage=install|node|wipe]`: a Machine's
//! Ignition config, handed only to that machine during its open boot (see
//! `access.rs` for the rule), each stage in full once (see `once.rs`). The
//! boot's purpose decides which configs it gets ([`IgnitionStage::for_boot`]):
//! an install or reimage boot its install and node configs, a
//! deprovisioning boot only the wipe config (asked for as `install`, the
//! live OS's config, or as `wipe`). The content comes from an
//! [`IgnitionSource`]; this module only decides who gets it and records
//! that it was served.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_trait::async_trait;
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use tracing::Instrument;

use super::access::{Need, Refusal};
use super::metrics::{Endpoint, ErrorReason};
use super::once::plain;
use super::{BootState, Params, boot_event, reply};
use crate::api::{BootPurpose, Machine, MachineClass, ServedConfig};
use crate::directory::MachineEntry;
use crate::store::TypedStore;
use crate::store::events::EventType;

/// Which config is asked for: the live installer's, the installed node's,
/// or the live wiper's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IgnitionStage {
    Install,
    Node,
    Wipe,
}

impl IgnitionStage {
    pub fn parse(s: Option<&str>) -> Option<IgnitionStage> {
        match s {
            None | Some("install") => Some(IgnitionStage::Install),
            Some("node") => Some(IgnitionStage::Node),
            Some("wipe") => Some(IgnitionStage::Wipe),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            IgnitionStage::Install => "install",
            IgnitionStage::Node => "node",
            IgnitionStage::Wipe => "wipe",
        }
    }

    /// The config a boot of this purpose gets when `self` is asked for:
    /// the live OS of a deprovisioning boot (which asks for its config as
    /// any live OS does, `install`) gets the wipe config and nothing else;
    /// other boots never get the wipe config. `None`: not this boot's.
    pub fn for_boot(self, purpose: BootPurpose) -> Option<IgnitionStage> {
        match (purpose, self) {
            (BootPurpose::Deprovision, IgnitionStage::Install | IgnitionStage::Wipe) => {
                Some(IgnitionStage::Wipe)
            }
            (BootPurpose::Deprovision, IgnitionStage::Node) => None,
            (_, IgnitionStage::Wipe) => None,
            (_, s) => Some(s),
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
    /// `POST {callhome_base}/{installed|failed|booted|wiped}?mac=..&token=..`
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

async fn serve(st: &Arc<BootState>, peer: SocketAddr, q: &str) -> Response {
    let p = Params::parse(q);
    let mac = match p.mac() {
        Ok(m) => m,
        Err(r) => return st.bad_request(r),
    };
    let Some(token) = p.get("token") else {
        return st.bad_request("token: missing");
    };
    let Some(stage) = IgnitionStage::parse(p.get("stage")) else {
        return st.bad_request("stage: must be install, node or wipe");
    };
    let span = tracing::info_span!("ignition", mac = %crate::api::MacAddr(mac).hyphenated(), peer = %peer.ip(), stage = stage.as_str());
    serve_machine(st, peer, mac, token, stage)
        .instrument(span)
        .await
}

/// A well-formed Ignition request, inside its span: authorize and render.
async fn serve_machine(
    st: &Arc<BootState>,
    peer: SocketAddr,
    mac: [u8; 6],
    token: &str,
    stage: IgnitionStage,
) -> Response {
    let Some(entry) = st.directory.by_mac(&mac) else {
        return st.refuse_unknown("config", peer);
    };
    let m: Machine = match st.store.get_obj(&entry.namespace, &entry.name).await {
        Ok(m) => m,
        Err(e) => return st.store_error(e),
    };
    let what = format!("Ignition {}", stage.as_str());
    let boot = match st.authorize(&m, &mac, token, peer, Need::OpenBoot) {
        Ok(b) => b.clone(),
        Err(why) => return st.refuse(&m, "IgnitionRefused", &what, peer, why).await,
    };
    let Some(stage) = stage.for_boot(boot.purpose) else {
        let why = Refusal::NotThisBootsConfig;
        return st.refuse(&m, "IgnitionRefused", &what, peer, why).await;
    };
    if let Some(earlier) = st.served.earlier(&boot, stage) {
        let detail = format!("(served to {} at {})", earlier.address, earlier.at);
        return st
            .refuse_with(
                &m,
                "IgnitionRefused",
                &what,
                peer,
                Refusal::AlreadyServed,
                &detail,
            )
            .await;
    }
    let class = match st.class_of(&m).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    // The installed OS is reached (and calls home) over the family this
    // request came in on.
    let base = st.settings.base_url_for(peer.ip());
    let ctx = st.ignition_context(base, &mac, token, &boot.id);
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
    let len = body.len();
    let done = Delivered {
        st: st.clone(),
        machine: m,
        entry,
        boot_id: boot.id.clone(),
        stage,
        peer,
        bytes: len as u64,
    };
    let body = OnceBody {
        body: Some(bytes::Bytes::from(body)),
        done: Some(done),
    };
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/vnd.coreos.ignition+json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        [(header::CONTENT_LENGTH, len.to_string())],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

/// What to do once a config went out in full.
struct Delivered {
    st: Arc<BootState>,
    machine: Machine,
    entry: Arc<MachineEntry>,
    boot_id: String,
    stage: IgnitionStage,
    peer: SocketAddr,
    bytes: u64,
}

impl Delivered {
    /// The last byte is out: note it (in memory at once, then in the boot
    /// record), record the step; a second complete transfer (two fetches
    /// raced) raises a Warning event naming both addresses.
    fn complete(self) {
        let now = jiff::Timestamp::now();
        let earlier = self
            .st
            .served
            .note(&self.boot_id, self.stage, self.peer.ip(), now);
        self.st
            .metrics
            .transfer(Endpoint::ignition, self.bytes, true);
        tracing::info!(bytes = self.bytes, "Ignition served");
        // The step goes out with the boot record's write below.
        let note = boot_event(
            crate::api::BootStep::Ignition,
            self.stage.as_str(),
            Some(self.bytes),
            Some(&self.boot_id),
        );
        tokio::spawn(async move {
            let to = plain(self.peer.ip());
            if let Some(e) = earlier {
                let msg = format!(
                    "the {} config of boot {} was served in full twice: to {} at {} and to {to}",
                    self.stage.as_str(),
                    self.boot_id,
                    e.address,
                    e.at
                );
                tracing::warn!("{msg}");
                self.st
                    .event(
                        &self.machine,
                        EventType::Warning,
                        "IgnitionServedTwice",
                        &msg,
                    )
                    .await;
                return;
            }
            let stage = self.stage.as_str();
            let r = self
                .st
                .update_boot_noting(&self.entry, &self.boot_id, &note, |b| {
                    if b.configs_served.iter().any(|c| c.stage == stage) {
                        return false;
                    }
                    b.configs_served.push(ServedConfig {
                        stage: stage.to_string(),
                        address: to.clone(),
                        at: now,
                    });
                    b.ignition_served_at.get_or_insert(now);
                    true
                })
                .await;
            match r {
                Ok(true) => {}
                // Not noted with the record (already there, or the write
                // failed): the recorder still keeps the step.
                Ok(false) => self.st.record_event(&self.entry, note),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot note the config as served");
                    self.st.record_event(&self.entry, note);
                }
            }
        });
    }
}

/// A body of one chunk that reports when that chunk went out (hyper may
/// stop polling once Content-Length bytes are out, so handing out the last
/// chunk, not the end of the stream, completes it). Dropped before that:
/// cut short, nothing noted.
struct OnceBody {
    body: Option<bytes::Bytes>,
    done: Option<Delivered>,
}

impl futures::Stream for OnceBody {
    type Item = Result<bytes::Bytes, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let b = self.body.take();
        if b.is_some()
            && let Some(d) = self.done.take()
        {
            d.complete();
        }
        Poll::Ready(b.map(Ok))
    }
}

/// A stand-in renderer for tests of the boot server alone: a valid, minimal
/// Ignition 3.3.0 config that only sets the hostname. `serve` wires the
/// full renderer (`renderer::Renderer`).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_purpose_picks_the_config() {
        use IgnitionStage::{Install, Node, Wipe};
        for p in [BootPurpose::Install, BootPurpose::Reimage] {
            assert_eq!(Install.for_boot(p), Some(Install));
            assert_eq!(Node.for_boot(p), Some(Node));
            assert_eq!(Wipe.for_boot(p), None, "{p}: never the wipe config");
        }
        let d = BootPurpose::Deprovision;
        assert_eq!(
            Install.for_boot(d),
            Some(Wipe),
            "the live OS gets the wiper"
        );
        assert_eq!(Wipe.for_boot(d), Some(Wipe));
        assert_eq!(Node.for_boot(d), None, "a wipe boot installs no node");
        assert_eq!(IgnitionStage::parse(Some("wipe")), Some(Wipe));
        assert_eq!(IgnitionStage::parse(Some("nope")), None);
    }
}
