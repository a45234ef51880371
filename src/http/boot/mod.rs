//! The boot network HTTP server (its own listener, apart from the API):
//! iPXE scripts (`/boot.ipxe`), iPXE binaries and other files (`/assets/`),
//! cached OS images (`/images/`), Ignition configs (`/ignition`) and
//! call-homes (`/callhome/`). Reads Machines through the boot
//! [`Directory`] and the store, appends every step to `status.bootHistory`
//! through the [`BootRecorder`]. Owns no controller logic: it records what
//! happened (`status.boot.completedAt` / `outcome`) and the controller acts.

pub mod access;
pub mod assets;
pub mod callhome;
pub mod config;
pub mod grub;
pub mod ignition;
pub mod metrics;
pub mod netargs;
pub mod once;
pub mod range;
pub mod renderer;
pub mod script;
pub mod script_handler;
pub mod send_file;
pub mod tftp_boot;
pub mod token;
pub mod vmedia;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::StatusCode;
use tokio_util::sync::CancellationToken;

use crate::api::{BootEvent, BootStep, Kind, MacAddr, Machine, MachineClass};
use crate::directory::{BootRecorder, Directory, MachineEntry};
use crate::files::{DirSource, ImageCache};
use crate::store::events::{EventType, Regarding, record};
use crate::store::modify::{Target, modify_obj};
use crate::store::{Store, StoreError, TypedStore};

pub use access::{LeaseLookup, LeaseLookups};
pub use ignition::{IgnitionContext, IgnitionSource, IgnitionSourceError, IgnitionStage};
pub use metrics::BootMetrics;
pub use token::TokenKey;

use config::BootSettings;
use metrics::ErrorReason;

/// What the boot server is given by `serve`.
pub struct BootDeps {
    pub store: Arc<dyn Store>,
    pub directory: Directory,
    pub recorder: BootRecorder,
    pub ignition: Arc<dyn IgnitionSource>,
    /// DHCP leases, when a DHCP server runs in this process (DHCPv4 and
    /// DHCPv6 together: a [`LeaseLookups`]).
    pub leases: Option<Arc<dyn LeaseLookup>>,
    pub metrics: BootMetrics,
}

/// Assets up to this size are served from memory (kept while unchanged on
/// disk); larger ones, images and kernels, stream from disk.
const ASSET_CACHE_FILE_MAX: u64 = 256 << 10;

/// Shared state of every boot request.
pub struct BootState {
    pub settings: BootSettings,
    pub store: Arc<dyn Store>,
    pub directory: Directory,
    pub recorder: BootRecorder,
    pub ignition: Arc<dyn IgnitionSource>,
    pub leases: Option<Arc<dyn LeaseLookup>>,
    pub metrics: BootMetrics,
    pub key: TokenKey,
    pub cache: ImageCache,
    /// The assets directory as a file source, once it exists.
    assets: std::sync::Mutex<Option<Arc<DirSource>>>,
    /// Configs handed out in full by this process (each once per boot).
    pub served: once::ServedLog,
    /// File bodies streaming from disk now (their piece size follows).
    pub streams: send_file::Streams,
    /// Held while a virtual media ISO is built (one at a time).
    pub media_build: tokio::sync::Mutex<()>,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BootError {
    #[error(transparent)]
    Key(#[from] token::TokenKeyError),
    #[error("cannot listen on boot address {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("boot HTTP server: {0}")]
    Serve(#[source] std::io::Error),
}

impl BootState {
    /// Load (or create) the token key under the data directory.
    pub fn new(settings: BootSettings, deps: BootDeps) -> Result<BootState, BootError> {
        let key = TokenKey::load_or_create(&settings.data_dir)?;
        let cache = ImageCache::new(settings.data_dir.join(crate::datadir::IMAGE_CACHE_DIR));
        let served = once::ServedLog::new(settings.token_ttl);
        Ok(BootState {
            settings,
            store: deps.store,
            directory: deps.directory,
            recorder: deps.recorder,
            ignition: deps.ignition,
            leases: deps.leases,
            metrics: deps.metrics,
            key,
            cache,
            assets: std::sync::Mutex::new(None),
            served,
            streams: send_file::Streams::default(),
            media_build: tokio::sync::Mutex::new(()),
        })
    }

    /// The assets directory's file source, opened on first use (the
    /// directory may be created after the server starts); `None` while it
    /// does not exist.
    pub fn assets(&self) -> Option<Arc<DirSource>> {
        let mut slot = self.assets.lock().ok()?;
        if slot.is_none() {
            *slot = DirSource::with_cache_limit(&self.settings.assets_dir, ASSET_CACHE_FILE_MAX)
                .ok()
                .map(Arc::new);
        }
        slot.clone()
    }

    pub fn bad_request(&self, reason: &str) -> Response {
        self.metrics.error(ErrorReason::bad_request);
        reply(StatusCode::BAD_REQUEST, &format!("bad request: {reason}"))
    }

    pub fn store_error(&self, e: StoreError) -> Response {
        self.metrics.error(ErrorReason::store);
        tracing::warn!(error = %e, "store");
        if e.is_not_found() {
            refused()
        } else {
            reply(StatusCode::SERVICE_UNAVAILABLE, "store unavailable; retry")
        }
    }

    /// The addresses DHCP (v4, v6) leased to `mac`, when DHCP runs here.
    pub fn leases_of(&self, mac: &[u8; 6]) -> Vec<std::net::IpAddr> {
        self.leases
            .as_ref()
            .map(|l| l.addresses_of(mac))
            .unwrap_or_default()
    }

    /// [`access::authorize`] with this server's lease view, clock and TTL.
    pub fn authorize<'m>(
        &self,
        m: &'m Machine,
        mac: &[u8; 6],
        token: &str,
        peer: SocketAddr,
        need: access::Need,
    ) -> Result<&'m crate::api::BootRecord, access::Refusal> {
        let leases = self.leases_of(mac);
        let ask = access::Ask {
            token,
            peer: peer.ip(),
            leases: &leases,
            need,
            now: jiff::Timestamp::now(),
            ttl: self.settings.token_ttl,
        };
        access::authorize(&self.key, m, &ask)
    }

    /// Refuse a request naming a MAC no Machine has (no event: there is no
    /// object to hang it on, and anyone may send any MAC).
    pub fn refuse_unknown(&self, what: &str, peer: SocketAddr) -> Response {
        self.metrics.error(ErrorReason::forbidden);
        let why = access::Refusal::UnknownMachine;
        tracing::warn!(peer = %peer.ip(), why = %why, "{what} request refused");
        refused()
    }

    /// Refuse with 403 and the generic [`access::REFUSED`]; the reason goes
    /// to the log and a Warning event on the Machine.
    pub async fn refuse(
        &self,
        m: &Machine,
        reason: &str,
        what: &str,
        peer: SocketAddr,
        why: access::Refusal,
    ) -> Response {
        self.refuse_with(m, reason, what, peer, why, "").await
    }

    /// [`BootState::refuse`] with more words for the event (`detail`).
    pub async fn refuse_with(
        &self,
        m: &Machine,
        reason: &str,
        what: &str,
        peer: SocketAddr,
        why: access::Refusal,
        detail: &str,
    ) -> Response {
        self.metrics.error(ErrorReason::forbidden);
        let from = once::plain(peer.ip());
        tracing::warn!(peer = %from, why = %why, detail, "{what} request refused");
        let sep = if detail.is_empty() { "" } else { " " };
        self.warn(
            m,
            reason,
            &format!("{what} request from {from} refused: {why}{sep}{detail}"),
        )
        .await;
        refused()
    }

    /// A Warning event on the Machine (best effort).
    pub async fn warn(&self, m: &Machine, reason: &str, message: &str) {
        self.event(m, EventType::Warning, reason, message).await;
    }

    pub async fn event(&self, m: &Machine, t: EventType, reason: &str, message: &str) {
        let about = Regarding {
            kind: Kind::Machine,
            namespace: m
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: m.metadata.name.clone().unwrap_or_default(),
            uid: m.metadata.uid.clone(),
        };
        if let Err(e) = record(self.store.as_ref(), &about, t, reason, message).await {
            tracing::warn!(error = %e, "cannot record event");
        }
    }

    /// The MachineClass a Machine runs, or a response saying why not.
    pub async fn class_of(&self, m: &Machine) -> Result<MachineClass, Response> {
        let ns = m.metadata.namespace.as_deref().unwrap_or("default");
        let Some(cref) = &m.spec.class_ref else {
            self.warn(
                m,
                "BootMisconfigured",
                "the machine is booting for install but has no classRef",
            )
            .await;
            return Err(reply(StatusCode::CONFLICT, "machine has no classRef"));
        };
        // A set's machine is rendered from its pinned revision's snapshot.
        match crate::store::pinned::pinned_class(self.store.as_ref(), m).await {
            Ok(Some((snapshot, _))) => return Ok(snapshot),
            Ok(None) => {}
            Err(e) => return Err(self.store_error(e)),
        }
        match self.store.get_obj::<MachineClass>(ns, &cref.name).await {
            Ok(c) => Ok(c),
            Err(e) if e.is_not_found() => {
                self.warn(
                    m,
                    "BootMisconfigured",
                    &format!("MachineClass {} not found", cref.name),
                )
                .await;
                Err(reply(
                    StatusCode::CONFLICT,
                    "the machine's MachineClass does not exist",
                ))
            }
            Err(e) => Err(self.store_error(e)),
        }
    }

    /// URLs of this boot for a renderer or an install script, under `base`
    /// (the base URL the requesting machine reaches, see
    /// [`config::BootSettings::base_url_for`]).
    pub fn ignition_context(
        &self,
        base: &str,
        mac: &[u8; 6],
        token: &str,
        boot_id: &str,
    ) -> IgnitionContext {
        let q = format!("mac={}&token={token}", MacAddr(*mac).hyphenated());
        IgnitionContext {
            token: token.to_string(),
            mac: MacAddr(*mac).to_string(),
            base_url: base.to_string(),
            node_config_url: format!("{base}/ignition?{q}&stage=node"),
            callhome_base: format!("{base}/callhome"),
            callhome_query: q,
            boot_id: boot_id.to_string(),
        }
    }

    /// Append a boot step to the Machine's history (never blocks).
    pub fn record(
        &self,
        e: &MachineEntry,
        step: BootStep,
        detail: &str,
        bytes: Option<u64>,
        boot_id: Option<&str>,
    ) {
        self.record_event(e, boot_event(step, detail, bytes, boot_id));
    }

    /// Append a step made with [`boot_event`] (never blocks).
    pub fn record_event(&self, e: &MachineEntry, ev: BootEvent) {
        self.recorder.record(&e.namespace, &e.name, ev);
    }

    /// [`update_boot_noting`] for `e`'s machine, taking the steps the
    /// recorder holds for it along into the same write (they go back to
    /// the recorder when nothing is written).
    pub async fn update_boot_noting(
        &self,
        e: &MachineEntry,
        boot_id: &str,
        note: &BootEvent,
        f: impl Fn(&mut crate::api::BootRecord) -> bool,
    ) -> Result<bool, StoreError> {
        let held = self.recorder.take(&e.namespace, &e.name);
        let mut notes = held.clone();
        notes.push(note.clone());
        let r = update_boot_noting(
            self.store.as_ref(),
            &e.namespace,
            &e.name,
            boot_id,
            &notes,
            f,
        )
        .await;
        if !matches!(r, Ok(true)) {
            self.recorder.give_back(&e.namespace, &e.name, held);
        }
        r
    }
}

/// A boot-history step, timed now.
pub fn boot_event(
    step: BootStep,
    detail: &str,
    bytes: Option<u64>,
    boot_id: Option<&str>,
) -> BootEvent {
    BootEvent {
        time: jiff::Timestamp::now(),
        step,
        detail: detail.into(),
        bytes,
        boot_id: boot_id.map(str::to_string),
    }
}

/// [`update_boot`], with the boot-history steps `notes` added in the same
/// status write when `f` changed the record (one write, not two: in
/// Kubernetes mode each is an API call). `Ok(false)`: nothing written, and
/// the caller records the steps through the recorder if it still wants them.
pub async fn update_boot_noting(
    store: &dyn Store,
    ns: &str,
    name: &str,
    boot_id: &str,
    notes: &[BootEvent],
    f: impl Fn(&mut crate::api::BootRecord) -> bool,
) -> Result<bool, StoreError> {
    let written = modify_obj::<Machine>(store, ns, name, Target::Status, |m| {
        let Some(mut m) = m else { return Ok(None) };
        let Some(st) = m.status.as_mut() else {
            return Ok(None);
        };
        let Some(b) = st.boot.as_mut() else {
            return Ok(None);
        };
        if b.id != boot_id || !f(b) {
            return Ok(None);
        }
        crate::directory::insert_boot_events(&mut st.boot_history, notes);
        Ok(Some(m))
    })
    .await?;
    Ok(written.is_some())
}

/// Change `status.boot` of a Machine if it is still boot `boot_id`, retrying
/// on conflicts. `f` returns whether it changed anything.
pub async fn update_boot(
    store: &dyn Store,
    ns: &str,
    name: &str,
    boot_id: &str,
    f: impl Fn(&mut crate::api::BootRecord) -> bool,
) -> Result<bool, StoreError> {
    let written = modify_obj::<Machine>(store, ns, name, Target::Status, |m| {
        let Some(mut m) = m else { return Ok(None) };
        let Some(b) = m.status.as_mut().and_then(|s| s.boot.as_mut()) else {
            return Ok(None);
        };
        Ok((b.id == boot_id && f(b)).then_some(m))
    })
    .await?;
    Ok(written.is_some())
}

/// The one answer every refused request gets.
pub fn refused() -> Response {
    reply(StatusCode::FORBIDDEN, access::REFUSED)
}

/// A plain-text response.
pub fn reply(status: StatusCode, text: &str) -> Response {
    (
        status,
        [(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{text}\n"),
    )
        .into_response()
}

/// Query parameters (the last value of a repeated name wins).
pub struct Params(HashMap<String, String>);

impl Params {
    pub fn parse(q: &str) -> Params {
        Params(
            url::form_urlencoded::parse(q.as_bytes())
                .take(32)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }
    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }
    /// The `mac` parameter, or why it is unusable.
    pub fn mac(&self) -> Result<[u8; 6], &'static str> {
        let s = self.get("mac").ok_or("mac: missing")?;
        s.parse::<MacAddr>()
            .map(MacAddr::octets)
            .map_err(|_| "mac: not a MAC address (aa-bb-cc-dd-ee-ff)")
    }
}

/// The boot router over shared state.
pub fn router(state: Arc<BootState>) -> Router {
    Router::new()
        .route("/boot.ipxe", get(script_handler::handler))
        .route("/assets/{*path}", get(assets::asset))
        .route("/images/{sha256}/{name}", get(assets::image))
        .route("/ignition", get(ignition::handler))
        .route("/callhome/{what}", post(callhome::handler))
        .route("/vmedia/{mac}/{token}/{name}", get(vmedia::handler))
        .fallback(fallback)
        .layer(axum::extract::DefaultBodyLimit::max(4096))
        // The span names the path only: queries carry per-boot tokens,
        // and so does a virtual media path (hidden by `vmedia::logged_path`).
        .layer(
            tower_http::trace::TraceLayer::new_for_http().make_span_with(
                |r: &http::Request<axum::body::Body>| {
                    let path = vmedia::logged_path(r.uri().path());
                    tracing::info_span!("boot_http", method = %r.method(), path = %path)
                },
            ),
        )
        .with_state(state)
}

async fn fallback() -> Response {
    reply(StatusCode::NOT_FOUND, "not found")
}

/// Bind the boot listener (fail fast: call before starting anything else).
/// An IPv6 wildcard (`[::]:PORT`) is bound dual-stack whatever the host's
/// `net.ipv6.bindv6only` says: IPv4 clients arrive as IPv4-mapped peers,
/// which every address check here treats as the IPv4 address they carry.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, BootError> {
    let err = |source| BootError::Bind { addr, source };
    let sock = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4().map_err(err)?,
        SocketAddr::V6(_) => {
            let s = socket2::Socket::new(
                socket2::Domain::IPV6,
                socket2::Type::STREAM,
                Some(socket2::Protocol::TCP),
            )
            .map_err(err)?;
            if addr.ip().is_unspecified() {
                s.set_only_v6(false).map_err(err)?;
            }
            s.set_nonblocking(true).map_err(err)?;
            tokio::net::TcpSocket::from_std_stream(s.into())
        }
    };
    sock.set_reuseaddr(true).map_err(err)?;
    sock.bind(addr).map_err(err)?;
    sock.listen(1024).map_err(err)
}

/// Serve until cancelled, within the configured connection limits;
/// in-flight requests get a short drain.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<BootState>,
    cancel: CancellationToken,
) -> Result<(), BootError> {
    let limits = state.settings.connections;
    let metrics = state.metrics.connections.clone();
    super::limits::serve(
        listener,
        router(state),
        limits,
        metrics,
        cancel,
        std::time::Duration::from_secs(5),
    )
    .await;
    Ok(())
}

/// Start the boot HTTP service from `serve`: binds the listener first
/// (fail fast), then runs the server in `tasks` under `cancel`.
pub async fn start(
    settings: BootSettings,
    deps: BootDeps,
    tasks: &mut tokio::task::JoinSet<()>,
    cancel: CancellationToken,
) -> Result<Arc<BootState>, BootError> {
    let listener = bind(settings.listen).await?;
    let state = Arc::new(BootState::new(settings, deps)?);
    tracing::info!(listen = %state.settings.listen, base_url = %state.settings.base_url,
        base_url6 = state.settings.base_url6.as_deref().unwrap_or("-"), "boot HTTP server listening");
    let served = state.clone();
    tasks.spawn(async move {
        if let Err(e) = serve(listener, served, cancel).await {
            tracing::error!(error = %e, "boot HTTP server stopped");
        }
    });
    Ok(state)
}
