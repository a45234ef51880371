//! Errors of the REST API as Kubernetes `Status` bodies: the reason and code
//! a Kubernetes client expects (`NotFound` 404, `AlreadyExists`/`Conflict`
//! 409, `Invalid` 422 with field causes, ...). Messages come from typed
//! errors that name objects, never their contents.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::api::{FieldError, Kind, ValidationErrors};
use crate::store::StoreError;

/// An API failure, rendered as a `Status` object.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: StatusCode,
    /// Kubernetes `StatusReason` (`NotFound`, `Invalid`, ...).
    pub reason: &'static str,
    pub message: String,
    /// `details` of the Status: kind, name and field causes.
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "NotFound", message)
    }

    pub fn unauthorized() -> Self {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "Unauthorized: send the API token as \"Authorization: Bearer TOKEN\" (it is in the data directory's api-token file)",
        )
    }

    /// 422 with one cause per field, like Kubernetes' `Invalid`.
    pub fn invalid(kind: Kind, name: &str, errs: &ValidationErrors) -> Self {
        let causes: Vec<Value> = errs.0.iter().map(cause).collect();
        let group = match kind.group() {
            "" => String::new(),
            g => format!(".{g}"),
        };
        ApiError {
            code: StatusCode::UNPROCESSABLE_ENTITY,
            reason: "Invalid",
            message: format!("{kind}{group} {name:?} is invalid: {errs}"),
            details: Some(json!({
                "name": name,
                "group": kind.group(),
                "kind": kind.as_str(),
                "causes": causes,
            })),
        }
    }

    /// The `Status` object this error is shown as.
    pub fn body(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code.as_u16(),
        });
        if let (Some(d), Some(m)) = (&self.details, v.as_object_mut()) {
            m.insert("details".into(), d.clone());
        }
        v
    }
}

/// A Status' `details` naming one object, as kube-apiserver fills them.
fn details(kind: Kind, name: &str) -> Value {
    json!({"name": name, "group": kind.group(), "kind": kind.plural()})
}

fn cause(e: &FieldError) -> Value {
    json!({"reason": "FieldValueInvalid", "field": e.field, "message": e.message})
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.code, axum::Json(self.body())).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::NotFound { kind, name, .. } => {
                let mut err =
                    ApiError::not_found(format!("{} {name:?} not found", kind.qualified_plural()));
                err.details = Some(details(*kind, name));
                err
            }
            StoreError::AlreadyExists { kind, name, .. } => {
                let mut err = ApiError::new(
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    format!("{} {name:?} already exists", kind.qualified_plural()),
                );
                err.details = Some(details(*kind, name));
                err
            }
            StoreError::Conflict {
                kind,
                name,
                expected,
                current,
                ..
            } => {
                // kube-apiserver's words (clients match on the reason and
                // code only), then which versions disagreed.
                let mut err = ApiError::new(
                    StatusCode::CONFLICT,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again (resourceVersion {expected} is stale, current is {current})",
                        kind.qualified_plural()
                    ),
                );
                err.details = Some(details(*kind, name));
                err
            }
            StoreError::Invalid(errs) => ApiError {
                code: StatusCode::UNPROCESSABLE_ENTITY,
                reason: "Invalid",
                message: errs.to_string(),
                details: Some(json!({"causes": errs.0.iter().map(cause).collect::<Vec<_>>()})),
            },
            StoreError::Gone { .. } => ApiError::new(StatusCode::GONE, "Expired", e.to_string()),
            StoreError::Forbidden { .. } => {
                ApiError::new(StatusCode::FORBIDDEN, "Forbidden", e.to_string())
            }
            StoreError::Malformed(_) | StoreError::BadResourceVersion(_) => {
                ApiError::bad_request(e.to_string())
            }
            _ => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                e.to_string(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_carries_causes() {
        let errs = ValidationErrors::single("spec.replicas", "must be 0 or more, got -1");
        let b = ApiError::invalid(Kind::MachineSet, "workers", &errs).body();
        assert_eq!(b["code"], 422);
        assert_eq!(b["reason"], "Invalid");
        assert_eq!(b["details"]["causes"][0]["field"], "spec.replicas");
    }

    #[test]
    fn store_errors_map_to_codes() {
        let nf: ApiError = StoreError::NotFound {
            kind: Kind::Machine,
            namespace: "default".into(),
            name: "x".into(),
        }
        .into();
        assert_eq!(nf.code, StatusCode::NOT_FOUND);
        let c: ApiError = StoreError::Conflict {
            kind: Kind::Machine,
            namespace: "default".into(),
            name: "x".into(),
            expected: "1".into(),
            current: "2".into(),
        }
        .into();
        assert_eq!((c.code, c.reason), (StatusCode::CONFLICT, "Conflict"));
        let c: ApiError = StoreError::Conflict {
            kind: Kind::Lease,
            namespace: "default".into(),
            name: "leader".into(),
            expected: "1".into(),
            current: "2".into(),
        }
        .into();
        assert!(
            c.message.starts_with(
                "Operation cannot be fulfilled on leases.coordination.k8s.io \"leader\": the object has been modified"
            ),
            "{}",
            c.message
        );
        assert_eq!(c.body()["details"]["group"], "coordination.k8s.io");
        // The Kubernetes store's RBAC refusal passes through as a 403.
        let f: ApiError = StoreError::Forbidden {
            verb: "list",
            resource: "machines in all namespaces".into(),
            message: "no".into(),
        }
        .into();
        assert_eq!((f.code, f.reason), (StatusCode::FORBIDDEN, "Forbidden"));
    }
}
