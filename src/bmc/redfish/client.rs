//! The HTTP edge of the Redfish driver: one transport per BMC over a shared
//! reqwest client ([`super::clients`]: TLS by CA bundle, system roots, or an
//! explicit insecure choice), authentication
//! (SessionService `X-Auth-Token` with re-login on expiry, Basic otherwise),
//! retries of 5xx answers, status-to-error mapping and task monitors.
//!
//! It knows nothing of systems, boot or power: the driver above decides.
//! The password goes into exactly two places: the Basic header and the
//! session login body. It never reaches an error or a log line.

use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use reqwest::{Method, StatusCode, header};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::clients::shared_client;
pub use super::clients::{ClientBuildError, TlsMode, http_client, install_crypto_provider};
use super::logic::{self, RetryPolicy, TaskOutcome};
use super::model::{self, ErrorBody, Task};
use crate::bmc::{BmcError, Credentials, Timing};

/// An HTTP answer the driver looks at.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub etag: Option<String>,
    pub location: Option<String>,
    pub body: Bytes,
}

impl Reply {
    pub fn json<T: DeserializeOwned>(&self, address: &str) -> Result<T, BmcError> {
        model::decode(&self.body).map_err(|e| BmcError::Protocol {
            address: address.to_string(),
            detail: e.to_string(),
        })
    }
}

#[derive(Clone)]
enum Auth {
    /// Basic auth on every request (also before a session exists).
    Basic,
    Session {
        token: String,
        /// The session's URI, for logout.
        location: Option<String>,
    },
}

/// Largest response body read from a BMC.
pub const MAX_BODY: usize = 4 << 20;

/// One BMC's HTTP client.
pub struct Transport {
    http: reqwest::Client,
    base: url::Url,
    address: String,
    creds: Credentials,
    auth: Mutex<Auth>,
    /// `/redfish/v1/SessionService/Sessions` once the service offered it.
    sessions_path: Mutex<Option<String>>,
    pub retry: RetryPolicy,
    pub timing: Timing,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("address", &self.address)
            .field("creds", &self.creds)
            .finish_non_exhaustive()
    }
}

impl Transport {
    pub fn new(
        base: url::Url,
        creds: Credentials,
        tls: &TlsMode,
        timing: Timing,
        retry: RetryPolicy,
    ) -> Result<Transport, BmcError> {
        let address = base.as_str().trim_end_matches('/').to_string();
        let http = shared_client(tls, &timing)
            .map_err(|e| BmcError::Config(format!("BMC {address}: {e}")))?;
        Ok(Transport {
            http,
            base,
            address,
            creds,
            auth: Mutex::new(Auth::Basic),
            sessions_path: Mutex::new(None),
            retry,
            timing,
        })
    }

    /// The BMC's address for messages (scheme, host, port; never credentials).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// A link of the BMC's (relative, or absolute on the BMC's own scheme,
    /// host and port) as a URL. A link anywhere else (an absolute
    /// `@odata.id`, a session `Location` or a task monitor naming another
    /// host) is refused: credentials go to the BMC and nowhere else.
    fn url(&self, path: &str) -> Result<url::Url, BmcError> {
        let u = self.base.join(path).map_err(|e| BmcError::Protocol {
            address: self.address.clone(),
            detail: format!("bad link {path:?}: {e}"),
        })?;
        let same = u.scheme() == self.base.scheme()
            && u.host_str() == self.base.host_str()
            && u.port_or_known_default() == self.base.port_or_known_default();
        if !same {
            return Err(BmcError::Protocol {
                address: self.address.clone(),
                detail: format!(
                    "the BMC linked to another host ({}://{}); refused: credentials go only to the BMC",
                    u.scheme(),
                    u.host_str().unwrap_or_default()
                ),
            });
        }
        Ok(u)
    }

    /// A response body, refused past [`MAX_BODY`] bytes (a Redfish
    /// document is a few KiB; a BMC or whoever answers in its place must
    /// not make the controller hold gigabytes).
    async fn body(&self, mut resp: reqwest::Response) -> Result<Bytes, BmcError> {
        let too_big = || BmcError::Protocol {
            address: self.address.clone(),
            detail: format!("response body larger than {MAX_BODY} bytes; refused"),
        };
        if resp.content_length().is_some_and(|n| n > MAX_BODY as u64) {
            return Err(too_big());
        }
        let mut buf = bytes::BytesMut::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.transport_error(e))? {
            if buf.len() + chunk.len() > MAX_BODY {
                return Err(too_big());
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf.freeze())
    }

    fn basic_header(&self) -> String {
        let raw = format!("{}:{}", self.creds.username, self.creds.password());
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }

    /// Whether requests currently ride on a session token.
    pub async fn has_session(&self) -> bool {
        matches!(*self.auth.lock().await, Auth::Session { .. })
    }

    /// Log in through the SessionService at `sessions_path`. A service that
    /// refuses sessions (404/405/501, no token) leaves Basic auth in place.
    pub async fn login(&self, sessions_path: &str) -> Result<(), BmcError> {
        *self.sessions_path.lock().await = Some(sessions_path.to_string());
        let mut auth = self.auth.lock().await;
        self.login_locked(&mut auth, sessions_path).await
    }

    async fn login_locked(&self, auth: &mut Auth, sessions_path: &str) -> Result<(), BmcError> {
        let url = self.url(sessions_path)?;
        let body = json!({"UserName": self.creds.username, "Password": self.creds.password()});
        let resp = self
            .http
            .post(url)
            .json(&body)
            .send()
            .await
            .map_err(|e| self.transport_error(e))?;
        let status = resp.status();
        match status.as_u16() {
            200 | 201 | 204 => {
                let token = header_str(resp.headers(), "x-auth-token");
                let location = header_str(resp.headers(), header::LOCATION.as_str());
                let body = self.body(resp).await.unwrap_or_default();
                let location = location.or_else(|| {
                    serde_json::from_slice::<model::Link>(&body)
                        .ok()
                        .map(|l| l.odata_id)
                        .filter(|s| !s.is_empty())
                });
                match token {
                    Some(token) => {
                        tracing::debug!(address = %self.address, "redfish session opened");
                        *auth = Auth::Session { token, location };
                    }
                    None => *auth = Auth::Basic,
                }
                Ok(())
            }
            401 | 403 => Err(BmcError::BadCredentials {
                address: self.address.clone(),
            }),
            _ => {
                tracing::debug!(address = %self.address, %status, "no sessions; using Basic auth");
                *auth = Auth::Basic;
                Ok(())
            }
        }
    }

    /// Delete the session, if any. Idempotent; later requests use Basic auth
    /// until the next login.
    pub async fn logout(&self) -> Result<(), BmcError> {
        let prev = std::mem::replace(&mut *self.auth.lock().await, Auth::Basic);
        *self.sessions_path.lock().await = None;
        if let Auth::Session {
            token,
            location: Some(loc),
        } = prev
        {
            let resp = self
                .http
                .delete(self.url(&loc)?)
                .header("X-Auth-Token", token)
                .send()
                .await
                .map_err(|e| self.transport_error(e))?;
            let s = resp.status().as_u16();
            // Already gone (expired) is as good as logged out.
            if !(resp.status().is_success() || s == 404 || s == 401) {
                return Err(self.http_error(s, &self.body(resp).await.unwrap_or_default()));
            }
            tracing::debug!(address = %self.address, "redfish session closed");
        }
        Ok(())
    }

    pub async fn get(&self, path: &str) -> Result<Reply, BmcError> {
        self.send(Method::GET, path, None, None).await
    }

    pub async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<(T, Reply), BmcError> {
        let r = self.get(path).await?;
        Ok((r.json(&self.address)?, r))
    }

    /// GET once, without retries, for resources a BMC may lack or break
    /// (Storage on sushy-tools answers 500): `None` on any failure.
    pub async fn get_optional<T: DeserializeOwned>(&self, path: &str) -> Option<T> {
        match self
            .send_with(Method::GET, path, None, None, How::once())
            .await
        {
            Ok(r) => r.json(&self.address).ok(),
            Err(e) => {
                tracing::debug!(address = %self.address, path, reason = e.reason(), "optional resource skipped");
                None
            }
        }
    }

    /// Send a request, retrying 5xx (and transport failures of idempotent
    /// requests), re-logging in once on 401 when riding a session. A 4xx/5xx
    /// that stays becomes a typed error.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<&str>,
    ) -> Result<Reply, BmcError> {
        let how = How {
            attempts: self.retry.max_attempts,
            ..How::once()
        };
        self.send_with(method, path, body, if_match, how).await
    }

    /// POST once, never retried (a retry would repeat whatever the BMC
    /// does before it answers), with its own deadline instead of the
    /// per-request timeout: for actions that may last minutes, such as an
    /// InsertMedia during which the BMC downloads the whole image. `hide`:
    /// a URL in the body that the BMC's error text may quote back (it
    /// carries a token); it is scrubbed from the error.
    pub async fn post_once(
        &self,
        path: &str,
        body: &Value,
        timeout: Duration,
        hide: Option<&str>,
    ) -> Result<Reply, BmcError> {
        let how = How {
            timeout: Some(timeout),
            hide,
            ..How::once()
        };
        self.send_with(Method::POST, path, Some(body), None, how)
            .await
    }

    async fn send_with(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<&str>,
        how: How<'_>,
    ) -> Result<Reply, BmcError> {
        let How {
            attempts: max_attempts,
            timeout,
            hide,
        } = how;
        let url = self.url(path)?;
        let idempotent = method == Method::GET || method == Method::DELETE;
        let mut relogged = false;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let auth = self.auth.lock().await.clone();
            let mut req = self.http.request(method.clone(), url.clone());
            req = match &auth {
                Auth::Basic => req.header(header::AUTHORIZATION, self.basic_header()),
                Auth::Session { token, .. } => req.header("X-Auth-Token", token),
            };
            if let Some(tag) = if_match {
                req = req.header(header::IF_MATCH, tag);
            }
            if let Some(b) = body {
                req = req.json(b);
            }
            if let Some(t) = timeout {
                req = req.timeout(t);
            }
            let resp = match req.send().await {
                Ok(r) => r,
                Err(e) => {
                    let err = match (self.transport_error(e), timeout) {
                        (BmcError::Timeout { address, .. }, Some(after)) => {
                            BmcError::Timeout { address, after }
                        }
                        (other, _) => other,
                    };
                    if idempotent
                        && matches!(err, BmcError::Unreachable { .. })
                        && attempt < max_attempts
                    {
                        crate::bmc::metrics::retried("redfish");
                        tokio::time::sleep(logic::backoff(attempt, &self.retry)).await;
                        continue;
                    }
                    return Err(err);
                }
            };
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let body_bytes = self.body(resp).await?;
            if status == 401 {
                if let Auth::Session { token, .. } = &auth
                    && !relogged
                {
                    relogged = true;
                    self.relogin(token).await?;
                    attempt -= 1;
                    continue;
                }
                return Err(BmcError::BadCredentials {
                    address: self.address.clone(),
                });
            }
            let retry_after = header_str(&headers, header::RETRY_AFTER.as_str());
            let policy = RetryPolicy {
                max_attempts,
                ..self.retry
            };
            if let Some(wait) = logic::retry_after(status, retry_after.as_deref(), attempt, &policy)
            {
                tracing::debug!(address = %self.address, path, status, attempt, ?wait, "retrying");
                crate::bmc::metrics::retried("redfish");
                tokio::time::sleep(wait).await;
                continue;
            }
            if status == 404 {
                return Err(BmcError::NoSuchSystem {
                    address: self.address.clone(),
                    detail: format!("{path} not found"),
                });
            }
            if !(200..300).contains(&status) {
                return Err(BmcError::Http {
                    address: self.address.clone(),
                    status,
                    detail: ErrorBody::summary_hiding(&body_bytes, hide),
                });
            }
            return Ok(Reply {
                status,
                etag: header_str(&headers, header::ETAG.as_str()),
                location: header_str(&headers, header::LOCATION.as_str()),
                body: body_bytes,
            });
        }
    }

    /// Log in again unless another request already replaced `stale`.
    async fn relogin(&self, stale: &str) -> Result<(), BmcError> {
        let Some(path) = self.sessions_path.lock().await.clone() else {
            return Err(BmcError::BadCredentials {
                address: self.address.clone(),
            });
        };
        let mut auth = self.auth.lock().await;
        if let Auth::Session { token, .. } = &*auth
            && token != stale
        {
            return Ok(());
        }
        tracing::debug!(address = %self.address, "session expired; logging in again");
        self.login_locked(&mut auth, &path).await
    }

    /// POST or PATCH an action; a 202 with a task monitor is followed until
    /// the task ends (or `power_deadline` passes).
    pub async fn act(
        &self,
        method: Method,
        path: &str,
        body: &Value,
        if_match: Option<&str>,
    ) -> Result<Reply, BmcError> {
        let r = self.send(method, path, Some(body), if_match).await?;
        if r.status == StatusCode::ACCEPTED.as_u16()
            && let Some(loc) = r.location.clone()
        {
            self.wait_task(&loc).await?;
        }
        Ok(r)
    }

    /// Poll a task monitor until the task completes.
    pub async fn wait_task(&self, monitor: &str) -> Result<(), BmcError> {
        let deadline = Instant::now() + self.timing.power_deadline;
        loop {
            let r = self.get(monitor).await?;
            let task: Task = if r.body.is_empty() {
                Task::default()
            } else {
                r.json(&self.address)?
            };
            match logic::task_outcome(task.task_state.as_deref()) {
                TaskOutcome::Completed => return Ok(()),
                TaskOutcome::Failed(state) => {
                    let detail = task.detail();
                    return Err(BmcError::TaskFailed {
                        address: self.address.clone(),
                        state,
                        detail,
                    });
                }
                // A monitor that stops answering 202 is done, whatever it says.
                TaskOutcome::Running if r.status != 202 => return Ok(()),
                TaskOutcome::Running => {}
            }
            if Instant::now() >= deadline {
                return Err(BmcError::Timeout {
                    address: self.address.clone(),
                    after: self.timing.power_deadline,
                });
            }
            tokio::time::sleep(self.timing.poll_interval).await;
        }
    }

    fn http_error(&self, status: u16, body: &[u8]) -> BmcError {
        BmcError::Http {
            address: self.address.clone(),
            status,
            detail: ErrorBody::summary(body),
        }
    }

    fn transport_error(&self, e: reqwest::Error) -> BmcError {
        if e.is_timeout() {
            return BmcError::Timeout {
                address: self.address.clone(),
                after: self.timing.request_timeout,
            };
        }
        let chain = error_chain(&e.without_url());
        let lower = chain.to_ascii_lowercase();
        if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake") {
            return BmcError::Tls {
                address: self.address.clone(),
                detail: chain,
            };
        }
        BmcError::Unreachable {
            address: self.address.clone(),
            detail: chain,
        }
    }
}

/// How one request is sent.
#[derive(Clone, Copy)]
struct How<'a> {
    /// Attempts in all (5xx answers and, for idempotent requests,
    /// transport failures are retried until then).
    attempts: u32,
    /// Instead of the per-request timeout.
    timeout: Option<Duration>,
    /// Text the request carries that an error must not quote.
    hide: Option<&'a str>,
}

impl How<'_> {
    fn once() -> Self {
        How {
            attempts: 1,
            timeout: None,
            hide: None,
        }
    }
}

/// A driver dropped without `close()` still ends its session, in the
/// background, when a runtime is at hand: BMCs allow only a few sessions.
impl Drop for Transport {
    fn drop(&mut self) {
        let Ok(auth) = self.auth.try_lock() else {
            return;
        };
        let Auth::Session {
            token,
            location: Some(loc),
        } = &*auth
        else {
            return;
        };
        let (Ok(handle), Ok(url)) = (tokio::runtime::Handle::try_current(), self.url(loc)) else {
            return;
        };
        let req = self.http.delete(url).header("X-Auth-Token", token.clone());
        handle.spawn(async move {
            let _ = req.send().await;
        });
    }
}

fn header_str(h: &header::HeaderMap, name: &str) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let t = s.to_string();
        if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        cur = s.source();
    }
    parts.join(": ")
}
