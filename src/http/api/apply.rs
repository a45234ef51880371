//! Server-side apply: `PATCH` with `Content-Type:
//! application/apply-patch+yaml`, `?fieldManager=` (required) and
//! `?force=true`, on an object (created when missing, as kube-apiserver
//! does) or on its `/status`. The body is the manager's configuration in
//! YAML or JSON, naming its apiVersion and kind. Ownership and conflicts
//! are decided in [`super::ssa`]; this file reads and writes the store.

use axum::body::Bytes;
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::handlers::{Res, admitted, checked, conform, ok_json};
use super::writes::{Target, Writer};
use super::{ApiError, ApiState, namespaces, ssa};
use crate::store::{StoreError, modify, resource_version_of};

/// kube-apiserver's 409 for an apply that would change other managers'
/// fields: one cause per field, naming its manager.
fn conflicts(c: &[ssa::Conflict]) -> ApiError {
    let causes: Vec<Value> = c
        .iter()
        .map(|c| {
            json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with {}", c.manager),
                "field": ssa::paths::display(&c.field),
            })
        })
        .collect();
    let mut e = ApiError::new(StatusCode::CONFLICT, "Conflict", ssa::conflict_message(c));
    e.details = Some(json!({"causes": causes}));
    e
}

/// The applied configuration: a YAML (or JSON) map naming apiVersion and
/// kind.
fn config(body: &Bytes) -> Result<Value, ApiError> {
    let v: Value = serde_yaml::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the apply patch is not YAML or JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request("the apply patch must be a map"));
    }
    for f in ["apiVersion", "kind"] {
        if v.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(ApiError::bad_request(format!(
                "the apply patch must name its {f}"
            )));
        }
    }
    Ok(v)
}

pub(super) async fn apply(st: &ApiState, t: Target<'_>, body: &Bytes, w: &Writer) -> Res {
    let (kind, ns, name) = (t.kind, t.ns, t.name);
    if !w.named {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    }
    let mut cfg = config(body)?;
    conform(kind, ns, Some(name), &mut cfg)?;
    let precondition = resource_version_of(&cfg).map(String::from);
    // A missing object is created in its namespace, which must exist.
    let _in_ns = match kind.namespaced() && !t.status {
        true => Some(namespaces::require(st, ns).await?),
        false => None,
    };
    let target = if t.status {
        modify::Target::Status
    } else {
        modify::Target::ObjectOrCreate
    };
    let attempts = if precondition.is_some() {
        1
    } else {
        modify::ATTEMPTS
    };
    let write = w.write(kind, t.status);
    let (mut created, mut same) = (false, None);
    let written = modify::modify(&*st.store, kind, ns, name, target, attempts, |current| {
        if let Some(want) = &precondition {
            let have = current.as_ref().and_then(resource_version_of);
            if have != Some(want.as_str()) {
                return Err(match current {
                    None => t.not_found(),
                    Some(_) => ApiError::from(StoreError::Conflict {
                        kind,
                        namespace: ns.to_string(),
                        name: name.to_string(),
                        expected: want.clone(),
                        current: have.unwrap_or_default().to_string(),
                    }),
                });
            }
        }
        let merged =
            ssa::apply(current.as_ref(), &cfg, &write, w.force).map_err(|c| conflicts(&c))?;
        let next = if t.status {
            checked(kind, &merged)?
        } else {
            admitted(st, kind, &merged)?
        };
        if let Some(cur) = &current
            && ssa::same_but_times(&next, cur)
        {
            same = Some(cur.clone());
            return Ok(None);
        }
        created = current.is_none();
        Ok(Some(next))
    })
    .await?;
    match (written, same) {
        (Some(v), _) if created => Ok(ok_json(StatusCode::CREATED, &v)),
        (Some(v), _) | (None, Some(v)) => Ok(ok_json(StatusCode::OK, &v)),
        (None, None) => Err(t.not_found()),
    }
}
