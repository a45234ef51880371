//! What the boot services serve over TFTP besides the TFTP root: the path
//! of a Secure Boot machine, whose signed network GRUB reads everything
//! over TFTP (it has no HTTP). Three kinds of name, with or without the
//! leading `/` GRUB puts before them:
//! - `grub/grub.cfg`: the same for every machine, sends GRUB to
//! - `grub/<mac>.cfg`: this machine's configuration, picked and recorded
//!   like its iPXE script ([`script_handler::pick`]); an install one
//!   carries the boot's token, so it goes only to the machine's own
//!   address (a request from elsewhere is refused and leaves a Warning);
//! - `images/<sha256>/<name>`: a cached image (the live kernel and initrd),
//!   as boot HTTP serves it under `/images/`.
//!
//! Everything else comes from the TFTP root, as before.

use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use http::StatusCode;

use super::BootState;
use super::grub;
use super::script::Platform;
use super::script_handler::{Loader, Query, pick};
use crate::files::{DirSource, FileHandle, FileSource, SourceError, memory_file};

/// Where Debian's signed network GRUB (prefix `/grub`) reads its
/// configuration.
pub const GRUB_ENTRY: &str = "grub/grub.cfg";

#[derive(Debug, thiserror::Error)]
pub enum TftpBootError {
    #[error("rendering grub/grub.cfg: {0}")]
    Entry(#[from] super::script::ScriptError),
    #[error("image cache {path}: {source}")]
    Images {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

pub struct TftpBoot {
    state: Arc<BootState>,
    entry: Bytes,
    images: DirSource,
    root: Arc<dyn FileSource>,
}

impl TftpBoot {
    /// Over `root`, with the boot HTTP server's state (directory, store,
    /// image cache, tokens).
    pub fn new(
        state: Arc<BootState>,
        root: Arc<dyn FileSource>,
    ) -> Result<TftpBoot, TftpBootError> {
        let entry = grub::render_entry(state.settings.wait_seconds)?;
        let dir = state
            .settings
            .data_dir
            .join(crate::datadir::IMAGE_CACHE_DIR);
        let images = std::fs::create_dir_all(&dir)
            .and_then(|()| DirSource::new(&dir))
            .map_err(|source| TftpBootError::Images {
                path: dir.clone(),
                source,
            })?;
        Ok(TftpBoot {
            state,
            entry: Bytes::from(entry),
            images,
            root,
        })
    }

    async fn grub_config(
        &self,
        mac: [u8; 6],
        peer: SocketAddr,
    ) -> Result<Box<dyn FileHandle>, SourceError> {
        let q = Query::default();
        match pick(&self.state, peer, mac, q, Platform::Efi, Loader::Grub).await {
            Ok(s) => Ok(memory_file(s)),
            Err(r) => Err(match r.status() {
                StatusCode::NOT_FOUND => SourceError::NotFound,
                s if s.is_client_error() => SourceError::Forbidden,
                s => SourceError::Io(std::io::Error::other(format!("boot configuration: {s}"))),
            }),
        }
    }
}

#[async_trait]
impl FileSource for TftpBoot {
    async fn open(&self, name: &str) -> Result<Box<dyn FileHandle>, SourceError> {
        self.root.open(name).await
    }

    async fn open_for(
        &self,
        name: &str,
        peer: SocketAddr,
    ) -> Result<Box<dyn FileHandle>, SourceError> {
        let rel = name.trim_start_matches('/');
        if rel == GRUB_ENTRY {
            return Ok(memory_file(self.entry.clone()));
        }
        if let Some(mac) = grub::mac_of_path(rel) {
            return self.grub_config(mac, peer).await;
        }
        if let Some(rest) = rel.strip_prefix("images/") {
            // `<sha256>/<name>`: the name only says what it is for.
            let sha = rest.split('/').next().unwrap_or_default();
            if self.state.cache.lookup(sha).await.is_none() {
                return Err(SourceError::NotFound);
            }
            return self.images.open(&sha.to_ascii_lowercase()).await;
        }
        if rel.starts_with("grub/") {
            // GRUB's module lists and the like: there are none.
            return Err(SourceError::NotFound);
        }
        self.root.open_for(name, peer).await
    }
}
