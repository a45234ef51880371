//! The `/scale` subresource, as kube-apiserver serves it for a CRD that
//! declares one (MachineSet: `specReplicasPath: .spec.replicas`,
//! `statusReplicasPath: .status.replicas`, `labelSelectorPath:
//! .status.selector`): GET answers an `autoscaling/v1` `Scale`; PUT takes a
//! `Scale` and writes its `spec.replicas` into the object; PATCH applies a
//! JSON merge patch to the `Scale` first. The Scale's `resourceVersion` is
//! the object's, and one given in the body is a precondition (409 when the
//! object moved on). Nothing but `spec.replicas` is ever written here.

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::handlers::{Res, checked, namespaced_kind, ok_json, parse_body};
use super::patch::merge_patch_type;
use super::write_call::WriteCall;
use super::writes::Writer;
use super::{ApiError, ApiState, Group};
use crate::api::Kind;
use crate::store::{StoreError, modify, resource_version_of};

/// The `apiVersion` of the Scale objects served here.
pub const SCALE_API_VERSION: &str = "autoscaling/v1";

fn scale_kind(group: Group, plural: &str) -> Result<Kind, ApiError> {
    let kind = namespaced_kind(group, plural)?;
    if kind.has_scale() {
        Ok(kind)
    } else {
        Err(ApiError::not_found(format!(
            "{plural} have no scale subresource"
        )))
    }
}

/// The Scale view of a stored object.
pub fn scale_of(obj: &Value) -> Value {
    let meta = &obj["metadata"];
    let mut m = serde_json::Map::new();
    for f in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(f).filter(|v| !v.is_null()) {
            m.insert(f.into(), v.clone());
        }
    }
    let int = |p: &str| obj.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    // As autoscaling/v1 serializes them: `spec.replicas` and
    // `status.selector` are `omitempty` (0 and "" are left out),
    // `status.replicas` is always there.
    let mut spec = json!({});
    if int("/spec/replicas") != 0 {
        spec["replicas"] = int("/spec/replicas").into();
    }
    let mut status = json!({"replicas": int("/status/replicas")});
    if let Some(sel) = obj
        .pointer("/status/selector")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        status["selector"] = sel.into();
    }
    json!({
        "kind": "Scale",
        "apiVersion": SCALE_API_VERSION,
        "metadata": m,
        "spec": spec,
        "status": status,
    })
}

/// Check a Scale body against the URL; its `spec.replicas`.
fn replicas_of(scale: &Value, kind: Kind, name: &str) -> Result<i64, ApiError> {
    if let Some(k) = scale.get("kind").and_then(Value::as_str)
        && k != "Scale"
    {
        return Err(ApiError::bad_request(format!(
            "body has kind {k:?} but the scale subresource takes a Scale"
        )));
    }
    if let Some(a) = scale.get("apiVersion").and_then(Value::as_str)
        && a != SCALE_API_VERSION
    {
        return Err(ApiError::bad_request(format!(
            "body has apiVersion {a:?}, expected {SCALE_API_VERSION:?}"
        )));
    }
    if let Some(n) = scale.pointer("/metadata/name").and_then(Value::as_str)
        && n != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n:?}) does not match the name of the URL ({name:?})"
        )));
    }
    let invalid = |msg: String| {
        ApiError::invalid(
            kind,
            name,
            &crate::api::ValidationErrors::single("spec.replicas", msg),
        )
    };
    match scale.pointer("/spec/replicas") {
        // Kubernetes reads a missing replicas as 0.
        None | Some(Value::Null) => Ok(0),
        Some(v) => match v.as_i64() {
            Some(n) if n >= 0 && i32::try_from(n).is_ok() => Ok(n),
            Some(n) => Err(invalid(format!("must be 0 or more, got {n}"))),
            None => Err(invalid(format!("must be an integer, got {v}"))),
        },
    }
}

pub async fn get_scale(
    State(st): State<ApiState>,
    Extension(group): Extension<Group>,
    Path((ns, plural, name)): Path<(String, String, String)>,
) -> Res {
    let kind = scale_kind(group, &plural)?;
    let v = st.store.get(kind, &ns, &name).await?;
    Ok(ok_json(StatusCode::OK, &scale_of(&v)))
}

pub async fn replace_scale(
    Extension(group): Extension<Group>,
    Path((ns, plural, name)): Path<(String, String, String)>,
    c: WriteCall,
) -> Res {
    let kind = scale_kind(group, &plural)?;
    let scale = parse_body(&c.body)?;
    write_scale(&c.st, kind, &ns, &name, &c.w, |_| Ok(scale.clone())).await
}

pub async fn patch_scale(
    Extension(group): Extension<Group>,
    Path((ns, plural, name)): Path<(String, String, String)>,
    c: WriteCall,
) -> Res {
    let kind = scale_kind(group, &plural)?;
    merge_patch_type(&c.headers)?;
    let patch = parse_body(&c.body)?;
    write_scale(&c.st, kind, &ns, &name, &c.w, |current| {
        let mut s = scale_of(current);
        json_patch::merge(&mut s, &patch);
        // A patch that names no resourceVersion is not a precondition.
        if resource_version_of(&patch).is_none()
            && let Some(m) = s.get_mut("metadata").and_then(Value::as_object_mut)
        {
            m.remove("resourceVersion");
        }
        Ok(s)
    })
    .await
}

/// Turn the current object into the Scale asked for (`want`), write its
/// replicas back, answer the Scale of what was written.
async fn write_scale(
    st: &ApiState,
    kind: Kind,
    ns: &str,
    name: &str,
    w: &Writer,
    want: impl Fn(&Value) -> Result<Value, ApiError>,
) -> Res {
    let mut precondition = None;
    let written = modify::modify(
        &*st.store,
        kind,
        ns,
        name,
        modify::Target::Object,
        modify::ATTEMPTS,
        |current| {
            let Some(current) = current else {
                return Ok(None);
            };
            let mut obj = current.clone();
            let scale = want(&obj)?;
            let replicas = replicas_of(&scale, kind, name)?;
            if let Some(rv) = resource_version_of(&scale) {
                let have = resource_version_of(&obj).unwrap_or_default();
                if rv != have {
                    precondition = Some((rv.to_string(), have.to_string()));
                    return Ok(None);
                }
            }
            let unchanged = obj.pointer("/spec/replicas").and_then(Value::as_i64) == Some(replicas);
            if unchanged {
                return Ok(None);
            }
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("replicas".into(), replicas.into());
            }
            let mut next = checked(kind, &obj)?;
            w.track(kind, false, Some(&current), None, &mut next);
            Ok::<_, ApiError>(Some(next))
        },
    )
    .await?;
    if let Some((expected, current)) = precondition {
        return Err(StoreError::Conflict {
            kind,
            namespace: ns.to_string(),
            name: name.to_string(),
            expected,
            current,
        }
        .into());
    }
    let v = match written {
        Some(v) => v,
        // Declined: the replicas were already so; answer the current Scale.
        None => st.store.get(kind, ns, name).await?,
    };
    Ok(ok_json(StatusCode::OK, &scale_of(&v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_view_of_a_set() {
        let set = json!({"kind": "MachineSet", "metadata": {"name": "w", "namespace": "default",
            "uid": "u1", "resourceVersion": "7", "labels": {"a": "b"}},
            "spec": {"replicas": 3}, "status": {"replicas": 2, "selector": "role=worker"}});
        let s = scale_of(&set);
        assert_eq!(
            s,
            json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": "w", "namespace": "default", "uid": "u1", "resourceVersion": "7"},
                "spec": {"replicas": 3}, "status": {"replicas": 2, "selector": "role=worker"}})
        );
        // No status yet: zero replicas and no selector; zero wanted is no
        // `spec.replicas`, as kube-apiserver answers (both `omitempty`).
        let fresh = json!({"metadata": {"name": "w"}, "spec": {"replicas": 0}});
        assert_eq!(scale_of(&fresh)["status"], json!({"replicas": 0}));
        assert_eq!(scale_of(&fresh)["spec"], json!({}));
    }

    const K: Kind = Kind::MachineSet;

    #[test]
    fn scale_bodies_are_checked() {
        let ok = json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": "w"}, "spec": {"replicas": 4}});
        assert_eq!(replicas_of(&ok, K, "w").unwrap(), 4);
        assert_eq!(replicas_of(&json!({"spec": {}}), K, "w").unwrap(), 0);
        let wrong_kind = json!({"kind": "MachineSet", "spec": {"replicas": 4}});
        assert_eq!(replicas_of(&wrong_kind, K, "w").unwrap_err().code, 400);
        let wrong_name = json!({"metadata": {"name": "x"}, "spec": {"replicas": 4}});
        assert_eq!(replicas_of(&wrong_name, K, "w").unwrap_err().code, 400);
        let negative = json!({"spec": {"replicas": -1}});
        let e = replicas_of(&negative, K, "w").unwrap_err();
        assert_eq!((e.code.as_u16(), e.reason), (422, "Invalid"));
        assert_eq!(
            replicas_of(&json!({"spec": {"replicas": "3"}}), K, "w")
                .unwrap_err()
                .code,
            422
        );
    }
}
