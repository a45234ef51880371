//! Firmware and storage steps of the executor: reading the versions and
//! the volumes, and updating one component from an image the BMC fetches
//! from metalherd (the image cache served over boot HTTP, through
//! [`FirmwareImages`]).

use async_trait::async_trait;

use super::{Executor, Stop, Work};
use crate::api::FirmwareImage;
use crate::bmc::{Bmc, BmcError};
use crate::store::events::EventType;

/// What a BMC fetches from boot HTTP: a firmware image (cached, downloaded
/// and verified against its digest, and the URL that serves it) and a
/// virtual media boot's ISO.
#[async_trait]
pub trait FirmwareImages: Send + Sync {
    async fn url(&self, image: &crate::api::Artifact) -> Result<String, String>;
    /// The URL of the ISO of machine `m`'s boot `boot_id` (boot HTTP builds
    /// it when the BMC asks), with the boot's media token.
    fn media_url(&self, m: &crate::api::Machine, boot_id: &str) -> Result<String, String>;
}

/// The last error's reason when the image cannot be served.
pub const IMAGE_UNAVAILABLE: &str = "FirmwareImageUnavailable";

impl Executor<'_> {
    pub(super) async fn read_firmware(&self, w: &mut Work, bmc: &dyn Bmc) -> Result<(), BmcError> {
        let versions = bmc.firmware_versions().await?;
        let st = w.m.status.get_or_insert_with(Default::default);
        st.firmware = Some(crate::api::FirmwareStatus {
            versions,
            read_at: self.now,
        });
        w.dirty = true;
        Ok(())
    }

    pub(super) async fn read_volumes(&self, w: &mut Work, bmc: &dyn Bmc) -> Result<(), BmcError> {
        let volumes = bmc.volumes().await?;
        let st = w.m.status.get_or_insert_with(Default::default);
        st.volumes = Some(crate::api::VolumesStatus {
            volumes,
            read_at: self.now,
        });
        w.dirty = true;
        Ok(())
    }

    /// Cache the image, have the BMC update the component from it, and
    /// tell it as an event. A failure is recorded and stops the plan.
    pub(super) async fn update_firmware(
        &self,
        w: &mut Work,
        f: &FirmwareImage,
    ) -> Result<(), Stop> {
        let url = match self.firmware {
            Some(images) => images.url(&f.image).await,
            None => Err("no boot HTTP server here to serve it to the BMC".to_string()),
        };
        let url = match url {
            Ok(u) => u,
            Err(e) => {
                let message = format!("firmware {} image {}: {e}", f.component, f.image.url);
                tracing::warn!(component = %f.component, error = %e, "firmware image unavailable");
                self.event(&w.m, EventType::Warning, IMAGE_UNAVAILABLE, &message)
                    .await;
                self.status_step(
                    w,
                    &super::Step::RecordError {
                        reason: IMAGE_UNAVAILABLE.into(),
                        message,
                    },
                )?;
                self.flush(w).await?;
                return Err(Stop::After(self.bmc_retry));
            }
        };
        let Some(bmc) = self.bmc else {
            let e = BmcError::Config("no BMC connection".into());
            return self
                .bmc_failed(w, &super::Step::UpdateFirmware(f.clone()), &e)
                .await;
        };
        tracing::info!(component = %f.component, version = %f.version, %url, "updating firmware");
        if let Err(e) = bmc.update_firmware(&f.component, &url).await {
            return self
                .bmc_failed(w, &super::Step::UpdateFirmware(f.clone()), &e)
                .await;
        }
        let from =
            w.m.status
                .as_ref()
                .and_then(|s| s.firmware.as_ref())
                .and_then(|s| s.versions.get(&f.component))
                .map_or("unknown", String::as_str)
                .to_string();
        let message = format!(
            "firmware {} updated from {from} to {} (image {url}); it is verified after the install's reboot",
            f.component, f.version
        );
        self.event(&w.m, EventType::Normal, "FirmwareUpdated", &message)
            .await;
        Ok(())
    }
}
