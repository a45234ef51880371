//! Day-two features a fleet needs from a Redfish BMC, read only: BIOS
//! attributes (readable, and where changes go), the firmware update
//! service (`UpdateService.SimpleUpdate`) and storage volumes (RAID).
//! Each is a check that passes, or says the BMC lacks it (a linked
//! resource the BMC cannot serve counts as lacking it, with its answer);
//! nothing is written.

use serde_json::Value;

use super::{Report, Status, check};
use crate::bmc::Bmc;
use crate::bmc::redfish::RedfishBmc;

/// The `@odata.id` of a link member.
fn link<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v[key]["@odata.id"].as_str().filter(|s| !s.is_empty())
}

pub async fn run(bmc: &RedfishBmc, system: &Value, report: &mut Report) {
    // BIOS: readable through the driver the controller uses, and the
    // settings object changes go to.
    match bmc.bios().await {
        Ok(attrs) => {
            let settings = match link(system, "Bios") {
                Some(p) => bmc.get_value(p).await.ok().and_then(|b| {
                    b["@Redfish.Settings"]["SettingsObject"]["@odata.id"]
                        .as_str()
                        .map(str::to_string)
                }),
                None => None,
            };
            let target = settings.map_or_else(
                || "no settings object advertised: changes go to Bios/Settings".to_string(),
                |p| format!("changes go to {p}"),
            );
            report.push(check(
                "bios",
                Status::Pass,
                None,
                format!("{} attributes readable; {target}", attrs.len()),
            ));
        }
        Err(e) => report.push(check("bios", Status::NotSupported, None, e.to_string())),
    }
    // Firmware: the update service and its SimpleUpdate action.
    let update = match bmc.get_value("/redfish/v1/").await {
        Ok(root) => match link(&root, "UpdateService") {
            Some(p) => match bmc.get_value(p).await {
                Ok(svc) => match svc["Actions"]["#UpdateService.SimpleUpdate"]["target"].as_str() {
                    Some(t) => (Status::Pass, format!("SimpleUpdate at {t}")),
                    None => (
                        Status::NotSupported,
                        "the UpdateService offers no SimpleUpdate action".to_string(),
                    ),
                },
                Err(e) => (
                    Status::NotSupported,
                    format!("the UpdateService is linked but unreadable: {e}"),
                ),
            },
            None => (
                Status::NotSupported,
                "the service root links no UpdateService".to_string(),
            ),
        },
        Err(e) => (Status::Fail, e.to_string()),
    };
    report.push(check("simple-update", update.0, None, update.1));
    // RAID: a Storage member with a Volumes collection.
    let volumes = match link(system, "Storage") {
        None => (
            Status::NotSupported,
            "the System links no Storage".to_string(),
        ),
        Some(p) => match bmc.get_value(p).await {
            Err(e) => (
                Status::NotSupported,
                format!("Storage is linked but unreadable: {e}"),
            ),
            Ok(coll) => {
                let mut found = None;
                for m in coll["Members"].as_array().into_iter().flatten() {
                    let Some(mp) = m["@odata.id"].as_str() else {
                        continue;
                    };
                    if let Ok(st) = bmc.get_value(mp).await
                        && let Some(v) = link(&st, "Volumes")
                    {
                        found = Some(v.to_string());
                        break;
                    }
                }
                match found {
                    Some(v) => (Status::Pass, format!("volumes at {v}")),
                    None => (
                        Status::NotSupported,
                        "no Storage member has a Volumes collection".to_string(),
                    ),
                }
            }
        },
    };
    report.push(check("volumes", volumes.0, None, volumes.1));
}
