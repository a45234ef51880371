//! The validating admission webhook for Kubernetes mode
//! (`POST /admission/validate`): a kube-apiserver sends an
//! `admission.k8s.io/v1` AdmissionReview for each create or update of a
//! metalherd object (deploy/kubernetes/webhook.yaml) and gets the verdict
//! of the same checks this API runs on its own writes (schema, meaning,
//! this deployment's admission rules), so `kubectl apply` against a
//! cluster refuses an invalid Machine with the same field paths as
//! standalone mode.
//!
//! No bearer token: the kube-apiserver presents none. The webhook reads no
//! state and changes nothing, so an anonymous caller learns only whether
//! an object it sent is valid. Status subresource writes, deletes and
//! kinds that are not metalherd's are allowed unchecked (the API's own
//! writes do not check status either).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::admission::Admission;
use super::handlers::{admitted_by, meta_str};
use super::status::ApiError;
use crate::api::Kind;

/// The webhook's path (the `clientConfig.service.path` of its manifest).
pub const PATH: &str = "/admission/validate";

/// The route, outside the token check (see [`super::protect`]'s `public`).
pub fn routes(admission: Admission) -> Router {
    Router::new()
        .route(PATH, post(review))
        .with_state(admission)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    api_version: String,
    kind: String,
    request: Option<ReviewRequest>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewRequest {
    uid: String,
    kind: GroupVersionKind,
    #[serde(default)]
    sub_resource: Option<String>,
    operation: String,
    #[serde(default)]
    object: Option<Value>,
}

#[derive(Deserialize)]
struct GroupVersionKind {
    #[serde(default)]
    group: String,
    kind: String,
}

async fn review(State(admission): State<Admission>, body: axum::body::Bytes) -> Response {
    match answer(&admission, &body) {
        Ok(v) => (StatusCode::OK, Json(v)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The AdmissionReview answering `body`, or why it is not one.
pub fn answer(admission: &Admission, body: &[u8]) -> Result<Value, ApiError> {
    let r: Review = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("not an AdmissionReview: {e}")))?;
    if r.kind != "AdmissionReview" || r.api_version != "admission.k8s.io/v1" {
        return Err(ApiError::bad_request(format!(
            "expected an admission.k8s.io/v1 AdmissionReview, got {} {}",
            r.api_version, r.kind
        )));
    }
    let req = r
        .request
        .ok_or_else(|| ApiError::bad_request("AdmissionReview without a request"))?;
    let verdict = match verdict(admission, &req) {
        Ok(()) => json!({"uid": req.uid, "allowed": true}),
        Err(e) => json!({"uid": req.uid, "allowed": false, "status": e.body()}),
    };
    Ok(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": verdict,
    }))
}

fn verdict(admission: &Admission, req: &ReviewRequest) -> Result<(), ApiError> {
    let checked = matches!(req.operation.as_str(), "CREATE" | "UPDATE")
        && req.sub_resource.as_deref().unwrap_or("").is_empty();
    let kind = Kind::ALL.into_iter().find(|k| {
        k.group() == req.kind.group && k.as_str() == req.kind.kind && k.group() == crate::api::GROUP
    });
    let (Some(kind), true) = (kind, checked) else {
        return Ok(());
    };
    let obj = req
        .object
        .as_ref()
        .ok_or_else(|| ApiError::bad_request(format!("{} without an object", req.operation)))?;
    let name = meta_str(obj, "name").unwrap_or_default().to_string();
    tracing::debug!(%kind, name, operation = req.operation, "admission review");
    admitted_by(admission, kind, obj).map(|_| ())
}

#[cfg(test)]
mod tests;
