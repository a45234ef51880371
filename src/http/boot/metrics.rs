//! Boot HTTP metrics (`metalherd_boot_http_*`): requests by endpoint and
//! status class, finished transfers and bytes by endpoint, and errors by
//! reason. Labels are small fixed enums, never a MAC or an address.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Endpoint {
    script,
    asset,
    image,
    ignition,
    callhome,
    media,
    other,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Outcome {
    ok,
    client_error,
    forbidden,
    server_error,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum ErrorReason {
    bad_request,
    not_found,
    forbidden,
    io,
    cache,
    render,
    store,
    aborted,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub endpoint: Endpoint,
    pub outcome: Outcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: Endpoint,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub reason: ErrorReason,
}

/// Cheap to clone; every clone counts into the same series.
#[derive(Clone, Debug, Default)]
pub struct BootMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub transfers: Family<EndpointLabels, Counter>,
    pub bytes: Family<EndpointLabels, Counter>,
    pub errors: Family<ErrorLabels, Counter>,
    /// Open, refused and timed-out connections of the boot listener.
    pub connections: crate::http::limits::ConnMetrics,
}

impl BootMetrics {
    /// Register under `boot_http_` in a registry that already carries the
    /// `metalherd` prefix (the shared one from `serve`).
    pub fn register_into(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("boot_http");
        r.register(
            "requests",
            "Boot HTTP requests by endpoint and outcome",
            self.requests.clone(),
        );
        r.register(
            "transfers",
            "Boot HTTP bodies sent completely, by endpoint",
            self.transfers.clone(),
        );
        r.register(
            "bytes",
            "Boot HTTP body bytes sent, by endpoint",
            self.bytes.clone(),
        );
        r.register(
            "errors",
            "Boot HTTP errors and aborted transfers, by reason",
            self.errors.clone(),
        );
        self.connections.register_into(r);
    }

    pub fn request(&self, endpoint: Endpoint, status: http::StatusCode) {
        let outcome = if status == http::StatusCode::FORBIDDEN {
            Outcome::forbidden
        } else if status.is_server_error() {
            Outcome::server_error
        } else if status.is_client_error() {
            Outcome::client_error
        } else {
            Outcome::ok
        };
        self.requests
            .get_or_create(&RequestLabels { endpoint, outcome })
            .inc();
    }

    pub fn error(&self, reason: ErrorReason) {
        self.errors.get_or_create(&ErrorLabels { reason }).inc();
    }

    /// A body of `bytes` finished (or was cut short: `complete == false`).
    pub fn transfer(&self, endpoint: Endpoint, bytes: u64, complete: bool) {
        self.bytes
            .get_or_create(&EndpointLabels { endpoint })
            .inc_by(bytes);
        if complete {
            self.transfers
                .get_or_create(&EndpointLabels { endpoint })
                .inc();
        } else {
            self.error(ErrorReason::aborted);
        }
    }
}
