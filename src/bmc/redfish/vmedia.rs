//! Virtual media through Redfish: find the virtual CD (the System's
//! `VirtualMedia` collection, else its Manager's), insert an image URL
//! (ejecting what it held first) and eject, each read back. Decisions are
//! in [`super::vmedia_logic`]; this file only sends and reads.
//!
//! The image URL may carry a token: it goes into the InsertMedia body and
//! nowhere else. Logs and errors show it as [`image_url::redact`] does, and
//! BMC error texts that quote it are scrubbed.

use std::time::Duration;

use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::RedfishBmc;
use super::model::{Collection, Manager, VirtualMedia};
use super::vmedia_logic::{self as vl, MediaAction, MediaLookup, NoVirtualMedia};
use crate::bmc::{BmcError, image_url};

/// How long an InsertMedia may take. Some BMCs (sushy-tools among them)
/// download the whole image before they answer: a live ISO of 1 GB over a
/// slow management network takes minutes.
pub const INSERT_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// `e` with every quote of `image_url` in its text scrubbed: a BMC that
/// cannot fetch the image tends to say from where.
fn scrubbed(e: BmcError, image_url: &str) -> BmcError {
    let s = |d: String| image_url::scrub(&d, image_url);
    match e {
        BmcError::Http {
            address,
            status,
            detail,
        } => BmcError::Http {
            address,
            status,
            detail: s(detail),
        },
        BmcError::Protocol { address, detail } => BmcError::Protocol {
            address,
            detail: s(detail),
        },
        BmcError::TaskFailed {
            address,
            state,
            detail,
        } => BmcError::TaskFailed {
            address,
            state,
            detail: s(detail),
        },
        BmcError::NoSuchSystem { address, detail } => BmcError::NoSuchSystem {
            address,
            detail: s(detail),
        },
        other => other,
    }
}

impl RedfishBmc {
    fn no_media(&self, why: NoVirtualMedia) -> BmcError {
        BmcError::Unsupported {
            address: self.address().to_string(),
            what: why.to_string(),
        }
    }

    /// GET a resource the BMC may lack: `None` when it answers 404; other
    /// failures (timeouts, 5xx after retries) stay errors.
    async fn get_unless_missing<T: DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<Option<T>, BmcError> {
        match self.t.get_json::<T>(path).await {
            Ok((v, _)) => Ok(Some(v)),
            Err(BmcError::NoSuchSystem { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The virtual CD as it reads now (its `@odata.id` always set).
    async fn virtual_cd(&self) -> Result<VirtualMedia, BmcError> {
        let (sys, _) = self.system().await?;
        let collection = match vl::media_lookup(&sys).map_err(|e| self.no_media(e))? {
            MediaLookup::Collection(p) => p,
            MediaLookup::Manager(p) => {
                let m = self.get_unless_missing::<Manager>(&p).await?;
                vl::manager_media(m.as_ref()).map_err(|e| self.no_media(e))?
            }
        };
        let coll = self
            .get_unless_missing::<Collection>(&collection)
            .await?
            .ok_or_else(|| self.no_media(NoVirtualMedia::Gone(collection.clone())))?;
        let mut members = Vec::new();
        for l in coll.members {
            let (mut m, _) = self.t.get_json::<VirtualMedia>(&l.odata_id).await?;
            if m.odata_id.is_empty() {
                m.odata_id = l.odata_id;
            }
            members.push(m);
        }
        vl::pick_cd(&members).cloned().map_err(|e| self.no_media(e))
    }

    /// POST an action of the CD; a target the BMC does not have (404) is
    /// `Unsupported`, a 202 with a task is followed to its end.
    async fn media_action(
        &self,
        cd: &VirtualMedia,
        action: MediaAction,
        body: &serde_json::Value,
    ) -> Result<(), BmcError> {
        let target = vl::media_action_target(cd, action);
        let image = body["Image"].as_str();
        let sent = match action {
            // Once: a retry would download the image again.
            MediaAction::Insert => self.t.post_once(&target, body, INSERT_TIMEOUT, image).await,
            MediaAction::Eject => self.t.send(Method::POST, &target, Some(body), None).await,
        };
        let r = sent.map_err(|e| match e {
            BmcError::NoSuchSystem { address, .. } => BmcError::Unsupported {
                address,
                what: format!("virtual media: no {action:?} action at {target}"),
            },
            other => other,
        })?;
        match (r.status, r.location) {
            (202, Some(task)) => self.follow_task(&task, INSERT_TIMEOUT).await,
            _ => Ok(()),
        }
    }

    /// Eject what `cd` holds and read back that it holds nothing.
    async fn eject_cd(&self, cd: &VirtualMedia) -> Result<(), BmcError> {
        tracing::info!(member = %cd.odata_id, "redfish virtual media eject");
        self.media_action(cd, MediaAction::Eject, &json!({}))
            .await?;
        let (got, _) = self.t.get_json::<VirtualMedia>(&cd.odata_id).await?;
        vl::check_ejected(&got).map_err(|got| BmcError::MediaNotEjected {
            address: self.address().to_string(),
            got,
        })
    }

    pub(super) async fn do_insert_media(&self, image_url: &str) -> Result<(), BmcError> {
        // A URL no BMC can take fails before anything is sent.
        let body = vl::insert_body(image_url)
            .map_err(|e| BmcError::Config(format!("BMC {}: {e}", self.address())))?;
        let shown = image_url::redact(image_url);
        let cd = self.virtual_cd().await?;
        if vl::holds_media(&cd) {
            // sushy-tools replaces silently; real BMCs refuse an insert
            // into a full drive.
            tracing::info!(member = %cd.odata_id, held = %vl::media_text(&cd), "ejecting the media inserted before");
            self.eject_cd(&cd).await?;
        }
        tracing::info!(member = %cd.odata_id, image = %shown, "redfish virtual media insert");
        if let Err(e) = self.media_action(&cd, MediaAction::Insert, &body).await {
            // A BMC may record the media before it fails the action
            // (sushy-tools does): leave the drive empty, as best we can.
            if let Err(eject) = self.eject_cd(&cd).await {
                tracing::debug!(
                    reason = eject.reason(),
                    "eject after a failed insert failed too"
                );
            }
            return Err(scrubbed(e, image_url));
        }
        let (got, _) = self.t.get_json::<VirtualMedia>(&cd.odata_id).await?;
        vl::check_inserted(image_url, &got).map_err(|got| BmcError::MediaNotInserted {
            address: self.address().to_string(),
            wanted: shown,
            got,
        })
    }

    pub(super) async fn do_eject_media(&self) -> Result<(), BmcError> {
        let cd = self.virtual_cd().await?;
        if !vl::holds_media(&cd) {
            // Already empty: some BMCs refuse to eject an empty drive.
            return Ok(());
        }
        self.eject_cd(&cd).await
    }
}
