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
use super::write_call::WriteCall;
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

/// The query of a write, and whether it asks for a server-side dry run
/// (`dryRun=All`, the only value Kubernetes defines).
pub(super) fn write_query(
    q: Result<Query<WriteQuery>, QueryRejection>,
) -> Result<(WriteQuery, bool), ApiError> {
    let q = q
        .map(|Query(q)| q)
        .map_err(|e| ApiError::bad_request(e.body_text()))?;
    let dry_run = dry_run_value(q.dry_run.iter().map(String::as_str))?;
    Ok((q, dry_run))
}

/// `dryRun` values: none, or `All`.
fn dry_run_value<'a>(mut values: impl Iterator<Item = &'a str>) -> Result<bool, ApiError> {
    values.try_fold(false, |dry, v| match v {
        "" => Ok(dry),
        "All" => Ok(true),
        other => Err(ApiError::bad_request(format!(
            "Invalid dry run value: {other:?}: supported values: \"All\""
        ))),
    })
}

/// The state a write runs on: a dry run's writes go to a store that
/// answers what would be written and writes nothing.
fn on_store(st: ApiState, dry_run: bool) -> ApiState {
    if !dry_run {
        return st;
    }
    ApiState {
        store: std::sync::Arc::new(crate::store::dry_run::DryRunStore::new(st.store.clone())),
        ..st
    }
}

/// Who makes a write (for `metadata.managedFields`), and when.
pub(super) struct Writer {
    pub(super) manager: String,
    /// `fieldManager` was given (apply requires it).
    pub(super) named: bool,
    pub(super) force: bool,
    /// A server-side dry run: see [`Writer::state`].
    dry_run: bool,
    now: String,
}

impl Writer {
    pub(super) fn new(
        q: Result<Query<WriteQuery>, QueryRejection>,
        headers: &HeaderMap,
    ) -> Result<Writer, ApiError> {
        let (q, dry_run) = write_query(q)?;
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
            dry_run,
            now: crate::store::semantics::now_rfc3339(),
        })
    }

    /// The state this write runs on (the dry-run store for a dry run).
    pub(super) fn state(&self, st: ApiState) -> ApiState {
        on_store(st, self.dry_run)
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
    let st = w.state(st);
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
    let st = w.state(st);
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
    Extension(group): Extension<Group>,
    Path((ns, plural, name)): Path<(String, String, String)>,
    c: WriteCall,
) -> Res {
    let kind = namespaced_kind(group, &plural)?;
    replace_object(&c, Target::new(kind, &ns, &name, false)).await
}

/// PUT `/api/v1/namespaces/{name}`.
pub async fn replace_namespace(Path(name): Path<String>, c: WriteCall) -> Res {
    replace_object(&c, Target::namespace(&name)).await
}

pub async fn replace_status(
    Extension(group): Extension<Group>,
    Path((ns, plural, name)): Path<(String, String, String)>,
    c: WriteCall,
) -> Res {
    let kind = status_kind(group, &plural)?;
    replace_object(&c, Target::new(kind, &ns, &name, true)).await
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
async fn replace_object(c: &WriteCall, t: Target<'_>) -> Res {
    let (st, w, headers, body) = (&c.st, &c.w, &c.headers, &c.body);
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
/// kubectl puts them): whether it is a dry run.
fn delete_options(
    q: Result<Query<WriteQuery>, QueryRejection>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<bool, ApiError> {
    let (_, in_query) = write_query(q)?;
    let json = super::handlers::content_type(headers).starts_with("application/json");
    if body.is_empty() || !json {
        return Ok(in_query);
    }
    let options: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("DeleteOptions are not valid JSON: {e}")))?;
    let in_body = match options.get("dryRun") {
        None | Some(Value::Null) => false,
        Some(Value::Array(values)) => {
            dry_run_value(values.iter().map(|v| v.as_str().unwrap_or("?")))?
        }
        Some(_) => return Err(ApiError::bad_request("DeleteOptions.dryRun must be a list")),
    };
    Ok(in_query || in_body)
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
    let st = on_store(st, delete_options(q, &headers, &body)?);
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
    // Deleting a namespace deletes what is in it first, and closes it to
    // creates meanwhile: not something to rehearse.
    if delete_options(q, &headers, &body)? {
        return Err(ApiError::bad_request(
            "dryRun of a Namespace deletion is not supported by this server; nothing was changed",
        ));
    }
    namespaces::delete(&st, &name).await
}

/// DELETE `/namespaces/{ns}/{plural}` (`deletecollection`): delete every
/// object of the namespace the label and field selectors match, as one
/// delete each (finalizers hold an object as for a single delete), and
/// answer the list of what was deleted or marked.
pub async fn delete_collection(
    State(st): State<ApiState>,
    Extension(group): Extension<Group>,
    Path((ns, plural)): Path<(String, String)>,
    list_q: Result<Query<super::handlers::ListQuery>, QueryRejection>,
    q: Result<Query<WriteQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Bytes,
) -> Res {
    check_ns(&ns)?;
    let kind = namespaced_kind(group, &plural)?;
    let st = on_store(st, delete_options(q, &headers, &body)?);
    let lq = list_q
        .map(|Query(q)| q)
        .map_err(|e| ApiError::bad_request(e.body_text()))?;
    let selector = match lq.label_selector.as_deref() {
        Some(s) => {
            crate::store::Selector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?
        }
        None => crate::store::Selector::default(),
    };
    let fields = match lq.field_selector.as_deref() {
        Some(s) => super::fields::FieldSelector::parse(kind, s)
            .map_err(|e| ApiError::bad_request(e.to_string()))?,
        None => super::fields::FieldSelector::default(),
    };
    let opts = crate::store::ListOptions {
        namespace: Some(ns.clone()),
        selector,
    };
    let list = st.store.list(kind, &opts).await?;
    let mut deleted = Vec::new();
    for obj in list.items.iter().filter(|o| fields.matches(kind, o)) {
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match st.store.delete(kind, &ns, name).await {
            Ok(Deleted::Gone(v) | Deleted::Marked(v)) => deleted.push(v),
            // Deleted meanwhile by someone else: nothing left to do.
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    let body = serde_json::json!({
        "apiVersion": kind.api_version(),
        "kind": format!("{kind}List"),
        "metadata": {"resourceVersion": list.resource_version},
        "items": deleted,
    });
    Ok(ok_json(StatusCode::OK, &body))
}
