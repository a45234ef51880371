//! Request handlers: decode the path and body, validate, call the store,
//! answer with the object or a `Status`. Every write is validated with
//! [`crate::api::validate::validate`] and stored in canonical form.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::fields::FieldSelector;
use super::normalize::normalize;
use super::protobuf::{self, ProtobufError};
use super::table::{self, IncludeObject};
use super::watch::Shape;
use super::{ApiError, ApiState, Group, namespaces, ssa};
use crate::api::Kind;
use crate::api::validate::validate;
use crate::store::{Deleted, ListOptions, Selector, StoreError, modify, resource_version_of};

/// Query parameters of lists and watches.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    pub label_selector: Option<String>,
    pub watch: Option<String>,
    pub resource_version: Option<String>,
    pub timeout_seconds: Option<u64>,
    pub field_selector: Option<String>,
    /// For Tables: `None`, `Metadata` (the default) or `Object`.
    pub include_object: Option<String>,
}

/// Query parameters of writes (`fieldValidation` is always `Strict`
/// here, so it is not read).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteQuery {
    pub field_manager: Option<String>,
    pub force: Option<String>,
    pub dry_run: Option<String>,
}

pub(super) type Res = Result<Response, ApiError>;

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
        let q = q
            .map(|Query(q)| q)
            .map_err(|e| ApiError::bad_request(e.body_text()))?;
        if q.dry_run.as_deref().is_some_and(|d| !d.is_empty()) {
            // Better refused than done: a client asking for a dry run
            // does not expect the change to be made.
            return Err(ApiError::bad_request(
                "dryRun is not supported by this server; nothing was changed",
            ));
        }
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

    /// Record this write's changes from `old` (none: a create) to `new`.
    pub(super) fn track(&self, kind: Kind, status: bool, old: Option<&Value>, new: &mut Value) {
        ssa::track_update(old, new, &self.write(kind, status));
    }
}

fn query(q: Result<Query<ListQuery>, QueryRejection>) -> Result<ListQuery, ApiError> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::bad_request(e.body_text()))
}

pub(super) fn kind_of(group: Group, plural: &str) -> Result<Kind, ApiError> {
    group
        .kind(plural)
        .ok_or_else(|| ApiError::not_found(format!("the server does not serve {plural:?}")))
}

/// A kind whose objects live in namespaces (the `/namespaces/{ns}/` routes).
pub(super) fn namespaced_kind(group: Group, plural: &str) -> Result<Kind, ApiError> {
    let kind = kind_of(group, plural)?;
    if kind.namespaced() {
        Ok(kind)
    } else {
        Err(ApiError::not_found(
            "the server could not find the requested resource",
        ))
    }
}

fn check_ns(ns: &str) -> Result<(), ApiError> {
    if crate::api::validate::is_dns_label(ns) {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!("invalid namespace {ns:?}")))
    }
}

pub(super) fn ok_json(code: StatusCode, v: &Value) -> Response {
    (code, axum::Json(v)).into_response()
}

pub async fn list_namespaced(
    State(st): State<ApiState>,
    Extension(group): Extension<Group>,
    Path((ns, plural)): Path<(String, String)>,
    headers: HeaderMap,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Res {
    check_ns(&ns)?;
    let q = query(q)?;
    list_or_watch(st, namespaced_kind(group, &plural)?, Some(ns), q, &headers).await
}

pub async fn list_all(
    State(st): State<ApiState>,
    Extension(group): Extension<Group>,
    Path(plural): Path<String>,
    headers: HeaderMap,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Res {
    let q = query(q)?;
    list_or_watch(st, kind_of(group, &plural)?, None, q, &headers).await
}

/// How the client asked to see objects: a field selector, and a Table
/// (with what each row carries) when it accepts one.
fn shape(kind: Kind, q: &ListQuery, headers: &HeaderMap) -> Result<Shape, ApiError> {
    let fields = match q.field_selector.as_deref() {
        Some(s) => FieldSelector::parse(kind, s).map_err(ApiError::bad_request)?,
        None => FieldSelector::default(),
    };
    let table = table::wanted(headers).then(|| IncludeObject::parse(q.include_object.as_deref()));
    Ok(Shape { fields, table })
}

async fn list_or_watch(
    st: ApiState,
    kind: Kind,
    ns: Option<String>,
    q: ListQuery,
    headers: &HeaderMap,
) -> Res {
    let shape = shape(kind, &q, headers)?;
    let selector = match q.label_selector.as_deref() {
        Some(s) => Selector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?,
        None => Selector::default(),
    };
    let opts = ListOptions {
        namespace: ns,
        selector,
    };
    if matches!(q.watch.as_deref(), Some("true" | "1")) {
        // "0" asks for "any version" in Kubernetes: start from now.
        let from = match q.resource_version {
            None => None,
            Some(s) if s.is_empty() || s == "0" => None,
            Some(s) => Some(s),
        };
        return super::watch::watch(st, kind, opts, from, q.timeout_seconds, shape).await;
    }
    let mut list = st.store.list(kind, &opts).await?;
    if !shape.fields.is_empty() {
        list.items.retain(|o| shape.fields.matches(kind, o));
    }
    if let Some(include) = shape.table {
        let t = table::table(kind, &list.items, Some(&list.resource_version), include);
        return Ok(ok_json(StatusCode::OK, &t));
    }
    let body = json!({
        "apiVersion": kind.api_version(),
        "kind": format!("{kind}List"),
        "metadata": {"resourceVersion": list.resource_version},
        "items": list.items,
    });
    Ok(ok_json(StatusCode::OK, &body))
}

pub async fn get_one(
    State(st): State<ApiState>,
    Extension(group): Extension<Group>,
    Path((ns, plural, name)): Path<(String, String, String)>,
    headers: HeaderMap,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Res {
    let kind = namespaced_kind(group, &plural)?;
    read(&st, kind, &ns, &name, &headers, query(q)?).await
}

/// GET `/api/v1/namespaces/{name}`.
pub async fn get_namespace(
    State(st): State<ApiState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Res {
    read(&st, Kind::Namespace, "", &name, &headers, query(q)?).await
}

async fn read(
    st: &ApiState,
    kind: Kind,
    ns: &str,
    name: &str,
    headers: &HeaderMap,
    q: ListQuery,
) -> Res {
    let v = st.store.get(kind, ns, name).await?;
    if table::wanted(headers) {
        let include = IncludeObject::parse(q.include_object.as_deref());
        let rv = v
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str);
        return Ok(ok_json(
            StatusCode::OK,
            &table::table(kind, std::slice::from_ref(&v), rv, include),
        ));
    }
    Ok(ok_json(StatusCode::OK, &v))
}

pub async fn get_status(
    State(st): State<ApiState>,
    Extension(group): Extension<Group>,
    Path((ns, plural, name)): Path<(String, String, String)>,
) -> Res {
    let kind = status_kind(group, &plural)?;
    read(
        &st,
        kind,
        &ns,
        &name,
        &HeaderMap::new(),
        ListQuery::default(),
    )
    .await
}

pub(super) fn status_kind(group: Group, plural: &str) -> Result<Kind, ApiError> {
    let kind = namespaced_kind(group, plural)?;
    if kind.has_status() {
        Ok(kind)
    } else {
        Err(ApiError::not_found(format!(
            "{plural} have no status subresource"
        )))
    }
}

pub(super) fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// The object a create or replace sends: JSON, or for Namespaces and
/// Secrets the protobuf kubectl's typed clients send (`kubectl create
/// namespace`, `kubectl create secret`; client-go does not fall back from
/// protobuf). Other encodings get a clear 415.
fn body_object(kind: Kind, headers: &HeaderMap, body: &Bytes) -> Result<Value, ApiError> {
    let ct = content_type(headers);
    let unsupported = |detail: String| {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            detail,
        )
    };
    if ct.starts_with("application/vnd.kubernetes.protobuf") {
        return protobuf::decode(kind, body).map_err(|e| match e {
            ProtobufError::Unsupported(_) => unsupported(format!(
                "the server accepts JSON request bodies only (and protobuf for Namespaces and Secrets), got {ct:?}"
            )),
            ProtobufError::Malformed(_) => ApiError::bad_request(e.to_string()),
        });
    }
    if ct.starts_with("application/cbor") {
        return Err(unsupported(format!(
            "the server accepts JSON request bodies only, got {ct:?}"
        )));
    }
    parse_body(body)
}

/// Parse a JSON body into an object.
pub(super) fn parse_body(body: &Bytes) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("request body is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request("request body must be a JSON object"));
    }
    Ok(v)
}

fn meta_str<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get("metadata")?.get(field)?.as_str()
}

/// Check apiVersion/kind/namespace/name against the URL and fill what the
/// body leaves out (a cluster-scoped object's namespace is dropped).
pub(super) fn conform(
    kind: Kind,
    ns: &str,
    name: Option<&str>,
    v: &mut Value,
) -> Result<(), ApiError> {
    if let Some(k) = v.get("kind").and_then(Value::as_str)
        && k != kind.as_str()
    {
        return Err(ApiError::bad_request(format!(
            "body has kind {k:?} but the URL is for {kind}"
        )));
    }
    if let Some(a) = v.get("apiVersion").and_then(Value::as_str)
        && a != kind.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "body has apiVersion {a:?}, expected {:?}",
            kind.api_version()
        )));
    }
    if let Some(bns) = meta_str(v, "namespace")
        && !bns.is_empty()
        && bns != ns
        && kind.namespaced()
    {
        return Err(ApiError::bad_request(format!(
            "the namespace of the object ({bns:?}) does not match the namespace of the URL ({ns:?})"
        )));
    }
    if let Some(name) = name
        && let Some(bname) = meta_str(v, "name")
        && bname != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({bname:?}) does not match the name of the URL ({name:?})"
        )));
    }
    let Some(obj) = v.as_object_mut() else {
        return Err(ApiError::bad_request("request body must be a JSON object"));
    };
    obj.insert("kind".into(), kind.as_str().into());
    obj.insert("apiVersion".into(), kind.api_version().into());
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(meta) = meta.as_object_mut() else {
        return Err(ApiError::bad_request("metadata must be an object"));
    };
    if kind.namespaced() {
        meta.insert("namespace".into(), ns.into());
    } else {
        meta.remove("namespace");
    }
    // The server keeps the record of field owners itself.
    meta.remove("managedFields");
    if let Some(name) = name {
        meta.insert("name".into(), name.into());
    }
    Ok(())
}

/// Validate and bring into canonical form; errors are 422 with causes.
pub(super) fn checked(kind: Kind, v: &Value) -> Result<Value, ApiError> {
    let name = meta_str(v, "name").unwrap_or_default().to_string();
    validate(kind, v).map_err(|e| ApiError::invalid(kind, &name, &e))?;
    normalize(kind, v).map_err(|e| ApiError::invalid(kind, &name, &e))
}

/// [`checked`], then this deployment's rules ([`super::admission`]).
pub(super) fn admitted(st: &ApiState, kind: Kind, v: &Value) -> Result<Value, ApiError> {
    let v = checked(kind, v)?;
    let name = meta_str(&v, "name").unwrap_or_default().to_string();
    st.admission
        .admit(kind, &v)
        .map_err(|e| ApiError::invalid(kind, &name, &e))?;
    Ok(v)
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
    w.track(kind, false, None, &mut v);
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
    let target = Target {
        kind,
        ns: &ns,
        name: &name,
        status: false,
    };
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
    let target = Target {
        kind: Kind::Namespace,
        ns: "",
        name: &name,
        status: false,
    };
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
    let target = Target {
        kind,
        ns: &ns,
        name: &name,
        status: true,
    };
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

impl Target<'_> {
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
        w.track(kind, false, None, &mut v);
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
        w.track(kind, t.status, Some(&current), &mut next);
        Ok(Some(next))
    })
    .await?;
    match written {
        Some(v) => Ok(ok_json(StatusCode::OK, &v)),
        None => Err(t.not_found()),
    }
}

pub async fn delete(
    State(st): State<ApiState>,
    Extension(group): Extension<Group>,
    Path((ns, plural, name)): Path<(String, String, String)>,
) -> Res {
    let kind = namespaced_kind(group, &plural)?;
    match st.store.delete(kind, &ns, &name).await? {
        Deleted::Gone(v) => Ok(ok_json(StatusCode::OK, &v)),
        // Finalizers remain: the object is marked and goes later.
        Deleted::Marked(v) => Ok(ok_json(StatusCode::ACCEPTED, &v)),
    }
}

/// DELETE `/api/v1/namespaces/{name}`: see [`namespaces::delete`].
pub async fn delete_namespace(State(st): State<ApiState>, Path(name): Path<String>) -> Res {
    namespaces::delete(&st, &name).await
}
