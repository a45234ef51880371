//! What BMCs fetch from boot HTTP, for the Machine controller: a firmware
//! image's URL (cached first: the image cache boot HTTP serves from,
//! verified against its digest; `{base URL}/images/{sha256}/firmware`) and
//! a virtual media boot's ISO URL (`{base URL}/vmedia/{mac}/{media
//! token}/boot.iso`, which boot HTTP builds when the BMC asks).

use async_trait::async_trait;

use crate::api::{Artifact, MacAddr, Machine};
use crate::controller::machine::execute::FirmwareImages;
use crate::files::cache::ImageCache;
use crate::http::boot::token::TokenKey;

pub(super) struct CachedFirmware {
    pub cache: ImageCache,
    /// Boot HTTP's base URL, as machines (and their BMCs) reach it.
    pub base_url: String,
    /// Boot HTTP's token key (the same file), for media tokens.
    pub key: TokenKey,
}

#[async_trait]
impl FirmwareImages for CachedFirmware {
    async fn url(&self, image: &Artifact) -> Result<String, String> {
        let digest = self.cache.ensure(image).await.map_err(|e| e.to_string())?;
        Ok(format!("{}/images/{digest}/firmware", self.base_url))
    }

    fn media_url(&self, m: &Machine, boot_id: &str) -> Result<String, String> {
        let mac = m
            .spec
            .boot_mac_address
            .as_deref()
            .and_then(|s| s.parse::<MacAddr>().ok())
            .ok_or("the machine has no spec.bootMACAddress (boot HTTP finds it by its MAC)")?;
        let uid = m
            .metadata
            .uid
            .as_deref()
            .filter(|u| !u.is_empty())
            .ok_or("the machine has no uid yet")?;
        let token = crate::http::boot::vmedia::media_token(&self.key, uid, boot_id);
        Ok(crate::http::boot::vmedia::media_url(
            &self.base_url,
            mac.octets(),
            &token,
        ))
    }
}
