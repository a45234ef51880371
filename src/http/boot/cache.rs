//! The OS image cache: MachineClass artifacts (URL + sha256) downloaded once
//! into `<data-dir>/cache/<sha256>`, verified while they are written, then
//! served from disk. `file://` and `http(s)://` sources. Concurrent requests
//! for one digest share a single download. Never serves an unverified file:
//! a download lands under a temporary name and is renamed only when its
//! digest matches.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::Instrument;

use crate::api::Artifact;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    #[error("artifact {url} has no sha256; images are served only when pinned by digest")]
    NoDigest { url: String },
    #[error("artifact {url}: sha256 {sha256:?} is not 64 hex characters")]
    BadDigest { url: String, sha256: String },
    #[error("artifact {url}: unsupported URL scheme (file://, http://, https://)")]
    Scheme { url: String },
    #[error("artifact {url}: digest mismatch (expected {expected}, got {actual})")]
    Mismatch {
        url: String,
        expected: String,
        actual: String,
    },
    #[error("artifact {url}: download failed: {message}")]
    Download { url: String, message: String },
    #[error("image cache {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Content-addressed cache of boot images.
#[derive(Clone)]
pub struct ImageCache {
    dir: PathBuf,
    client: reqwest::Client,
    inflight: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl ImageCache {
    pub fn new(dir: PathBuf) -> ImageCache {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        ImageCache {
            dir,
            client,
            inflight: Arc::default(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of a cached digest, if it is there.
    pub async fn lookup(&self, sha256: &str) -> Option<PathBuf> {
        if !is_sha256(sha256) {
            return None;
        }
        let p = self.dir.join(sha256.to_ascii_lowercase());
        tokio::fs::metadata(&p).await.ok()?.is_file().then_some(p)
    }

    /// Make sure the artifact is cached; returns its lower-case digest.
    pub async fn ensure(&self, a: &Artifact) -> Result<String, CacheError> {
        let sha = a
            .sha256
            .as_deref()
            .ok_or_else(|| CacheError::NoDigest { url: a.url.clone() })?
            .to_ascii_lowercase();
        if !is_sha256(&sha) {
            return Err(CacheError::BadDigest {
                url: a.url.clone(),
                sha256: sha,
            });
        }
        if self.lookup(&sha).await.is_some() {
            return Ok(sha);
        }
        let lock = {
            let mut m = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            m.entry(sha.clone()).or_default().clone()
        };
        let _guard = lock.lock().await;
        let result = if self.lookup(&sha).await.is_some() {
            Ok(sha.clone())
        } else {
            self.fetch(&a.url, &sha).await.map(|()| sha.clone())
        };
        if let Ok(mut m) = self.inflight.lock() {
            m.remove(&sha);
        }
        result
    }

    async fn fetch(&self, url: &str, sha: &str) -> Result<(), CacheError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| CacheError::Io { path, source }
        };
        tokio::fs::create_dir_all(&self.dir)
            .await
            .map_err(io(&self.dir))?;
        let tmp = self
            .dir
            .join(format!(".tmp-{sha}-{:08x}", rand::random::<u32>()));
        let span = tracing::info_span!("image_fetch", url = %url, sha256 = %sha);
        self.fetch_into(url, sha, &tmp).instrument(span).await
    }

    /// Download into `tmp`, check the digest, move it into place.
    async fn fetch_into(&self, url: &str, sha: &str, tmp: &Path) -> Result<(), CacheError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| CacheError::Io { path, source }
        };
        tracing::info!("downloading into the image cache");
        let res = self.copy_into(url, tmp).await;
        let actual = match res {
            Ok(d) => d,
            Err(e) => {
                let _ = tokio::fs::remove_file(tmp).await;
                return Err(e);
            }
        };
        if actual != sha {
            let _ = tokio::fs::remove_file(tmp).await;
            return Err(CacheError::Mismatch {
                url: url.to_string(),
                expected: sha.to_string(),
                actual,
            });
        }
        let dest = self.dir.join(sha);
        tokio::fs::rename(tmp, &dest).await.map_err(io(&dest))?;
        tracing::info!("image cached");
        Ok(())
    }

    /// Copy the source into `tmp`, hashing as it goes; returns the digest.
    async fn copy_into(&self, url: &str, tmp: &Path) -> Result<String, CacheError> {
        let io = |source| CacheError::Io {
            path: tmp.to_path_buf(),
            source,
        };
        let mut out = tokio::fs::File::create(tmp).await.map_err(io)?;
        let mut h = Sha256::new();
        let parsed = url::Url::parse(url).map_err(|_| CacheError::Scheme {
            url: url.to_string(),
        })?;
        match parsed.scheme() {
            "file" => {
                let src = parsed.to_file_path().map_err(|()| CacheError::Scheme {
                    url: url.to_string(),
                })?;
                let mut f =
                    tokio::fs::File::open(&src)
                        .await
                        .map_err(|e| CacheError::Download {
                            url: url.to_string(),
                            message: e.to_string(),
                        })?;
                let mut buf = vec![0u8; 256 * 1024];
                loop {
                    let n = f.read(&mut buf).await.map_err(io)?;
                    if n == 0 {
                        break;
                    }
                    h.update(&buf[..n]);
                    out.write_all(&buf[..n]).await.map_err(io)?;
                }
            }
            "http" | "https" => {
                let dl = |e: reqwest::Error| CacheError::Download {
                    url: url.to_string(),
                    message: e.to_string(),
                };
                let resp = self
                    .client
                    .get(url)
                    .send()
                    .await
                    .and_then(|r| r.error_for_status())
                    .map_err(dl)?;
                let mut body = resp.bytes_stream();
                while let Some(chunk) = body.next().await {
                    let chunk = chunk.map_err(dl)?;
                    h.update(&chunk);
                    out.write_all(&chunk).await.map_err(io)?;
                }
            }
            _ => {
                return Err(CacheError::Scheme {
                    url: url.to_string(),
                });
            }
        }
        out.sync_all().await.map_err(io)?;
        Ok(hex::encode(h.finalize()))
    }
}

pub fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(b: &[u8]) -> String {
        hex::encode(Sha256::digest(b))
    }

    #[tokio::test]
    async fn file_urls_are_cached_and_verified() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("kernel");
        std::fs::write(&src, b"kernel bytes").unwrap();
        let cache = ImageCache::new(d.path().join("cache"));
        let url = format!("file://{}", src.display());
        let good = Artifact {
            url: url.clone(),
            sha256: Some(sha(b"kernel bytes").to_uppercase()),
            sha512: None,
        };
        let got = cache.ensure(&good).await.unwrap();
        assert_eq!(got, sha(b"kernel bytes"));
        let p = cache.lookup(&got).await.unwrap();
        assert_eq!(std::fs::read(p).unwrap(), b"kernel bytes");
        // Served from the cache once there, even if the source goes away.
        std::fs::remove_file(&src).unwrap();
        assert_eq!(cache.ensure(&good).await.unwrap(), got);

        std::fs::write(&src, b"other").unwrap();
        let bad = Artifact {
            url,
            sha256: Some(sha(b"expected")),
            sha512: None,
        };
        assert!(matches!(
            cache.ensure(&bad).await,
            Err(CacheError::Mismatch { .. })
        ));
        assert!(cache.lookup(&sha(b"expected")).await.is_none());
        // No temporary files left behind.
        let left: Vec<_> = std::fs::read_dir(cache.dir())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
            .collect();
        assert!(left.is_empty());
        let nodigest = Artifact {
            url: "file:///x".into(),
            ..Default::default()
        };
        assert!(matches!(
            cache.ensure(&nodigest).await,
            Err(CacheError::NoDigest { .. })
        ));
        let ftp = Artifact {
            url: "ftp://x/y".into(),
            sha256: Some(sha(b"x")),
            sha512: None,
        };
        assert!(matches!(
            cache.ensure(&ftp).await,
            Err(CacheError::Scheme { .. })
        ));
    }
}
