//! Operations endpoints: `/healthz` (no auth, for probes) and `/metrics`
//! (Prometheus text, behind the API token like every other path), plus the
//! process-wide metrics registry every subsystem registers into under the
//! `metalherd_` prefix. Labels stay bounded: never a MAC, IP or object name.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

/// The shared registry. Cheap to clone; register at any time.
#[derive(Clone)]
pub struct MetricsRegistry {
    inner: Arc<Mutex<Registry>>,
}

impl Default for MetricsRegistry {
    fn default() -> Self {
        MetricsRegistry {
            inner: Arc::new(Mutex::new(Registry::with_prefix("metalherd"))),
        }
    }
}

impl MetricsRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Register `metric` as `metalherd_<name>`. Name it after the subsystem
    /// (`dhcp_packets`, `tftp_transfers`); counters get `_total` appended.
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        if let Ok(mut r) = self.inner.lock() {
            r.register(name, help, metric);
        }
    }

    /// Register a subsystem's whole metric set at once (names under the
    /// `metalherd_` prefix).
    pub fn with_registry(&self, f: impl FnOnce(&mut Registry)) {
        if let Ok(mut r) = self.inner.lock() {
            f(&mut r);
        }
    }

    /// The Prometheus/OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Ok(r) = self.inner.lock() {
            // Writing into a String cannot fail.
            let _ = prometheus_client::encoding::text::encode(&mut out, &r);
        }
        out
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// GET, POST, PUT, PATCH, DELETE or OTHER.
    pub method: &'static str,
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    pub method: &'static str,
}

/// Metrics of the API server.
#[derive(Clone)]
pub struct ApiMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub duration: Family<MethodLabels, Histogram>,
    pub watches: Gauge,
}

impl ApiMetrics {
    pub fn register(reg: &MetricsRegistry) -> ApiMetrics {
        let m = ApiMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 2.0, 18))
            }),
            watches: Gauge::default(),
        };
        reg.register(
            "api_requests",
            "API requests by method and status code",
            m.requests.clone(),
        );
        reg.register(
            "api_request_duration_seconds",
            "Time to the response head, by method (watches: to the stream start)",
            m.duration.clone(),
        );
        reg.register("api_watches", "Watch streams open now", m.watches.clone());
        m
    }

    /// A method name with bounded cardinality.
    pub fn method_label(m: &axum::http::Method) -> &'static str {
        match m.as_str() {
            "GET" => "GET",
            "POST" => "POST",
            "PUT" => "PUT",
            "PATCH" => "PATCH",
            "DELETE" => "DELETE",
            _ => "OTHER",
        }
    }
}

/// `/healthz`: answers while the process serves. No auth.
pub fn health_routes() -> Router {
    Router::new().route("/healthz", get(|| async { "ok\n" }))
}

/// `/metrics` (put it behind the API token).
pub fn metrics_routes(reg: MetricsRegistry) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(reg)
}

async fn metrics(State(reg): State<MetricsRegistry>) -> impl IntoResponse {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        reg.encode(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_prefixes_names() {
        let reg = MetricsRegistry::new();
        let m = ApiMetrics::register(&reg);
        m.requests
            .get_or_create(&RequestLabels {
                method: "GET",
                code: 200,
            })
            .inc();
        let text = reg.encode();
        assert!(
            text.contains("metalherd_api_requests_total{method=\"GET\",code=\"200\"} 1"),
            "{text}"
        );
    }
}
