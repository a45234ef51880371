//! Virtual media steps of the executor: the boot's ISO inserted into the
//! BMC's virtual CD (the URL from boot HTTP, through
//! [`super::FirmwareImages::media_url`]) and ejected after the boot, each
//! noted in the boot history. The URL carries the boot's media token: the
//! history and events name only where it points, never the token
//! ([`crate::bmc::image_url::redact`]).

use super::{Executor, Stop, Work};
use crate::api::BootStep;
use crate::bmc::BmcError;
use crate::controller::machine::plan::Step;

/// The last error's reason when boot HTTP cannot name the ISO's URL.
pub const MEDIA_UNAVAILABLE: &str = "VirtualMediaUnavailable";

impl Executor<'_> {
    /// Insert the current boot's ISO. A failure is recorded (as any BMC
    /// action's) and stops the plan.
    pub(super) async fn insert_media(&self, w: &mut Work) -> Result<(), Stop> {
        let boot_id =
            w.m.status
                .as_ref()
                .and_then(|s| s.boot.as_ref())
                .map(|b| b.id.clone())
                .unwrap_or_default();
        let url = match self.firmware {
            Some(h) => h.media_url(&w.m, &boot_id),
            None => Err("no boot HTTP server here to serve the ISO to the BMC".to_string()),
        };
        let url = match url {
            Ok(u) => u,
            Err(e) => {
                let message = format!("virtual media: {e}");
                self.status_step(
                    w,
                    &Step::RecordError {
                        reason: MEDIA_UNAVAILABLE.into(),
                        message,
                    },
                )?;
                self.flush(w).await?;
                return Err(Stop::After(self.bmc_retry));
            }
        };
        let Some(bmc) = self.bmc else {
            let e = BmcError::Config("no BMC connection".into());
            return self.bmc_failed(w, &Step::InsertMedia, &e).await;
        };
        let shown = crate::bmc::image_url::redact(&url);
        tracing::info!(image = %shown, "inserting virtual media");
        if let Err(e) = bmc.insert_media(&url).await {
            return self.bmc_failed(w, &Step::InsertMedia, &e).await;
        }
        self.status_step(
            w,
            &Step::Note {
                step: BootStep::MediaInserted,
                detail: shown,
            },
        )
    }

    /// Eject the virtual CD (ejecting an empty drive is fine).
    pub(super) async fn eject_media(&self, w: &mut Work) -> Result<(), Stop> {
        let Some(bmc) = self.bmc else {
            let e = BmcError::Config("no BMC connection".into());
            return self.bmc_failed(w, &Step::EjectMedia, &e).await;
        };
        match bmc.eject_media().await {
            Ok(()) => {}
            // No virtual media, so nothing can be in it (a machine whose
            // spec.boot changed after it was installed another way).
            Err(BmcError::Unsupported { .. }) => {
                tracing::info!("no virtual media to eject");
                return Ok(());
            }
            Err(e) => return self.bmc_failed(w, &Step::EjectMedia, &e).await,
        }
        self.status_step(
            w,
            &Step::Note {
                step: BootStep::MediaEjected,
                detail: "virtual CD".into(),
            },
        )
    }
}
