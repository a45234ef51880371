//! A fault-injecting HTTP proxy the tests put between the driver and a real
//! BMC emulator: per-request rules (method + path substring, a number of
//! times or forever) that delay, drop the connection without a reply,
//! answer 5xx (with Retry-After), or swallow a request with a 204 so the
//! BMC "acknowledges" a change it never sees. It can also lie: rewrite
//! text in answers (make sushy-tools look like another vendor's model, or
//! read back `Once` where the emulator keeps `Continuous`), or acknowledge a
//! Reset at once, report its target power state for the next few reads,
//! and only then pass the Reset on (a BMC whose power state is reported
//! before it is true). Everything else is forwarded. Runs on the test's
//! tokio runtime; stops when dropped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Response};

#[derive(Clone, Debug)]
pub enum Fault {
    /// Wait, then forward.
    Delay(Duration),
    /// Close the connection without answering.
    Drop,
    /// Answer this status (and Retry-After seconds) without forwarding.
    Status { code: u16, retry_after: Option<u64> },
    /// Answer 204 without forwarding: an acknowledged, ignored change.
    Swallow,
    /// Forward, then replace each `(from, to)` in the answer's body.
    Rewrite(Vec<(String, String)>),
    /// For a Reset POST: answer 204 at once, hold the request, answer the
    /// next `reads` GETs whose body has a `PowerState` with the Reset's
    /// target state, then forward the held Reset (before answering the
    /// last of those reads) and tell the truth again.
    PowerEarly { reads: usize },
}

/// A Reset acknowledged but not yet passed on.
struct Held {
    method: Method,
    path: String,
    headers: hyper::HeaderMap,
    body: Bytes,
    /// `On` or `Off`: what the lie reports.
    target: &'static str,
    reads_left: usize,
}

#[derive(Clone, Debug)]
pub struct Rule {
    pub method: Option<Method>,
    pub path_contains: String,
    /// How many more requests it applies to; `None` for all.
    pub times: Option<usize>,
    pub fault: Fault,
    pub hits: usize,
}

impl Rule {
    pub fn new(method: Option<Method>, path_contains: &str, fault: Fault) -> Rule {
        Rule {
            method,
            path_contains: path_contains.to_string(),
            times: None,
            fault,
            hits: 0,
        }
    }
    pub fn times(mut self, n: usize) -> Rule {
        self.times = Some(n);
        self
    }
}

/// Faults on a share of all requests, drawn from a seeded generator so a
/// run is reproducible: each request fails with probability `percent`/100,
/// with one of `faults` (in turn).
#[derive(Clone, Debug)]
pub struct Chaos {
    pub percent: u64,
    pub faults: Vec<Fault>,
    pub seed: u64,
    /// Faults injected so far.
    pub injected: usize,
    turn: usize,
}

impl Chaos {
    pub fn new(percent: u64, faults: Vec<Fault>, seed: u64) -> Chaos {
        Chaos {
            percent,
            faults,
            seed: seed.max(1),
            injected: 0,
            turn: 0,
        }
    }

    fn draw(&mut self) -> Option<Fault> {
        // xorshift64
        let mut x = self.seed;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.seed = x;
        if x % 100 >= self.percent || self.faults.is_empty() {
            return None;
        }
        let f = self.faults[self.turn % self.faults.len()].clone();
        self.turn += 1;
        self.injected += 1;
        Some(f)
    }
}

#[derive(Default)]
struct State {
    rules: Vec<Rule>,
    chaos: Option<Chaos>,
    /// (method, path, body) of every request with a body.
    bodies: Vec<(String, String, String)>,
    /// (method, path, status answered or 0 for dropped)
    log: Vec<(String, String, u16)>,
    held: Option<Held>,
}

pub struct BmcProxy {
    pub port: u16,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl BmcProxy {
    /// Listen on 127.0.0.1 and forward to `upstream` (`http://127.0.0.1:PORT`).
    pub async fn start(upstream: url::Url) -> BmcProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let state: Arc<Mutex<State>> = Arc::default();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                let client = client.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        handle(req, st.clone(), client.clone(), upstream.clone())
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                        .await;
                });
            }
        });
        BmcProxy { port, state, task }
    }

    pub fn base(&self) -> url::Url {
        url::Url::parse(&format!("http://127.0.0.1:{}", self.port)).expect("url")
    }

    /// Add a rule; returns its index for [`BmcProxy::hits`].
    pub fn add(&self, rule: Rule) -> usize {
        let mut s = self.state.lock().expect("lock");
        s.rules.push(rule);
        s.rules.len() - 1
    }

    pub fn hits(&self, rule: usize) -> usize {
        self.state.lock().expect("lock").rules[rule].hits
    }

    /// Fail a share of every request from now on (rules still go first).
    pub fn set_chaos(&self, chaos: Option<Chaos>) {
        self.state.lock().expect("lock").chaos = chaos;
    }

    /// Faults the chaos setting injected so far.
    pub fn chaos_injected(&self) -> usize {
        let s = self.state.lock().expect("lock");
        s.chaos.as_ref().map_or(0, |c| c.injected)
    }

    pub fn clear(&self) {
        self.state.lock().expect("lock").rules.clear();
    }

    /// Every request that carried a body: (method, path, body).
    pub fn bodies(&self) -> Vec<(String, String, String)> {
        self.state.lock().expect("lock").bodies.clone()
    }

    /// Every request seen: (method, path, status; 0 when dropped).
    pub fn log(&self) -> Vec<(String, String, u16)> {
        self.state.lock().expect("lock").log.clone()
    }

    /// A handle that reads what the proxy saw from another thread.
    pub fn recorder(&self) -> Recorder {
        Recorder(self.state.clone())
    }
}

/// What a proxy saw, readable while it runs elsewhere (see
/// [`super::ns_proxy`]).
#[derive(Clone)]
pub struct Recorder(Arc<Mutex<State>>);

impl Recorder {
    /// Every request that carried a body: (method, path, body).
    pub fn bodies(&self) -> Vec<(String, String, String)> {
        self.0.lock().expect("lock").bodies.clone()
    }
}

impl Drop for BmcProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Reply = Response<Full<Bytes>>;

async fn handle(
    req: Request<hyper::body::Incoming>,
    state: Arc<Mutex<State>>,
    client: reqwest::Client,
    upstream: url::Url,
) -> Result<Reply, std::io::Error> {
    let method = req.method().clone();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let fault = {
        let mut s = state.lock().expect("lock");
        let found = s.rules.iter_mut().find(|r| {
            r.times != Some(0)
                && r.method.as_ref().is_none_or(|m| *m == method)
                && path.contains(&r.path_contains)
        });
        let ruled = found.map(|r| {
            r.hits += 1;
            if let Some(t) = r.times.as_mut() {
                *t -= 1;
            }
            r.fault.clone()
        });
        ruled.or_else(|| s.chaos.as_mut().and_then(Chaos::draw))
    };
    let record = |code: u16| {
        state
            .lock()
            .expect("lock")
            .log
            .push((method.to_string(), path.clone(), code));
    };
    match fault {
        Some(Fault::Drop) => {
            record(0);
            return Err(std::io::Error::other("dropped by the fault proxy"));
        }
        Some(Fault::Status { code, retry_after }) => {
            record(code);
            let mut b = Response::builder()
                .status(code)
                .header("content-type", "application/json");
            if let Some(s) = retry_after {
                b = b.header("retry-after", s.to_string());
            }
            let body =
                format!(r#"{{"error": {{"code": "Proxy.Fault", "message": "injected {code}"}}}}"#);
            return Ok(b.body(Full::new(Bytes::from(body))).expect("response"));
        }
        Some(Fault::Swallow) => {
            record(204);
            return Ok(Response::builder()
                .status(204)
                .body(Full::new(Bytes::new()))
                .expect("response"));
        }
        Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
        Some(Fault::PowerEarly { reads }) => {
            let headers = req.headers().clone();
            let body = req
                .into_body()
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let reset: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let target = match reset["ResetType"].as_str().unwrap_or("") {
                "ForceOff" | "GracefulShutdown" | "PushPowerButton" => "Off",
                _ => "On",
            };
            let mut s = state.lock().expect("lock");
            s.bodies.push((
                method.to_string(),
                path.clone(),
                String::from_utf8_lossy(&body).to_string(),
            ));
            s.held = Some(Held {
                method: method.clone(),
                path: path.clone(),
                headers,
                body,
                target,
                reads_left: reads,
            });
            s.log.push((method.to_string(), path.clone(), 204));
            return Ok(Response::builder()
                .status(204)
                .body(Full::new(Bytes::new()))
                .expect("response"));
        }
        Some(Fault::Rewrite(_)) | None => {}
    }
    // Forward.
    let headers = req.headers().clone();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    if !body.is_empty() {
        state.lock().expect("lock").bodies.push((
            method.to_string(),
            path.clone(),
            String::from_utf8_lossy(&body).to_string(),
        ));
    }
    let (status, resp_headers, bytes) =
        match forward(&client, &upstream, &method, &path, &headers, body).await {
            Ok(r) => r,
            Err(e) => {
                record(502);
                return Ok(Response::builder()
                    .status(502)
                    .body(Full::new(Bytes::from(e)))
                    .expect("response"));
            }
        };
    let mut bytes = bytes;
    if let Some(Fault::Rewrite(pairs)) = &fault {
        let mut text = String::from_utf8_lossy(&bytes).to_string();
        for (from, to) in pairs {
            text = text.replace(from.as_str(), to);
        }
        bytes = Bytes::from(text);
    }
    // A held Reset: lie about the power state, then pass the Reset on.
    let release = {
        let mut s = state.lock().expect("lock");
        let mut release = None;
        if method == Method::GET
            && let Some(h) = s.held.as_mut()
            && let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(&bytes)
            && v.get("PowerState").is_some()
        {
            v["PowerState"] = serde_json::Value::from(h.target);
            bytes = Bytes::from(v.to_string());
            h.reads_left = h.reads_left.saturating_sub(1);
            if h.reads_left == 0 {
                release = s.held.take();
            }
        }
        release
    };
    if let Some(h) = release {
        let _ = forward(&client, &upstream, &h.method, &h.path, &h.headers, h.body).await;
    }
    let mut b = Response::builder().status(status);
    for (k, v) in resp_headers.iter() {
        if k != hyper::header::CONTENT_LENGTH
            && k != hyper::header::TRANSFER_ENCODING
            && k != hyper::header::CONNECTION
        {
            b = b.header(k, v);
        }
    }
    record(status);
    Ok(b.body(Full::new(bytes)).expect("response"))
}

/// Send a request upstream: (status, headers, body) or the error text.
async fn forward(
    client: &reqwest::Client,
    upstream: &url::Url,
    method: &Method,
    path: &str,
    headers: &hyper::HeaderMap,
    body: Bytes,
) -> Result<(u16, reqwest::header::HeaderMap, Bytes), String> {
    let url = upstream.join(path).expect("join");
    let mut fwd = client.request(method.clone(), url).body(body);
    for (k, v) in headers.iter() {
        if k != hyper::header::HOST && k != hyper::header::CONTENT_LENGTH {
            fwd = fwd.header(k, v);
        }
    }
    let resp = fwd.send().await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.bytes().await.unwrap_or_default();
    Ok((status, headers, bytes))
}
