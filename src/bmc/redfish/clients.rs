//! The reqwest clients the Redfish driver (and hw-test) talk through: one
//! per TLS setting and request timeout, shared by every BMC that uses the
//! same ones. Redirects are off: the transport checks every link stays on
//! the BMC before credentials go out, and a redirect would skip that check.

use std::collections::HashMap;
use std::time::Duration;

use crate::bmc::Timing;

/// How the BMC's certificate is checked.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TlsMode {
    /// The platform's trust store.
    SystemRoots,
    /// Only these PEM certificates (the Machine's CA bundle).
    CaBundle(String),
    /// No verification: only when the Machine says so explicitly.
    Insecure,
}

/// Install the process-wide rustls provider (ring) once; a second call is a no-op.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Clients kept per (TLS mode, timeouts). A reqwest client holds the TLS
/// configuration and trust store (about 250 KiB with the system roots) and
/// a connection pool per host, so BMCs that trust the same roots share one;
/// a Machine with its own CA bundle gets its own.
static CLIENTS: std::sync::LazyLock<
    std::sync::Mutex<HashMap<(TlsMode, Duration), reqwest::Client>>,
> = std::sync::LazyLock::new(Default::default);

/// More distinct TLS settings than this and the cache starts over (clients
/// in use stay alive through their drivers).
const MAX_CACHED_CLIENTS: usize = 512;

/// Why no HTTP client could be built for a BMC's TLS settings.
#[derive(Debug, thiserror::Error)]
pub enum ClientBuildError {
    #[error("CA bundle: {0}")]
    CaBundle(#[source] reqwest::Error),
    #[error("CA bundle holds no certificate")]
    EmptyCaBundle,
    #[error("HTTP client: {0}")]
    Build(#[source] reqwest::Error),
}

/// The HTTP client the driver would use for these TLS settings (shared).
pub fn http_client(tls: &TlsMode, timing: &Timing) -> Result<reqwest::Client, ClientBuildError> {
    shared_client(tls, timing)
}

pub(super) fn shared_client(
    tls: &TlsMode,
    timing: &Timing,
) -> Result<reqwest::Client, ClientBuildError> {
    let key = (tls.clone(), timing.request_timeout);
    if let Ok(cache) = CLIENTS.lock()
        && let Some(c) = cache.get(&key)
    {
        return Ok(c.clone());
    }
    let client = build_client(tls, timing)?;
    if let Ok(mut cache) = CLIENTS.lock() {
        if cache.len() >= MAX_CACHED_CLIENTS {
            cache.clear();
        }
        cache.insert(key, client.clone());
    }
    Ok(client)
}

fn build_client(tls: &TlsMode, timing: &Timing) -> Result<reqwest::Client, ClientBuildError> {
    install_crypto_provider();
    let mut b = reqwest::Client::builder()
        .timeout(timing.request_timeout)
        .connect_timeout(timing.request_timeout)
        .pool_max_idle_per_host(2)
        .pool_idle_timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("metalherd/", env!("CARGO_PKG_VERSION")));
    match tls {
        TlsMode::SystemRoots => {}
        TlsMode::CaBundle(pem) => {
            let certs = reqwest::Certificate::from_pem_bundle(pem.as_bytes())
                .map_err(ClientBuildError::CaBundle)?;
            if certs.is_empty() {
                return Err(ClientBuildError::EmptyCaBundle);
            }
            b = b.tls_certs_only(certs);
        }
        TlsMode::Insecure => b = b.tls_danger_accept_invalid_certs(true),
    }
    b.build().map_err(ClientBuildError::Build)
}
