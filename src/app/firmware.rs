//! Firmware images for BMCs: the Machine controller asks for an image's
//! URL, this caches it (the image cache boot HTTP serves from, verified
//! against its digest) and answers `{base URL}/images/{sha256}/firmware`.

use async_trait::async_trait;

use crate::api::Artifact;
use crate::controller::machine::execute::FirmwareImages;
use crate::files::cache::ImageCache;

pub(super) struct CachedFirmware {
    pub cache: ImageCache,
    /// Boot HTTP's base URL, as machines (and their BMCs) reach it.
    pub base_url: String,
}

#[async_trait]
impl FirmwareImages for CachedFirmware {
    async fn url(&self, image: &Artifact) -> Result<String, String> {
        let digest = self.cache.ensure(image).await.map_err(|e| e.to_string())?;
        Ok(format!("{}/images/{digest}/firmware", self.base_url))
    }
}
