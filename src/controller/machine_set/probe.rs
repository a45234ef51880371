//! The health gate's HTTP probe, behind a trait so tests can answer it.
//! One GET per call, bounded by a timeout; the answer is the status code.

use std::time::Duration;

use async_trait::async_trait;

/// Why a probe got no status code. The message is shown as the machine's
/// health detail.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// No answer: connection refused, timeout, TLS, a malformed reply.
    #[error("probe {url}: {source}")]
    Request {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// A test double was asked for a probe it was not told to expect.
    #[error("unexpected probe of {url}")]
    Unexpected { url: String },
}

/// Asks a URL for its status code.
#[async_trait]
pub trait Prober: Send + Sync + 'static {
    /// The status code, or why there was none.
    async fn status(&self, url: &str) -> Result<u16, ProbeError>;
}

/// The real prober (reqwest).
pub struct HttpProber {
    client: reqwest::Client,
}

impl HttpProber {
    pub fn new(timeout: Duration) -> HttpProber {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .unwrap_or_default();
        HttpProber { client }
    }
}

#[async_trait]
impl Prober for HttpProber {
    async fn status(&self, url: &str) -> Result<u16, ProbeError> {
        match self.client.get(url).send().await {
            Ok(r) => Ok(r.status().as_u16()),
            Err(source) => Err(ProbeError::Request {
                url: url.to_string(),
                source,
            }),
        }
    }
}
