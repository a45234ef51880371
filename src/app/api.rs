//! The API server's router (the REST API and metrics behind the bearer
//! token; health, the web page and the admission webhook without it) and
//! its TLS configuration.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::http::api::ApiState;
use crate::http::ops::{ApiMetrics, MetricsRegistry};
use crate::store::Store;

pub(super) fn router(
    store: &Arc<dyn Store>,
    registry: &MetricsRegistry,
    metrics: ApiMetrics,
    token: &str,
    cancel: &CancellationToken,
    admission: crate::http::api::admission::Admission,
) -> axum::Router {
    let state = ApiState {
        store: store.clone(),
        cancel: cancel.clone(),
        metrics: metrics.clone(),
        admission: admission.clone(),
        namespaces: Default::default(),
    };
    let protected =
        crate::http::api::routes(state).merge(crate::http::ops::metrics_routes(registry.clone()));
    // The web page is public: it holds no data and calls the API with the
    // user's token.
    crate::http::api::protect(
        protected,
        crate::http::ops::health_routes()
            .merge(crate::http::ui::router())
            .merge(crate::http::api::webhook::routes(admission)),
        token,
        metrics,
    )
}

/// The API listener's TLS configuration: `None` (plain HTTP) only with
/// `--insecure-http` on a loopback address; else the user's own pair
/// (`--tls-cert/--tls-key`) or the data directory's CA and a server
/// certificate signed for the names clients use.
pub(super) fn tls_config(
    insecure_http: bool,
    bound: SocketAddr,
    data_dir: &Path,
    args: &crate::cli::serve::ServeArgs,
) -> anyhow::Result<Option<rustls::ServerConfig>> {
    if insecure_http {
        if !bound.ip().is_loopback() {
            anyhow::bail!(
                "--insecure-http serves the API (and its token) in clear text: only on a loopback address, not {bound}"
            );
        }
        tracing::warn!("--insecure-http: the API is served over plain HTTP");
        return Ok(None);
    }
    let identity = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let ca = data_dir.join(crate::datadir::CA_CERT_FILE);
            if ca.exists() {
                // The CLI and `metalherd kubeconfig` trust this CA when it
                // exists, and it did not sign the user's certificate.
                tracing::warn!(
                    "serving --tls-cert, but clients of this data directory trust {} from an earlier start: remove it (and ca.key) so they use the system's roots",
                    ca.display()
                );
            }
            crate::tls::load_user(cert, key)?
        }
        _ => crate::tls::ensure_generated(
            data_dir,
            &crate::tls::server_names(bound.ip(), &args.advertise_address),
        )?,
    };
    Ok(Some(crate::tls::server_config(&identity)?))
}
