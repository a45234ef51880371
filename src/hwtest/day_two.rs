//! Day-two features a fleet needs from a Redfish BMC, read only: BIOS
//! attributes (readable, and where changes go), the firmware update
//! service (`UpdateService.SimpleUpdate`) and storage volumes (RAID).
//! Each is a check that passes, or says the BMC lacks it (a linked
//! resource the BMC cannot serve counts as lacking it, with its answer);
//! nothing is written. Only with `allow_power_actions`, [`bios_applied`]
//! writes one attribute, power-cycles and reads it back, then restores it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Options, Progress, Report, Status, check, secs};
use crate::bmc::redfish::RedfishBmc;
use crate::bmc::{Bmc, BmcError, PowerAction, PowerState};

/// How long a written attribute may take to show after the power cycle
/// (a real server applies it during POST, minutes after power-on).
const APPLY_WAIT: Duration = Duration::from_secs(900);
const APPLY_POLL: Duration = Duration::from_secs(5);

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

/// Write `value` to BIOS attribute `name` (pending, as `Bios/Settings`
/// holds it), power-cycle, and read the attribute until it shows `value`
/// or [`APPLY_WAIT`] passes: what it read last.
async fn write_and_cycle(bmc: &RedfishBmc, name: &str, value: &str) -> Result<String, BmcError> {
    let one = BTreeMap::from([(name.to_string(), value.to_string())]);
    bmc.set_bios(&one).await?;
    bmc.power(PowerAction::Cycle).await?;
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < APPLY_WAIT {
        if bmc.power_state().await.ok() == Some(PowerState::On)
            && let Ok(attrs) = bmc.bios().await
        {
            last = attrs.get(name).cloned().unwrap_or_default();
            if last == value {
                break;
            }
        }
        tokio::time::sleep(APPLY_POLL).await;
    }
    Ok(last)
}

/// The attribute `bios-applied` writes: (name, value now, value to write).
/// The one the operator named (`Fail` when the BMC lacks it, `Skipped`
/// when it already reads that value), else the first that reads `Enabled`
/// or `Disabled`, flipped (`Skipped` when none does).
fn pick_attribute(
    attrs: &BTreeMap<String, String>,
    wanted: Option<&(String, String)>,
) -> Result<(String, String, String), (Status, String)> {
    if let Some((name, value)) = wanted {
        return match attrs.get(name) {
            None => Err((
                Status::Fail,
                format!("the BMC has no BIOS attribute {name} (--bios-attribute)"),
            )),
            Some(old) if old == value => Err((
                Status::Skipped,
                format!("{name} already reads {value}: nothing to apply"),
            )),
            Some(old) => Ok((name.clone(), old.clone(), value.clone())),
        };
    }
    let Some((name, old)) = attrs
        .iter()
        .find(|(_, v)| v.as_str() == "Enabled" || v.as_str() == "Disabled")
    else {
        return Err((
            Status::Skipped,
            "no attribute reads Enabled or Disabled: nothing known safe to flip (--bios-attribute names one)".into(),
        ));
    };
    let new = if old == "Enabled" {
        "Disabled"
    } else {
        "Enabled"
    };
    Ok((name.clone(), old.clone(), new.to_string()))
}

/// BIOS settings applied at a reboot: the attribute [`pick_attribute`]
/// chooses is written through the settings object, the server
/// power-cycled and the attribute read back; then the old value is written
/// and applied the same way. Skipped without power actions.
pub async fn bios_applied(
    opts: &Options,
    bmc: &RedfishBmc,
    report: &mut Report,
    progress: Progress<'_>,
) {
    const NAME: &str = "bios-applied";
    if !opts.allow_power_actions {
        let why = "writes a BIOS attribute and power-cycles: needs --allow-power-actions";
        report.push(check(NAME, Status::Skipped, None, why));
        return;
    }
    let attrs = match bmc.bios().await {
        Ok(a) => a,
        Err(e) => {
            report.push(check(NAME, Status::NotSupported, None, e.to_string()));
            return;
        }
    };
    let (name, old, new) = match pick_attribute(&attrs, opts.bios_attribute.as_ref()) {
        Ok(p) => p,
        Err((status, why)) => {
            report.push(check(NAME, status, None, why));
            return;
        }
    };
    let (name, old, new) = (name.as_str(), old.as_str(), new.as_str());
    progress(&format!(
        "{NAME}: {name} {old} -> {new}, power cycle, read back; then back to {old}"
    ));
    let start = Instant::now();
    let applied = write_and_cycle(bmc, name, new).await;
    // Put it back whatever happened.
    let restored = write_and_cycle(bmc, name, old).await;
    let took = secs(start.elapsed());
    let (status, detail) = match (applied, restored) {
        (Err(e), _) | (_, Err(e)) => (Status::Fail, format!("{name}: {e}")),
        (Ok(got), _) if got != new => (
            Status::Fail,
            format!("{name}: wrote {new}, read {got:?} after the power cycle"),
        ),
        (Ok(_), Ok(back)) if back != old => (
            Status::Fail,
            format!(
                "{name}: {new} applied, but restoring {old} read {back:?} after the power cycle"
            ),
        ),
        (Ok(_), Ok(_)) => (
            Status::Pass,
            format!("{name}: {old} -> {new} applied at the power cycle, and back to {old}"),
        ),
    };
    report.push(check(NAME, status, took, detail));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs() -> BTreeMap<String, String> {
        [
            ("BootMode", "Uefi"),
            ("ProcTurboMode", "Enabled"),
            ("SriovGlobalEnable", "Disabled"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn the_first_enabled_or_disabled_attribute_is_flipped_unless_one_is_named() {
        assert_eq!(
            pick_attribute(&attrs(), None),
            Ok(("ProcTurboMode".into(), "Enabled".into(), "Disabled".into()))
        );
        let named = ("BootMode".to_string(), "Bios".to_string());
        assert_eq!(
            pick_attribute(&attrs(), Some(&named)),
            Ok(("BootMode".into(), "Uefi".into(), "Bios".into()))
        );
    }

    #[test]
    fn a_named_attribute_the_bmc_lacks_fails_and_one_already_set_is_skipped() {
        let missing = ("NoSuch".to_string(), "On".to_string());
        let (status, why) = pick_attribute(&attrs(), Some(&missing)).unwrap_err();
        assert_eq!(status, Status::Fail);
        assert!(why.contains("no BIOS attribute NoSuch"), "{why}");
        let same = ("SriovGlobalEnable".to_string(), "Disabled".to_string());
        let (status, why) = pick_attribute(&attrs(), Some(&same)).unwrap_err();
        assert_eq!(status, Status::Skipped);
        assert!(why.contains("already reads Disabled"), "{why}");
        let none = BTreeMap::from([("BootMode".to_string(), "Uefi".to_string())]);
        assert_eq!(pick_attribute(&none, None).unwrap_err().0, Status::Skipped);
    }
}
