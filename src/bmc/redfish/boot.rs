//! The System's boot override through Redfish: a one-time override set and
//! read back, and (for hw-test, which leaves a server as it found it) the
//! override cleared. Both PATCH the settings object when the BMC names one,
//! with If-Match when the BMC wants it. Decisions are in [`super::logic`].

use reqwest::Method;
use serde_json::{Value, json};

use super::RedfishBmc;
use super::logic;
use super::model::{self, BootHolder, ComputerSystem};
use crate::bmc::quirks::Quirks;
use crate::bmc::{BmcError, BootDevice, FirmwareMode};

impl RedfishBmc {
    /// PATCH `body` where the System's Boot changes go; the path it went to.
    async fn patch_boot(
        &self,
        sys: &ComputerSystem,
        quirks: &Quirks,
        body: &Value,
    ) -> Result<String, BmcError> {
        // Changes go to the settings object when the BMC advertises one.
        let patch_path =
            model::settings_path(&sys.settings).unwrap_or_else(|| sys.odata_id.clone());
        let patch_path = if patch_path.is_empty() {
            self.resolve().await?.system_path.clone()
        } else {
            patch_path
        };
        let etag = if quirks.boot_needs_etag {
            self.t.get(&patch_path).await?.etag
        } else {
            None
        };
        match self
            .t
            .act(Method::PATCH, &patch_path, body, etag.as_deref())
            .await
        {
            Ok(_) => {}
            // The BMC wants If-Match (428) or our tag went stale (412):
            // read the current tag and try once more with it.
            Err(BmcError::Http { status, .. }) if status == 412 || status == 428 => {
                let tag = self.t.get(&patch_path).await?.etag;
                let Some(tag) = tag else {
                    return Err(self.protocol(format!(
                        "PATCH {patch_path} needs If-Match but the resource has no ETag"
                    )));
                };
                self.t
                    .act(Method::PATCH, &patch_path, body, Some(&tag))
                    .await?;
            }
            Err(e) => return Err(e),
        }
        Ok(patch_path)
    }

    pub(super) async fn do_boot(
        &self,
        device: BootDevice,
        mode: FirmwareMode,
    ) -> Result<(), BmcError> {
        let (sys, quirks) = self.system().await?;
        let allowed = &sys.boot.target_allowable_values;
        let target = logic::boot_target(device);
        if !allowed.is_empty() && !allowed.iter().any(|a| a == target) {
            return Err(BmcError::Unsupported {
                address: self.address().to_string(),
                what: format!("boot override target {target} (allowed: {allowed:?})"),
            });
        }
        let sent_mode = logic::boot_sends_mode(&sys.boot, quirks);
        let body = logic::boot_patch(device, mode, &sys.boot, quirks);
        let kept_ok = quirks.once_kept_as_continuous;
        let patch_path = self.patch_boot(&sys, quirks, &body).await?;
        let (got, _) = self.t.get_json::<BootHolder>(&patch_path).await?;
        logic::check_boot_readback(device, mode, sent_mode, kept_ok, &got.boot).map_err(|m| {
            BmcError::BootOverrideIgnored {
                address: self.address().to_string(),
                wanted: m.wanted,
                got: m.got,
                kept_continuous: m.kept_continuous,
            }
        })
    }

    /// Clear the boot override (`BootSourceOverrideEnabled: Disabled`) and
    /// read back that none is active (`BootOverrideIgnored` otherwise).
    /// Not on the [`crate::bmc::Bmc`] seam: only hw-test, putting back a
    /// server's state, needs it. sushy-tools refuses it (400: it wants a
    /// target in every Boot PATCH).
    pub async fn disable_boot_override(&self) -> Result<(), BmcError> {
        let (sys, quirks) = self.system().await?;
        let body = json!({"Boot": {"BootSourceOverrideEnabled": "Disabled"}});
        let patch_path = self.patch_boot(&sys, quirks, &body).await?;
        let (got, _) = self.t.get_json::<BootHolder>(&patch_path).await?;
        if logic::override_active(&got.boot) {
            return Err(BmcError::BootOverrideIgnored {
                address: self.address().to_string(),
                wanted: "Disabled".into(),
                got: logic::boot_text(&got.boot),
                kept_continuous: false,
            });
        }
        Ok(())
    }
}
