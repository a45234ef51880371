//! The health gate's HTTP probe, behind a trait so tests can answer it.
//! One GET per call, bounded by a timeout; the answer is the status code.

use std::time::Duration;

use async_trait::async_trait;

/// Asks a URL for its status code.
#[async_trait]
pub trait Prober: Send + Sync + 'static {
    /// The status code, or why there was none.
    async fn status(&self, url: &str) -> Result<u16, String>;
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
    async fn status(&self, url: &str) -> Result<u16, String> {
        match self.client.get(url).send().await {
            Ok(r) => Ok(r.status().as_u16()),
            Err(e) => Err(format!("probe {url}: {e}")),
        }
    }
}
