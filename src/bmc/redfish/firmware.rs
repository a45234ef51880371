//! Firmware through Redfish: the versions (the System's `BiosVersion` as
//! `BIOS`, and each `UpdateService/FirmwareInventory` member by its `Id`),
//! and `UpdateService.SimpleUpdate` with the task it starts followed to
//! its end. The BMC fetches the image itself, from the URL it is given.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::Method;
use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;

use super::logic::{TaskOutcome, task_outcome};
use super::model::{Collection, Link, Task};
use super::{RedfishBmc, SERVICE_ROOT};
use crate::bmc::BmcError;

/// The component the System's `BiosVersion` reports.
pub const BIOS: &str = "BIOS";

/// How long a firmware update's task may run: flashing takes minutes.
pub const UPDATE_DEADLINE: Duration = Duration::from_secs(30 * 60);

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
struct Root {
    update_service: Option<Link>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
struct UpdateService {
    firmware_inventory: Option<Link>,
    actions: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
struct SoftwareInventory {
    #[serde(rename = "@odata.id")]
    odata_id: String,
    id: Option<String>,
    version: Option<String>,
}

impl RedfishBmc {
    /// The update service and its path, or `Unsupported`.
    async fn update_service(&self) -> Result<(UpdateService, String), BmcError> {
        let (root, _) = self.t.get_json::<Root>(SERVICE_ROOT).await?;
        let path = root
            .update_service
            .map(|l| l.odata_id)
            .filter(|p| !p.is_empty())
            .ok_or_else(|| BmcError::Unsupported {
                address: self.address().to_string(),
                what: "firmware updates (the service root links no UpdateService)".into(),
            })?;
        let (svc, _) = self.t.get_json::<UpdateService>(&path).await?;
        Ok((svc, path))
    }

    /// The FirmwareInventory members, when the service lists them (a BMC
    /// without one, or one it cannot serve, lists none).
    async fn inventory_members(&self, svc: &UpdateService) -> Vec<SoftwareInventory> {
        let Some(link) = &svc.firmware_inventory else {
            return Vec::new();
        };
        let Some(coll) = self.t.get_optional::<Collection>(&link.odata_id).await else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for m in &coll.members {
            if let Some(s) = self.t.get_optional::<SoftwareInventory>(&m.odata_id).await {
                out.push(s);
            }
        }
        out
    }

    pub(super) async fn do_firmware_versions(&self) -> Result<BTreeMap<String, String>, BmcError> {
        let (sys, _) = self.system().await?;
        let mut out = BTreeMap::new();
        if let Some(v) = sys.bios_version.filter(|v| !v.is_empty()) {
            out.insert(BIOS.to_string(), v);
        }
        if let Ok((svc, _)) = self.update_service().await {
            for m in self.inventory_members(&svc).await {
                if let (Some(id), Some(v)) = (m.id, m.version) {
                    out.entry(id).or_insert(v);
                }
            }
        }
        Ok(out)
    }

    pub(super) async fn do_update_firmware(
        &self,
        component: &str,
        image_url: &str,
    ) -> Result<(), BmcError> {
        let (svc, path) = self.update_service().await?;
        let action = svc
            .actions
            .get("#UpdateService.SimpleUpdate")
            .and_then(|a| a["target"].as_str())
            .map(str::to_string)
            .unwrap_or_else(|| {
                format!(
                    "{}/Actions/UpdateService.SimpleUpdate",
                    path.trim_end_matches('/')
                )
            });
        // The inventory member of that name; `BIOS` without one targets
        // the System, as BMCs that flash the BIOS from SimpleUpdate take it.
        let members = self.inventory_members(&svc).await;
        let target = match members.iter().find(|m| m.id.as_deref() == Some(component)) {
            Some(m) => m.odata_id.clone(),
            None if component == BIOS => self.system().await?.0.odata_id,
            None => {
                return Err(BmcError::Unsupported {
                    address: self.address().to_string(),
                    what: format!("firmware component {component} (not in its FirmwareInventory)"),
                });
            }
        };
        // The URI carries its scheme, so no `TransferProtocol` (which the
        // schema deprecates for such URIs and some BMCs refuse beside one).
        let body = json!({
            "ImageURI": image_url,
            "Targets": [target],
        });
        let r = self
            .t
            .send(Method::POST, &action, Some(&body), None)
            .await?;
        match r.location {
            Some(task) => self.follow_task(&task, UPDATE_DEADLINE).await,
            // No task to follow: the BMC says it is done.
            None => Ok(()),
        }
    }

    /// Poll a task (its monitor or the Task resource) until it ends, for
    /// at most `deadline`. A monitor answers 202 while the task runs and
    /// stops doing so when it ends; a Task resource answers 200 with its
    /// state throughout, so only the state tells it ended.
    pub(super) async fn follow_task(&self, uri: &str, deadline: Duration) -> Result<(), BmcError> {
        let until = Instant::now() + deadline;
        loop {
            let r = self.t.get(uri).await?;
            if r.body.is_empty() && r.status != 202 {
                return Ok(());
            }
            let task: Task = if r.body.is_empty() {
                Task::default()
            } else {
                r.json(self.address())?
            };
            match task_outcome(task.task_state.as_deref()) {
                TaskOutcome::Completed => return Ok(()),
                TaskOutcome::Failed(state) => {
                    let detail = task.detail();
                    return Err(BmcError::TaskFailed {
                        address: self.address().to_string(),
                        state,
                        detail,
                    });
                }
                TaskOutcome::Running => {}
            }
            if Instant::now() >= until {
                return Err(BmcError::Timeout {
                    address: self.address().to_string(),
                    after: deadline,
                });
            }
            tokio::time::sleep(self.t.timing.poll_interval).await;
        }
    }
}
