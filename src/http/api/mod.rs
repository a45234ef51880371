//! The Kubernetes-shaped REST API over the [`Store`]:
//! `/apis/metalherd.dev/v1alpha1/namespaces/{ns}/{plural}[/{name}[/status|/scale]]`,
//! `/api/v1/namespaces/{ns}/{secrets|events}[/{name}]`,
//! `/apis/coordination.k8s.io/v1/namespaces/{ns}/leases[/{name}]`, and each
//! without `namespaces/{ns}` for lists across namespaces; the cluster-scoped
//! Namespaces at `/api/v1/namespaces[/{name}]` ([`namespaces`]). GET, LIST (label
//! and field selectors, Tables), POST, PUT, PATCH (merge, JSON, strategic
//! and server-side apply, [`ssa`]), DELETE and `?watch=true` streams;
//! errors as `Status` bodies. Every write records its field manager in
//! `metadata.managedFields`.
//!
//! Every request needs the bearer token (except `/healthz`, mounted by the
//! caller outside [`protect`]). A span per request carries method, path and
//! status, never bodies or headers: Secrets pass through here.

pub mod admission;
mod apply;
pub mod discovery;
pub mod fields;
mod handlers;
pub mod namespaces;
pub mod normalize;
pub mod openapi;
pub mod openapi_v2;
mod paging;
mod patch;
pub mod protobuf;
pub mod scale;
pub mod ssa;
pub mod status;
pub mod table;
mod watch;
pub mod webhook;
pub mod write_call;
mod writes;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::api::Kind;
use crate::http::ops::{ApiMetrics, MethodLabels, RequestLabels};
use crate::store::Store;
pub use status::ApiError;

/// What every handler needs.
#[derive(Clone)]
pub struct ApiState {
    pub store: Arc<dyn Store>,
    /// Watches end when this fires, so shutdown is not held up by them.
    pub cancel: CancellationToken,
    pub metrics: ApiMetrics,
    /// Rules of this deployment (DHCP proxy mode needs Machine addresses).
    pub admission: admission::Admission,
    /// Creating in a namespace against deleting it.
    pub namespaces: namespaces::Gate,
}

/// The API group versions served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// `/api/v1`: Secrets and Events.
    Core,
    /// `/apis/metalherd.dev/v1alpha1`.
    Metalherd,
    /// `/apis/coordination.k8s.io/v1`: Leases.
    Coordination,
}

impl Group {
    pub const ALL: [Group; 3] = [Group::Core, Group::Metalherd, Group::Coordination];

    /// URL prefix of the group version.
    pub fn prefix(self) -> &'static str {
        match self {
            Group::Core => "/api/v1",
            Group::Metalherd => "/apis/metalherd.dev/v1alpha1",
            Group::Coordination => "/apis/coordination.k8s.io/v1",
        }
    }

    /// The group a kind belongs to.
    pub fn of(kind: Kind) -> Group {
        match kind.group() {
            "" => Group::Core,
            crate::api::COORDINATION_GROUP => Group::Coordination,
            _ => Group::Metalherd,
        }
    }

    /// The kind a URL's plural names in this group, if served.
    pub fn kind(self, plural: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.plural() == plural && Group::of(*k) == self)
    }

    /// The kinds served in this group.
    pub fn kinds(self) -> impl Iterator<Item = Kind> {
        Kind::ALL.into_iter().filter(move |k| Group::of(*k) == self)
    }
}

/// URL prefix of a kind's API group.
pub fn group_prefix(kind: Kind) -> &'static str {
    Group::of(kind).prefix()
}

/// The resource routes (not yet behind auth: see [`protect`]).
pub fn routes(state: ApiState) -> Router {
    let mut router = Router::new();
    for group in Group::ALL {
        router = router.nest(group.prefix(), group_routes(group));
    }
    router
        .merge(discovery::routes())
        .merge(openapi::routes())
        .with_state(state)
}

fn group_routes(group: Group) -> Router<ApiState> {
    use handlers::*;
    use patch::{patch, patch_namespace, patch_status};
    use writes::*;
    let mut r = Router::new()
        .route(
            "/namespaces/{ns}/{plural}",
            get(list_namespaced).post(create).delete(delete_collection),
        )
        .route(
            "/namespaces/{ns}/{plural}/{name}",
            get(get_one).put(replace).patch(patch).delete(delete),
        )
        .route(
            "/namespaces/{ns}/{plural}/{name}/status",
            get(get_status).put(replace_status).patch(patch_status),
        )
        .route(
            "/namespaces/{ns}/{plural}/{name}/scale",
            get(scale::get_scale)
                .put(scale::replace_scale)
                .patch(scale::patch_scale),
        )
        .route("/{plural}", get(list_all).post(create_cluster));
    if group == Group::Core {
        // The one cluster-scoped kind: `/api/v1/namespaces/{name}`.
        r = r.route(
            "/namespaces/{name}",
            get(get_namespace)
                .put(replace_namespace)
                .patch(patch_namespace)
                .delete(delete_namespace),
        );
    }
    r.method_not_allowed_fallback(|| async { method_not_allowed() })
        .layer(axum::Extension(group))
}

/// Put `protected` behind the bearer token, add `public` (health) beside
/// it, a Status-shaped 404 for unknown paths, and the request span and
/// metrics around everything.
pub fn protect(protected: Router, public: Router, token: &str, metrics: ApiMetrics) -> Router {
    let token: Arc<[u8]> = Arc::from(token.as_bytes());
    protected
        .fallback(|| async {
            ApiError::not_found("the server could not find the requested resource")
        })
        .layer(middleware::from_fn_with_state(token, require_token))
        .merge(public)
        .layer(middleware::from_fn_with_state(metrics, trace_request))
}

/// How much of a refused request's body is read before the 401.
const UNAUTHORIZED_BODY_LIMIT: usize = 64 * 1024;

async fn require_token(State(token): State<Arc<[u8]>>, req: Request, next: Next) -> Response {
    let ok = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| constant_time_eq(t.trim().as_bytes(), &token));
    if ok {
        next.run(req).await
    } else {
        // Read (a bounded part of) the body before answering: closing a TLS
        // connection with unread request bytes resets it, and the client
        // would lose the 401.
        let _ = axum::body::to_bytes(req.into_body(), UNAUTHORIZED_BODY_LIMIT).await;
        ApiError::unauthorized().into_response()
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn trace_request(State(metrics): State<ApiMetrics>, req: Request, next: Next) -> Response {
    let method = ApiMetrics::method_label(req.method());
    // The path only: query strings and headers stay out of logs.
    let path = req.uri().path().to_string();
    let span =
        tracing::info_span!("http_request", method, path = %path, status = tracing::field::Empty);
    let start = Instant::now();
    let resp = next.run(req).instrument(span.clone()).await;
    let code = resp.status().as_u16();
    let elapsed = start.elapsed();
    span.record("status", code);
    metrics
        .requests
        .get_or_create(&RequestLabels { method, code })
        .inc();
    metrics
        .duration
        .get_or_create(&MethodLabels { method })
        .observe(elapsed.as_secs_f64());
    let ms = elapsed.as_secs_f64() * 1000.0;
    if code >= 500 {
        tracing::warn!(parent: &span, ms, "request failed");
    } else if code == 401 {
        tracing::info!(parent: &span, ms, "request without a valid token");
    } else if code >= 400 {
        // 404s are routine (apply probes before creating): keep them quiet.
        tracing::debug!(parent: &span, ms, "request refused");
    } else {
        tracing::debug!(parent: &span, ms, "request");
    }
    resp
}

#[cfg(test)]
mod tests;
