//! The writes of whole objects: create (POST), replace (PUT, also of
//! `/status`) and delete, and who makes them ([`Writer`], recorded in
//! `metadata.managedFields`). PATCH is in `patch.rs` and `apply.rs`.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use serde::Deserialize;
use serde_json::Value;

use super::handlers::{
    Res, admitted, body_object, check_ns, checked, conform, kind_of, namespaced_kind, ok_json,
    status_kind,
};
use super::{ApiError, ApiState, Group, namespaces, ssa};
use crate::api::Kind;
use crate::store::{Deleted, StoreError, modify, resource_version_of};

/// Query parameters of writes (`fieldValidation` is always `Strict`
/// here, so it is not read).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteQuery {
    pub field_manager: Option<String>,
    pub force: Option<String>,
    pub dry_run: Option<String>,
}

/// The query of a write, refused when it asks for a dry run: better
/// refused than done, since a client asking for a dry run does not expect
/// the change to be made.
pub(super) fn no_dry_run(
    q: Result<Query<WriteQuery>, QueryRejection>,
) -> Result<WriteQuery, ApiError> {
    let q = q
        .map(|Query(q)| q)
        .map_err(|e| ApiError::bad_request(e.body_text()))?;
    if q.dry_run.as_deref().is_some_and(|d| !d.is_empty()) {
        return Err(ApiError::bad_request(DRY_RUN_REFUSED));
    }
    Ok(q)
}

const DRY_RUN_REFUSED: &str = "dryRun is not supported by this server; nothing was changed";

/// Who makes a write (for `metadata.managedFields`), and when.
pub(super) struct Writer {
    pub(super) manager: String,
    /// `fieldManager` was given (apply requires it).
    pub(super) named: bool,
    pub(super) force: bool,
    now: String,
}

impl Writer {
    pub(super) fn new(
        q: Result<Query<WriteQuery>, QueryRejection>,
        headers: &HeaderMap,
    ) -> Result<Writer, ApiError> {
        let q = no_dry_run(q)?;
        let user_agent = headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok());
        let force = match q.force.as_deref() {
            None => false,
            Some("true" | "True" | "TRUE" | "t" | "T" | "1") => true,
            Some("false" | "False" | "FALSE" | "f" | "F" | "0") => false,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "force: {other:?} is not a boolean"
                )));
            }
        };
        Ok(Writer {
            manager: ssa::manager_of(q.field_manager.as_deref(), user_agent),
            named: q.field_manager.is_some_and(|m| !m.is_empty()),
            force,
            now: crate::store::semantics::now_rfc3339(),
        })
    }

    /// The write as [`ssa`] sees it, of `kind`'s object or its status.
    pub(super) fn write(&self, kind: Kind, status: bool) -> ssa::Write<'_> {
        ssa::Write {
            manager: &self.manager,
            api_version: kind.api_version(),
            scope: if status {
                ssa::Scope::Status
            } else {
                ssa::Scope::Object {
                    status_apart: kind.has_status(),
                }
            },
            now: &self.now,
        }
    }

    /// Record this write's changes from `old` (none: a create) to `new`,
    /// onto the record the client `sent` ([`ssa::sent`], not for status).
    pub(super) fn track(
        &self,
        kind: Kind,
        status: bool,
        old: Option<&Value>,
        sent: Option<Vec<ssa::Entry>>,
        new: &mut Value,
    ) {
        let sent = sent.filter(|_| !status);
        ssa::track_update(old, sent, new, &self.write(kind, status));
    }
}

pub async fn create(
    State(st): State<ApiState>,
    Extension(group): Extension<Group>,
    Path((ns, plural)): Path<(String, String)>,
    headers: HeaderMap,
    q: Result<Query<WriteQuery>, QueryRejection>,
    body: Bytes,
) -> Res {
    check_ns(&ns)?;
    let kind = namespaced_kind(group, &plural)?;
    let w = Writer::new(q, &headers)?;
    create_object(&st, kind, &ns, &headers, &body, &w).await
}

/// POST `/{plural}`: creates cluster-scoped objects (Namespaces); a
/// namespaced kind is created under `/namespaces/{ns}/` only.
pub async fn create_cluster(
    State(st): State<ApiState>,
    Extension(group): Extension<Group>,
    Path(plural): Path<String>,
    headers: HeaderMap,
    q: Result<Query<WriteQuery>, QueryRejection>,
    body: Bytes,
) -> Res {
    let kind = kind_of(group, &plural)?;
    if kind.namespaced() {
        return Err(method_not_allowed());
    }
    let w = Writer::new(q, &headers)?;
    create_object(&st, kind, "", &headers, &body, &w).await
}

pub(super) fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
    )
}

async fn create_object(
    st: &ApiState,
    kind: Kind,
    ns: &str,
    headers: &HeaderMap,
    body: &Bytes,
    w: &Writer,
) -> Res {
    let mut v = body_object(kind, headers, body)?;
    let sent = ssa::sent(&v);
    conform(kind, ns, None, &mut v)?;
    if let Some(obj) = v.as_object_mut() {
        // Status is written through /status only, as in Kubernetes.
        if kind.has_status() {
            obj.remove("status");
        }
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            for f in [
                "resourceVersion",
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
            ] {
                m.remove(f);
            }
        }
    }
    // The namespace first, as kube-apiserver's admission does.
    let _in_ns = match kind.namespaced() {
        true => Some(namespaces::require(st, ns).await?),
        false => None,
    };
    let mut v = admitted(st, kind, &v)?;
    w.track(kind, false, None, sent, &mut v);
    let created = st.store.create(kind, v).await?;
    Ok(ok_json(StatusCode::CREATED, &created))
}

pub async fn replace(
    State(st): State<ApiState>,
    Extension(group): Extension<Group>,
    Path((ns, plural, name)): Path<(String, String, String)>,
    headers: HeaderMap,
    q: Result<Query<WriteQuery>, QueryRejection>,
    body: Bytes,
) -> Res {
    let kind = namespaced_kind(group, &plural)?;
    let w = Writer::new(q, &headers)?;
    let target = Target::new(kind, &ns, &name, false);
    replace_object(&st, target, &headers, &body, &w).await
}

/// PUT `/api/v1/namespaces/{name}`.
pub async fn replace_namespace(
    State(st): State<ApiState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    q: Result<Query<WriteQuery>, QueryRejection>,
    body: Bytes,
) -> Res {
    let w = Writer::new(q, &headers)?;
    let target = Target::namespace(&name);
    replace_object(&st, target, &headers, &body, &w).await
}

pub async fn replace_status(
    State(st): State<ApiState>,
    Extension(group): Extension<Group>,
    Path((ns, plural, name)): Path<(String, String, String)>,
    headers: HeaderMap,
    q: Result<Query<WriteQuery>, QueryRejection>,
    body: Bytes,
) -> Res {
    let kind = status_kind(group, &plural)?;
    let w = Writer::new(q, &headers)?;
    let target = Target::new(kind, &ns, &name, true);
    replace_object(&st, target, &headers, &body, &w).await
}

/// The object (or its status) a write is for.
#[derive(Clone, Copy, Debug)]
pub(super) struct Target<'a> {
    pub(super) kind: Kind,
    pub(super) ns: &'a str,
    pub(super) name: &'a str,
    /// The `/status` subresource.
    pub(super) status: bool,
}

impl<'a> Target<'a> {
    /// The object `ns/name` of `kind`, or its `/status` when `status`.
    pub(super) fn new(kind: Kind, ns: &'a str, name: &'a str, status: bool) -> Self {
        Target {
            kind,
            ns,
            name,
            status,
        }
    }

    /// The cluster-scoped Namespace `name`.
    pub(super) fn namespace(name: &'a str) -> Self {
        Target::new(Kind::Namespace, "", name, false)
    }

    pub(super) fn not_found(&self) -> ApiError {
        StoreError::NotFound {
            kind: self.kind,
            namespace: self.ns.to_string(),
            name: self.name.to_string(),
        }
        .into()
    }
}

/// PUT of an object (or of its status): a `metadata.resourceVersion` in
/// the body is a precondition; without one the replace is unconditional
/// (but a Lease's, see [`Kind::conditional_put_creates`]).
async fn replace_object(
    st: &ApiState,
    t: Target<'_>,
    headers: &HeaderMap,
    body: &Bytes,
    w: &Writer,
) -> Res {
    let (kind, ns, name) = (t.kind, t.ns, t.name);
    let mut v = body_object(kind, headers, body)?;
    let sent = ssa::sent(&v);
    conform(kind, ns, Some(name), &mut v)?;
    let v = if t.status {
        checked(kind, &v)?
    } else {
        admitted(st, kind, &v)?
    };
    let precondition = resource_version_of(&v).is_some();
    if !t.status && kind.conditional_put_creates() && !precondition {
        // A Lease: a PUT without a resourceVersion creates it, and may not
        // overwrite one that exists (kube-apiserver's lease strategy).
        let _in_ns = namespaces::require(st, ns).await?;
        let mut v = v;
        w.track(kind, false, None, sent, &mut v);
        return match st.store.create(kind, v).await {
            Ok(created) => Ok(ok_json(StatusCode::CREATED, &created)),
            Err(StoreError::AlreadyExists { .. }) => Err(ApiError::invalid(
                kind,
                name,
                &crate::api::ValidationErrors::single(
                    "metadata.resourceVersion",
                    "Invalid value: 0x0: must be specified for an update",
                ),
            )),
            Err(e) => Err(e.into()),
        };
    }
    let target = if t.status {
        modify::Target::Status
    } else {
        modify::Target::Object
    };
    // A client-given resourceVersion is a precondition: one attempt only.
    let attempts = if precondition { 1 } else { modify::ATTEMPTS };
    let written = modify::modify(&*st.store, kind, ns, name, target, attempts, |current| {
        let Some(current) = current else {
            return Ok::<_, ApiError>(None);
        };
        let mut next = v.clone();
        if !precondition
            && let (Some(m), Some(rv)) = (
                next.get_mut("metadata").and_then(Value::as_object_mut),
                current.pointer("/metadata/resourceVersion").cloned(),
            )
        {
            // Unconditional: replace whatever is current.
            m.insert("resourceVersion".into(), rv);
        }
        w.track(kind, t.status, Some(&current), sent.clone(), &mut next);
        Ok(Some(next))
    })
    .await?;
    match written {
        Some(v) => Ok(ok_json(StatusCode::OK, &v)),
        None => Err(t.not_found()),
    }
}

/// A delete's options, in the query or as a `DeleteOptions` body (where
/// kubectl puts them): a dry run is refused as for every write.
fn delete_options(
    q: Result<Query<WriteQuery>, QueryRejection>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<(), ApiError> {
    no_dry_run(q)?;
    let json = super::handlers::content_type(headers).starts_with("application/json");
    if body.is_empty() || !json {
        return Ok(());
    }
    let options: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("DeleteOptions are not valid JSON: {e}")))?;
    let dry_run = options
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|d| !d.is_empty());
    if dry_run {
        return Err(ApiError::bad_request(DRY_RUN_REFUSED));
    }
    Ok(())
}

pub async fn delete(
    State(st): State<ApiState>,
    Extension(group): Extension<Group>,
    Path((ns, plural, name)): Path<(String, String, String)>,
    q: Result<Query<WriteQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Bytes,
) -> Res {
    let kind = namespaced_kind(group, &plural)?;
    delete_options(q, &headers, &body)?;
    match st.store.delete(kind, &ns, &name).await? {
        Deleted::Gone(v) => Ok(ok_json(StatusCode::OK, &v)),
        // Finalizers remain: the object is marked and goes later.
        Deleted::Marked(v) => Ok(ok_json(StatusCode::ACCEPTED, &v)),
    }
}

/// DELETE `/api/v1/namespaces/{name}`: see [`namespaces::delete`].
pub async fn delete_namespace(
    State(st): State<ApiState>,
    Path(name): Path<String>,
    q: Result<Query<WriteQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Bytes,
) -> Res {
    delete_options(q, &headers, &body)?;
    namespaces::delete(&st, &name).await
}
