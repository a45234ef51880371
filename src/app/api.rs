//! The API server's router: the REST API and metrics behind the bearer
//! token, health and the web page without it.

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
) -> axum::Router {
    let state = ApiState {
        store: store.clone(),
        cancel: cancel.clone(),
        metrics: metrics.clone(),
    };
    let protected =
        crate::http::api::routes(state).merge(crate::http::ops::metrics_routes(registry.clone()));
    // The web page is public: it holds no data and calls the API with the
    // user's token.
    crate::http::api::protect(
        protected,
        crate::http::ops::health_routes().merge(crate::http::ui::router()),
        token,
        metrics,
    )
}
