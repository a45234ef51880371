//! A small client of metalherd's REST API for the CLI commands: finds the
//! server and its token, and does get/list/create/replace/patch/delete/watch
//! over JSON values. Errors say what to do (start the server, fix the token)
//! and carry the server's `Status` when there is one.
//!
//! Discovery: the URL comes from `--server` / `METALHERD_SERVER`, else the
//! data directory's `server-url` file (written by `metalherd serve`), else
//! `https://127.0.0.1:7080`; the token from `METALHERD_TOKEN`, else the data
//! directory's `api-token` file. HTTPS servers are verified against the data
//! directory's CA (`ca.crt`, written by `metalherd serve`) when it exists,
//! else against the system's roots. The token never goes over plain HTTP
//! unless `--insecure-http` says so.

use std::path::PathBuf;
use std::pin::Pin;

use futures::{Stream, StreamExt};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::GlobalArgs;
use crate::api::{FieldError, Kind};
use crate::http::api::group_prefix;

/// Where the server is when nothing says otherwise.
pub const DEFAULT_SERVER: &str = "https://127.0.0.1:7080";

/// A `Status` the server answered with.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiStatus {
    pub code: u16,
    pub reason: String,
    pub message: String,
    /// Field causes of an `Invalid` (422).
    pub causes: Vec<FieldError>,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error(
        "cannot reach the metalherd server at {url} ({detail}). Is it running? Start it with: metalherd serve --data-dir {}",
        data_dir.display()
    )]
    NotRunning {
        url: String,
        data_dir: PathBuf,
        detail: String,
    },
    #[error(
        "the server at {url} refused the API token (401). The token is in {}; or set METALHERD_TOKEN",
        token_file.display()
    )]
    Unauthorized { url: String, token_file: PathBuf },
    #[error("Error from server ({}): {}", .0.reason, .0.message)]
    Api(ApiStatus),
    #[error("invalid server URL {0:?} (expected https://host:port)")]
    BadUrl(String),
    #[error(
        "the server URL {0} is plain HTTP: the API token is only sent over HTTPS. Use https://, or --insecure-http for a server started with --insecure-http"
    )]
    PlainHttp(String),
    #[error("cannot use the CA certificate {}: {detail}", path.display())]
    BadCa { path: PathBuf, detail: String },
    #[error("request to {url} failed: {detail}")]
    Http { url: String, detail: String },
    #[error("unexpected answer from {url}: {detail}")]
    Decode { url: String, detail: String },
}

impl ClientError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, ClientError::Api(s) if s.code == 404)
    }
    pub fn status(&self) -> Option<&ApiStatus> {
        match self {
            ClientError::Api(s) => Some(s),
            _ => None,
        }
    }
}

/// One event of a watch stream.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchItem {
    /// `ADDED`, `MODIFIED`, `DELETED` (an `ERROR` becomes an `Err`).
    pub type_: String,
    pub object: Value,
}

pub type WatchItems = Pin<Box<dyn Stream<Item = Result<WatchItem, ClientError>> + Send>>;

/// A client of one metalherd API server.
#[derive(Clone, Debug)]
pub struct ApiClient {
    base: String,
    token: Option<String>,
    data_dir: PathBuf,
    http: reqwest::Client,
}

impl ApiClient {
    /// Find the server and token as the CLI does (flags, environment, data
    /// directory, default).
    pub fn from_global(g: &GlobalArgs) -> Result<ApiClient, ClientError> {
        let from_file = |name: &str| {
            std::fs::read_to_string(g.data_dir.join(name))
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        };
        let base = g
            .server
            .clone()
            .or_else(|| from_file(crate::datadir::SERVER_URL_FILE))
            .unwrap_or_else(|| DEFAULT_SERVER.to_string());
        let token = std::env::var("METALHERD_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
            .or_else(|| from_file(crate::datadir::TOKEN_FILE));
        ApiClient::new(&base, token, g.data_dir.clone(), g.insecure_http)
    }

    /// A client of `base` (`https://host:port`) with an optional token. An
    /// HTTPS server is verified against `data_dir`'s CA when there is one;
    /// a token goes over plain HTTP only when `insecure_http`.
    pub fn new(
        base: &str,
        token: Option<String>,
        data_dir: PathBuf,
        insecure_http: bool,
    ) -> Result<ApiClient, ClientError> {
        let u = url::Url::parse(base).map_err(|_| ClientError::BadUrl(base.to_string()))?;
        if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
            return Err(ClientError::BadUrl(base.to_string()));
        }
        if u.scheme() == "http" && token.is_some() && !insecure_http {
            return Err(ClientError::PlainHttp(base.to_string()));
        }
        // reqwest is built without a default TLS provider: install ring once.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(5))
            // The server names the CLI's writes in managedFields by it.
            .user_agent(concat!("metalherd/", env!("CARGO_PKG_VERSION")));
        let ca = data_dir.join(crate::datadir::CA_CERT_FILE);
        if u.scheme() == "https" && ca.exists() {
            builder = builder.tls_backend_preconfigured(trusting(&ca)?);
        }
        let http = builder.build().map_err(|e| ClientError::Http {
            url: base.to_string(),
            detail: e.to_string(),
        })?;
        Ok(ApiClient {
            base: base.trim_end_matches('/').to_string(),
            token,
            data_dir,
            http,
        })
    }

    /// The CA file this client trusts for `data_dir` (may not exist).
    pub fn ca_file(data_dir: &std::path::Path) -> PathBuf {
        data_dir.join(crate::datadir::CA_CERT_FILE)
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// URL path of a kind's collection (`ns` None: all namespaces), or of
    /// one object when `name` is given. Cluster-scoped kinds (Namespaces)
    /// have no namespace in their paths.
    pub fn path(kind: Kind, ns: Option<&str>, name: Option<&str>) -> String {
        let mut p = group_prefix(kind).to_string();
        if let Some(ns) = ns.filter(|_| kind.namespaced()) {
            p.push_str("/namespaces/");
            p.push_str(ns);
        }
        p.push('/');
        p.push_str(kind.plural());
        if let Some(n) = name {
            p.push('/');
            p.push_str(n);
        }
        p
    }

    pub async fn get(&self, kind: Kind, ns: &str, name: &str) -> Result<Value, ClientError> {
        self.send(
            Method::GET,
            &Self::path(kind, Some(ns), Some(name)),
            None,
            None,
        )
        .await
    }

    /// A List object (`items`, `metadata.resourceVersion`). `ns` None lists
    /// every namespace.
    pub async fn list(
        &self,
        kind: Kind,
        ns: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Value, ClientError> {
        let mut p = Self::path(kind, ns, None);
        if let Some(s) = selector.filter(|s| !s.is_empty()) {
            p.push_str("?labelSelector=");
            p.push_str(&encode(s));
        }
        self.send(Method::GET, &p, None, None).await
    }

    /// Create `obj` in its `metadata.namespace` (default `default`).
    pub async fn create(&self, kind: Kind, obj: &Value) -> Result<Value, ClientError> {
        let (ns, _) = crate::store::key_of(obj);
        self.send(
            Method::POST,
            &Self::path(kind, Some(&ns), None),
            Some(obj),
            None,
        )
        .await
    }

    /// Replace (PUT) `obj`; a `metadata.resourceVersion` makes it conditional.
    pub async fn replace(&self, kind: Kind, obj: &Value) -> Result<Value, ClientError> {
        let (ns, name) = crate::store::key_of(obj);
        self.send(
            Method::PUT,
            &Self::path(kind, Some(&ns), Some(&name)),
            Some(obj),
            None,
        )
        .await
    }

    /// Replace the status of `obj` (PUT `/status`).
    pub async fn replace_status(&self, kind: Kind, obj: &Value) -> Result<Value, ClientError> {
        let (ns, name) = crate::store::key_of(obj);
        let p = format!("{}/status", Self::path(kind, Some(&ns), Some(&name)));
        self.send(Method::PUT, &p, Some(obj), None).await
    }

    /// JSON merge patch of one object.
    pub async fn patch(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, ClientError> {
        self.send(
            Method::PATCH,
            &Self::path(kind, Some(ns), Some(name)),
            Some(patch),
            Some("application/merge-patch+json"),
        )
        .await
    }

    /// JSON merge patch of one object's status.
    pub async fn patch_status(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, ClientError> {
        self.patch_subresource(kind, ns, name, "status", patch)
            .await
    }

    /// JSON merge patch of one object's subresource (`status`, `scale`).
    async fn patch_subresource(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        subresource: &str,
        patch: &Value,
    ) -> Result<Value, ClientError> {
        let p = format!("{}/{subresource}", Self::path(kind, Some(ns), Some(name)));
        self.send(
            Method::PATCH,
            &p,
            Some(patch),
            Some("application/merge-patch+json"),
        )
        .await
    }

    /// The `autoscaling/v1` Scale of one object (GET `/scale`).
    pub async fn get_scale(&self, kind: Kind, ns: &str, name: &str) -> Result<Value, ClientError> {
        let p = format!("{}/scale", Self::path(kind, Some(ns), Some(name)));
        self.send(Method::GET, &p, None, None).await
    }

    /// JSON merge patch of one object's Scale (PATCH `/scale`).
    pub async fn patch_scale(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, ClientError> {
        self.patch_subresource(kind, ns, name, "scale", patch).await
    }

    /// Delete one object; returns its last state (still present with a
    /// deletionTimestamp when finalizers remain).
    pub async fn delete(&self, kind: Kind, ns: &str, name: &str) -> Result<Value, ClientError> {
        self.send(
            Method::DELETE,
            &Self::path(kind, Some(ns), Some(name)),
            None,
            None,
        )
        .await
    }

    /// Watch a kind. Without `resource_version` the stream starts with an
    /// `ADDED` per existing object. Ends when the server ends it.
    pub async fn watch(
        &self,
        kind: Kind,
        ns: Option<&str>,
        selector: Option<&str>,
        resource_version: Option<&str>,
    ) -> Result<WatchItems, ClientError> {
        let mut p = format!("{}?watch=true", Self::path(kind, ns, None));
        if let Some(s) = selector.filter(|s| !s.is_empty()) {
            p.push_str("&labelSelector=");
            p.push_str(&encode(s));
        }
        if let Some(rv) = resource_version {
            p.push_str("&resourceVersion=");
            p.push_str(&encode(rv));
        }
        let url = format!("{}{p}", self.base);
        let resp = self.request(Method::GET, &url, None, None).await?;
        let resp = self.check(&url, resp).await?;
        let chunks: ChunkStream<reqwest::Error> = Box::pin(resp.bytes_stream());
        let url2 = url.clone();
        let s = lines(chunks).map(move |line| {
            let line = line.map_err(|e| ClientError::Http {
                url: url2.clone(),
                detail: e.to_string(),
            })?;
            let v: Value = serde_json::from_slice(&line).map_err(|e| ClientError::Decode {
                url: url2.clone(),
                detail: e.to_string(),
            })?;
            let type_ = v["type"].as_str().unwrap_or_default().to_string();
            if type_ == "ERROR" {
                return Err(ClientError::Api(status_from(&v["object"], 500)));
            }
            Ok(WatchItem {
                type_,
                object: v.get("object").cloned().unwrap_or(Value::Null),
            })
        });
        Ok(Box::pin(s))
    }

    async fn request(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
        content_type: Option<&str>,
    ) -> Result<reqwest::Response, ClientError> {
        let mut req = self.http.request(method, url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            let bytes = serde_json::to_vec(b).map_err(|e| ClientError::Decode {
                url: url.to_string(),
                detail: e.to_string(),
            })?;
            req = req
                .header(
                    reqwest::header::CONTENT_TYPE,
                    content_type.unwrap_or("application/json"),
                )
                .body(bytes);
        }
        req.send().await.map_err(|e| {
            if e.is_connect() || e.is_timeout() {
                ClientError::NotRunning {
                    url: self.base.clone(),
                    data_dir: self.data_dir.clone(),
                    detail: root_cause(&e),
                }
            } else {
                ClientError::Http {
                    url: url.to_string(),
                    detail: root_cause(&e),
                }
            }
        })
    }

    async fn check(
        &self,
        url: &str,
        resp: reqwest::Response,
    ) -> Result<reqwest::Response, ClientError> {
        let code = resp.status();
        if code.is_success() {
            return Ok(resp);
        }
        if code == StatusCode::UNAUTHORIZED {
            return Err(ClientError::Unauthorized {
                url: self.base.clone(),
                token_file: self.data_dir.join(crate::datadir::TOKEN_FILE),
            });
        }
        let body = resp.bytes().await.unwrap_or_default();
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if v.get("kind").and_then(Value::as_str) == Some("Status") {
            return Err(ClientError::Api(status_from(&v, code.as_u16())));
        }
        Err(ClientError::Decode {
            url: url.to_string(),
            detail: format!(
                "HTTP {code}: {}",
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ),
        })
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        content_type: Option<&str>,
    ) -> Result<Value, ClientError> {
        let url = format!("{}{path}", self.base);
        let resp = self.request(method, &url, body, content_type).await?;
        let resp = self.check(&url, resp).await?;
        resp.json::<Value>().await.map_err(|e| ClientError::Decode {
            url,
            detail: e.to_string(),
        })
    }
}

fn status_from(v: &Value, code: u16) -> ApiStatus {
    let causes = v
        .pointer("/details/causes")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .map(|c| FieldError {
                    field: c["field"].as_str().unwrap_or_default().to_string(),
                    message: c["message"].as_str().unwrap_or_default().to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    ApiStatus {
        code: v["code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(code),
        reason: v["reason"].as_str().unwrap_or("Unknown").to_string(),
        message: v["message"].as_str().unwrap_or_default().to_string(),
        causes,
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(s) = cur.source() {
        cur = s;
    }
    cur.to_string()
}

/// Percent-encode a query value.
fn encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

type ChunkStream<E> = Pin<Box<dyn Stream<Item = Result<bytes::Bytes, E>> + Send>>;

/// Split a stream of byte chunks into lines (without the newline). A
/// stream error ends the lines, passed on as it is.
fn lines<E: Send + 'static>(
    chunks: ChunkStream<E>,
) -> impl Stream<Item = Result<Vec<u8>, E>> + Send {
    futures::stream::unfold(
        (chunks, Vec::<u8>::new(), false),
        |(mut chunks, mut buf, mut done)| async move {
            loop {
                if let Some(i) = buf.iter().position(|&b| b == b'\n') {
                    let mut line: Vec<u8> = buf.drain(..=i).collect();
                    line.pop();
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    return Some((Ok(line), (chunks, buf, done)));
                }
                if done {
                    if buf.iter().all(u8::is_ascii_whitespace) {
                        return None;
                    }
                    let line = std::mem::take(&mut buf);
                    return Some((Ok(line), (chunks, buf, done)));
                }
                match chunks.next().await {
                    Some(Ok(b)) => buf.extend_from_slice(&b),
                    Some(Err(e)) => return Some((Err(e), (chunks, Vec::new(), true))),
                    None => done = true,
                }
            }
        },
    )
}

/// A rustls client configuration trusting only the CA certificate(s) in `ca`.
fn trusting(ca: &std::path::Path) -> Result<rustls::ClientConfig, ClientError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let bad = |detail: String| ClientError::BadCa {
        path: ca.to_path_buf(),
        detail,
    };
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca).map_err(|e| bad(e.to_string()))?;
    for c in certs {
        roots
            .add(c.map_err(|e| bad(e.to_string()))?)
            .map_err(|e| bad(e.to_string()))?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_split_across_chunks() {
        let chunks: Vec<Result<bytes::Bytes, std::convert::Infallible>> = vec![
            Ok(bytes::Bytes::from_static(b"{\"a\":")),
            Ok(bytes::Bytes::from_static(b"1}\n\n{\"b\"")),
            Ok(bytes::Bytes::from_static(b":2}")),
        ];
        let out: Vec<_> = lines(Box::pin(futures::stream::iter(chunks)))
            .collect::<Vec<_>>()
            .await;
        assert_eq!(
            out,
            vec![Ok(b"{\"a\":1}".to_vec()), Ok(b"{\"b\":2}".to_vec())]
        );
    }

    #[test]
    fn paths() {
        assert_eq!(
            ApiClient::path(Kind::Machine, Some("default"), Some("m1")),
            "/apis/metalherd.dev/v1alpha1/namespaces/default/machines/m1"
        );
        assert_eq!(ApiClient::path(Kind::Secret, None, None), "/api/v1/secrets");
        assert_eq!(
            ApiClient::path(Kind::Namespace, Some("default"), Some("lab")),
            "/api/v1/namespaces/lab"
        );
        assert_eq!(
            ApiClient::path(Kind::Lease, Some("default"), None),
            "/apis/coordination.k8s.io/v1/namespaces/default/leases"
        );
    }
}
