//! PATCH of an object or its status: JSON merge patches, JSON patches
//! (RFC 6902), for Kubernetes' own kinds the strategic merge patches
//! kubectl sends them (as long as they are plain map merges), and
//! server-side apply ([`super::apply`]). A patch that names a
//! resourceVersion is a precondition; without one, a conflict with a
//! concurrent writer is retried on the fresh object.

use axum::Extension;
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode, header};
use serde_json::Value;

use super::handlers::{
    Res, admitted, checked, conform, content_type, namespaced_kind, ok_json, parse_body,
    status_kind,
};
use super::write_call::WriteCall;
use super::writes::Target;
use super::{ApiError, Group, ssa};
use crate::store::{modify, resource_version_of};

pub async fn patch(
    Extension(group): Extension<Group>,
    Path((ns, plural, name)): Path<(String, String, String)>,
    c: WriteCall,
) -> Res {
    let kind = namespaced_kind(group, &plural)?;
    patch_object(&c, Target::new(kind, &ns, &name, false)).await
}

/// PATCH `/api/v1/namespaces/{name}`.
pub async fn patch_namespace(Path(name): Path<String>, c: WriteCall) -> Res {
    patch_object(&c, Target::namespace(&name)).await
}

pub async fn patch_status(
    Extension(group): Extension<Group>,
    Path((ns, plural, name)): Path<(String, String, String)>,
    c: WriteCall,
) -> Res {
    let kind = status_kind(group, &plural)?;
    patch_object(&c, Target::new(kind, &ns, &name, true)).await
}

/// PATCH bodies are JSON merge patches: refuse any other Content-Type.
pub(super) fn merge_patch_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if ct.starts_with("application/merge-patch+json") {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "UnsupportedMediaType",
        format!("PATCH supports Content-Type application/merge-patch+json only, got {ct:?}"),
    ))
}

/// Patch the stored object and write it back. A patch that names a
/// resourceVersion is a precondition; without one, a conflict with a
/// concurrent writer is retried on the fresh object.
async fn patch_object(c: &WriteCall, t: Target<'_>) -> Res {
    let (st, w, headers, body) = (&c.st, &c.w, &c.headers, &c.body);
    let (kind, ns, name, status) = (t.kind, t.ns, t.name, t.status);
    let ct = content_type(headers);
    if ct.starts_with("application/apply-patch+yaml") {
        return super::apply::apply(st, t, body, w).await;
    }
    let strategic = ct.starts_with("application/strategic-merge-patch+json");
    let json_patch = ct.starts_with("application/json-patch+json");
    // Strategic merge patches only for the built-in kinds, as in Kubernetes.
    let accepted = ct.starts_with("application/merge-patch+json")
        || json_patch
        || (strategic && kind.is_builtin());
    if strategic && !accepted {
        // kube-apiserver's words for a custom resource (kubectl prints them).
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    if !accepted {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!(
                "PATCH supports Content-Type application/merge-patch+json, application/json-patch+json, application/apply-patch+yaml (and application/strategic-merge-patch+json for Kubernetes' own kinds), got {ct:?}"
            ),
        ));
    }
    let (patch, ops) = if json_patch {
        // RFC 6902: a list of operations; a `test` of the resourceVersion
        // is the way to make it conditional.
        let ops: json_patch::Patch = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("request body is not a JSON patch: {e}")))?;
        (Value::Null, Some(ops))
    } else {
        (parse_body(body)?, None)
    };
    if strategic {
        plain_strategic(&patch)?;
    }
    let precondition = resource_version_of(&patch).is_some();
    // A client-given resourceVersion is a precondition: one attempt only.
    let attempts = if precondition { 1 } else { modify::ATTEMPTS };
    let target = if status {
        modify::Target::Status
    } else {
        modify::Target::Object
    };
    let written = modify::modify(&*st.store, kind, ns, name, target, attempts, |current| {
        let Some(current) = current else {
            return Ok(None);
        };
        let mut merged = current.clone();
        match &ops {
            Some(ops) => json_patch::patch(&mut merged, ops).map_err(|e| {
                ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    format!("the JSON patch cannot be applied: {e}"),
                )
            })?,
            None => json_patch::merge(&mut merged, &patch),
        }
        if !precondition
            && let (Some(m), Some(rv)) = (
                merged.get_mut("metadata").and_then(Value::as_object_mut),
                current.pointer("/metadata/resourceVersion").cloned(),
            )
        {
            m.insert("resourceVersion".into(), rv);
        }
        let sent = ssa::sent(&merged);
        conform(kind, ns, Some(name), &mut merged)?;
        let mut next = if status {
            checked(kind, &merged)?
        } else {
            admitted(st, kind, &merged)?
        };
        w.track(kind, status, Some(&current), sent, &mut next);
        Ok::<_, ApiError>(Some(next))
    })
    .await?;
    match written {
        Some(v) => Ok(ok_json(StatusCode::OK, &v)),
        None => Err(t.not_found()),
    }
}

/// A strategic merge patch of a built-in kind is a JSON merge patch as
/// long as it holds no lists (merged by key there) and no `$` directives:
/// what `kubectl apply` sends for a Secret's data. Anything else is refused.
fn plain_strategic(v: &Value) -> Result<(), ApiError> {
    let refuse = |what: &str| {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!(
                "this strategic merge patch holds {what}: only map merges are supported; use application/merge-patch+json"
            ),
        ))
    };
    match v {
        Value::Array(_) => refuse("a list"),
        Value::Object(m) => {
            if let Some(k) = m.keys().find(|k| k.starts_with('$')) {
                return refuse(&format!("the directive {k:?}"));
            }
            m.values().try_for_each(plain_strategic)
        }
        _ => Ok(()),
    }
}
