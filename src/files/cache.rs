//! The OS image cache: MachineClass artifacts downloaded once into
//! `<data-dir>/cache/<hex digest>`, verified while they are written, then
//! served from disk. `file://` and `http(s)://` sources. The digest is the
//! artifact's own `sha256` / `sha512`, or the one the distribution's checksum
//! file (`checksumsUrl`, see [`super::checksums`]) lists for its file name;
//! a checksum file is read once per process and URL. Concurrent requests
//! for one digest share a single download. Never serves an unverified file:
//! a download lands under a temporary name and is renamed only when its
//! digest matches.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use sha2::{Digest, Sha256, Sha512};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::Instrument;

use super::checksums::{self, ChecksumError, Expected};
use crate::api::Artifact;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    #[error(
        "artifact {url} has no sha256, sha512 or checksumsUrl; images are served only when pinned by digest"
    )]
    NoDigest { url: String },
    #[error("artifact {url}: {field} {value:?} is not a hex digest of the right length")]
    BadDigest {
        url: String,
        field: &'static str,
        value: String,
    },
    #[error("artifact {url}: checksum file {checksums}: {source}")]
    Checksums {
        url: String,
        checksums: String,
        #[source]
        source: ChecksumError,
    },
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
    /// Checksum files already read, by URL.
    checksum_files: Arc<tokio::sync::Mutex<HashMap<String, Arc<Vec<u8>>>>>,
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
            checksum_files: Arc::default(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of a cached digest (64 or 128 hex digits), if it is there.
    pub async fn lookup(&self, digest: &str) -> Option<PathBuf> {
        if !is_digest(digest) {
            return None;
        }
        let p = self.dir.join(digest.to_ascii_lowercase());
        tokio::fs::metadata(&p).await.ok()?.is_file().then_some(p)
    }

    /// Make sure the artifact is cached; returns its lower-case digest (the
    /// name it is cached and served under).
    pub async fn ensure(&self, a: &Artifact) -> Result<String, CacheError> {
        let want = self.expected(a).await?;
        let key = want.hex().to_string();
        if self.lookup(&key).await.is_some() {
            return Ok(key);
        }
        let lock = {
            let mut m = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            m.entry(key.clone()).or_default().clone()
        };
        let _guard = lock.lock().await;
        let result = if self.lookup(&key).await.is_some() {
            Ok(key.clone())
        } else {
            self.fetch(&a.url, &want).await.map(|()| key.clone())
        };
        if let Ok(mut m) = self.inflight.lock() {
            m.remove(&key);
        }
        result
    }

    /// The digest an artifact must have: its own, else its checksum file's.
    async fn expected(&self, a: &Artifact) -> Result<Expected, CacheError> {
        let bad = |field: &'static str, value: &str| CacheError::BadDigest {
            url: a.url.clone(),
            field,
            value: value.to_string(),
        };
        if let Some(h) = &a.sha256 {
            return match Expected::from_hex(h) {
                Some(e @ Expected::Sha256(_)) => Ok(e),
                _ => Err(bad("sha256", h)),
            };
        }
        if let Some(h) = &a.sha512 {
            return match Expected::from_hex(h) {
                Some(e @ Expected::Sha512(_)) => Ok(e),
                _ => Err(bad("sha512", h)),
            };
        }
        let Some(list) = &a.checksums_url else {
            return Err(CacheError::NoDigest { url: a.url.clone() });
        };
        let wrap = |source| CacheError::Checksums {
            url: a.url.clone(),
            checksums: list.clone(),
            source,
        };
        let file = checksums::file_name(&a.url).map_err(wrap)?;
        let body = self.checksum_file(list).await?;
        checksums::find(&body, &file).map_err(wrap)
    }

    /// A checksum file's bytes, downloaded on first use.
    async fn checksum_file(&self, url: &str) -> Result<Arc<Vec<u8>>, CacheError> {
        let mut files = self.checksum_files.lock().await;
        if let Some(b) = files.get(url) {
            return Ok(b.clone());
        }
        let read = async {
            tracing::info!("reading a checksum file");
            self.read_small(url).await
        };
        let span = tracing::info_span!("checksum_file", url = %url);
        let body = Arc::new(read.instrument(span).await?);
        files.insert(url.to_string(), body.clone());
        Ok(body)
    }

    /// Read a small text file (a checksum file) into memory.
    async fn read_small(&self, url: &str) -> Result<Vec<u8>, CacheError> {
        const LIMIT: usize = 16 << 20;
        let dl = |message: String| CacheError::Download {
            url: url.to_string(),
            message,
        };
        let parsed = url::Url::parse(url).map_err(|_| CacheError::Scheme {
            url: url.to_string(),
        })?;
        let body = match parsed.scheme() {
            "file" => {
                let p = parsed.to_file_path().map_err(|()| CacheError::Scheme {
                    url: url.to_string(),
                })?;
                tokio::fs::read(&p).await.map_err(|e| dl(e.to_string()))?
            }
            "http" | "https" => self
                .client
                .get(url)
                .send()
                .await
                .and_then(|r| r.error_for_status())
                .map_err(|e| dl(e.to_string()))?
                .bytes()
                .await
                .map_err(|e| dl(e.to_string()))?
                .to_vec(),
            _ => {
                return Err(CacheError::Scheme {
                    url: url.to_string(),
                });
            }
        };
        if body.len() > LIMIT {
            return Err(dl(format!("larger than {LIMIT} bytes")));
        }
        Ok(body)
    }

    async fn fetch(&self, url: &str, want: &Expected) -> Result<(), CacheError> {
        let sha = want.hex();
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
        let span = tracing::info_span!("image_fetch", url = %url, digest = %sha);
        self.fetch_into(url, want, &tmp).instrument(span).await
    }

    /// Download into `tmp`, check the digest, move it into place.
    async fn fetch_into(&self, url: &str, want: &Expected, tmp: &Path) -> Result<(), CacheError> {
        let sha = want.hex();
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| CacheError::Io { path, source }
        };
        tracing::info!("downloading into the image cache");
        let res = self
            .copy_into(url, tmp, matches!(want, Expected::Sha512(_)))
            .await;
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
    async fn copy_into(&self, url: &str, tmp: &Path, sha512: bool) -> Result<String, CacheError> {
        let io = |source| CacheError::Io {
            path: tmp.to_path_buf(),
            source,
        };
        let mut out = tokio::fs::File::create(tmp).await.map_err(io)?;
        let mut h = Hasher::new(sha512);
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
        Ok(h.finish())
    }
}

enum Hasher {
    Sha256(Sha256),
    Sha512(Sha512),
}

impl Hasher {
    fn new(sha512: bool) -> Hasher {
        if sha512 {
            Hasher::Sha512(Sha512::new())
        } else {
            Hasher::Sha256(Sha256::new())
        }
    }

    fn update(&mut self, b: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(b),
            Hasher::Sha512(h) => h.update(b),
        }
    }

    fn finish(self) -> String {
        match self {
            Hasher::Sha256(h) => hex::encode(h.finalize()),
            Hasher::Sha512(h) => hex::encode(h.finalize()),
        }
    }
}

/// Whether `s` names a cached artifact: a SHA-256 or SHA-512 hex digest.
pub fn is_digest(s: &str) -> bool {
    Expected::from_hex(s).is_some()
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
            checksums_url: None,
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
            checksums_url: None,
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
            checksums_url: None,
        };
        assert!(matches!(
            cache.ensure(&ftp).await,
            Err(CacheError::Scheme { .. })
        ));
    }

    #[tokio::test]
    async fn checksum_files_pin_artifacts_without_a_digest() {
        use sha2::Sha512;
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("vmlinuz"), b"kernel").unwrap();
        std::fs::write(d.path().join("initrd.img"), b"initrd").unwrap();
        let sha512 = hex::encode(Sha512::digest(b"kernel"));
        let digests = d.path().join("vmlinuz.DIGESTS");
        std::fs::write(
            &digests,
            format!(
                "# SHA512 HASH\n{sha512}  vmlinuz\n{}  initrd.img\n",
                "0".repeat(128)
            ),
        )
        .unwrap();
        let cache = ImageCache::new(d.path().join("cache"));
        let art = |name: &str| Artifact {
            url: format!("file://{}", d.path().join(name).display()),
            checksums_url: Some(format!("file://{}", digests.display())),
            ..Default::default()
        };
        let got = cache.ensure(&art("vmlinuz")).await.unwrap();
        assert_eq!(got, sha512);
        assert_eq!(
            std::fs::read(cache.lookup(&got).await.unwrap()).unwrap(),
            b"kernel"
        );
        // The list is read once: a changed file does not change the pin.
        std::fs::write(&digests, "").unwrap();
        assert_eq!(cache.ensure(&art("vmlinuz")).await.unwrap(), sha512);
        assert!(matches!(
            cache.ensure(&art("initrd.img")).await,
            Err(CacheError::Mismatch { .. })
        ));
        assert!(matches!(
            cache.ensure(&art("other")).await,
            Err(CacheError::Checksums {
                source: ChecksumError::NotListed { .. },
                ..
            })
        ));
    }
}
