//! Request handlers: decode the path and body, validate, call the store,
//! answer with the object or a `Status`. The reads (get, list, watch) are
//! here, with what the writes share (bodies, checks against the URL);
//! every write is validated with [`crate::api::validate::validate`] and
//! stored in canonical form (`writes.rs`, `patch.rs`, `apply.rs`).

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
use super::{ApiError, ApiState, Group};
use crate::api::Kind;
use crate::api::validate::validate;
use crate::store::{ListOptions, Selector};

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
    /// Paging: at most this many items, and where the last page ended.
    pub limit: Option<usize>,
    #[serde(rename = "continue")]
    pub continue_token: Option<String>,
    /// Watches: BOOKMARK events may be sent; the current objects first,
    /// closed by a BOOKMARK (with `resourceVersionMatch=NotOlderThan`).
    pub allow_watch_bookmarks: Option<String>,
    pub send_initial_events: Option<String>,
    pub resource_version_match: Option<String>,
}

pub(super) type Res = Result<Response, ApiError>;

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

pub(super) fn check_ns(ns: &str) -> Result<(), ApiError> {
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
        Some(s) => {
            FieldSelector::parse(kind, s).map_err(|e| ApiError::bad_request(e.to_string()))?
        }
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
        let truthy = |v: &Option<String>| matches!(v.as_deref(), Some("true" | "1"));
        let asked = super::watch::Asked {
            bookmarks: truthy(&q.allow_watch_bookmarks),
            initial_events: truthy(&q.send_initial_events),
        };
        if asked.initial_events && q.resource_version_match.as_deref() != Some("NotOlderThan") {
            return Err(ApiError::bad_request(
                "sendInitialEvents is forbidden for watch unless resourceVersionMatch is set to NotOlderThan",
            ));
        }
        return super::watch::watch(st, kind, opts, from, q.timeout_seconds, shape, asked).await;
    }
    let mut list = st.store.list(kind, &opts).await?;
    let filtered = !shape.fields.is_empty() || !opts.selector.is_empty();
    if !shape.fields.is_empty() {
        list.items.retain(|o| shape.fields.matches(kind, o));
    }
    let page = super::paging::page(
        list.items,
        &list.resource_version,
        q.limit,
        q.continue_token.as_deref(),
    )?;
    let mut meta = json!({"resourceVersion": list.resource_version});
    if let Some(next) = &page.next {
        meta["continue"] = json!(next);
        // kube-apiserver counts what follows only when nothing filters.
        if !filtered {
            meta["remainingItemCount"] = json!(page.remaining);
        }
    }
    if let Some(include) = shape.table {
        let mut t = table::table(kind, &page.items, Some(&list.resource_version), include);
        t["metadata"] = meta;
        return Ok(ok_json(StatusCode::OK, &t));
    }
    let body = json!({
        "apiVersion": kind.api_version(),
        "kind": format!("{kind}List"),
        "metadata": meta,
        "items": page.items,
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
pub(super) fn body_object(
    kind: Kind,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Value, ApiError> {
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

pub(super) fn meta_str<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
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
    // The server keeps the record of field owners itself; a record a
    // client sent with an update was read before ([`super::ssa::sent`]).
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
    admitted_by(&st.admission, kind, v)
}

/// [`admitted`] with the deployment's rules given (the admission webhook
/// has no store).
pub(super) fn admitted_by(
    admission: &super::admission::Admission,
    kind: Kind,
    v: &Value,
) -> Result<Value, ApiError> {
    let v = checked(kind, v)?;
    let name = meta_str(&v, "name").unwrap_or_default().to_string();
    admission
        .admit(kind, &v)
        .map_err(|e| ApiError::invalid(kind, &name, &e))?;
    Ok(v)
}
