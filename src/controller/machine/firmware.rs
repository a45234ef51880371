//! Firmware updates around a network boot (part of `decide`, pure): before
//! the power-on of an install or reimage boot, the versions the BMC
//! reports are compared with the class's `firmware`, and each component on
//! another version is updated (the executor serves the image from the
//! image cache and follows the BMC's task to its end). The marker follows
//! the updates: one that fails stops the plan and is tried again, and the
//! boot does not start on the old firmware. After the install the
//! versions are read again (an update may only apply at the reboot, as a
//! BIOS update does), and a component still on another version fails the
//! boot, named, as any failed boot (counted, backed off, retried).

use std::collections::BTreeMap;

use super::decide::{Planner, again};
use super::plan::{BootOutcome, ClassObserved, ClassView, Mark, Step};
use crate::api::{BootRecord, FirmwareImage, MachinePhase};

/// The last error's reason when a component is not on its version after
/// the install.
pub const NOT_UPDATED: &str = "FirmwareNotUpdated";
/// The last error's reason when the BMC reports no such component.
pub const UNKNOWN_COMPONENT: &str = "FirmwareComponentUnknown";

impl Planner<'_> {
    /// The versions read at or after `since`.
    fn firmware_read_since(&self, since: jiff::Timestamp) -> Option<&BTreeMap<String, String>> {
        self.st
            .firmware
            .as_ref()
            .filter(|f| f.read_at >= since)
            .map(|f| &f.versions)
    }

    /// Before the power-on of boot `b`: read the versions (once per boot),
    /// then update each component on another version, the marker after
    /// them. `None`: go on (nothing to update, or already done).
    pub(super) fn firmware_before_boot(&mut self, b: &BootRecord) -> Option<Step> {
        let ClassObserved::Present(c) = &self.o.class else {
            return None;
        };
        if c.firmware.is_empty() || self.progress().firmware_updated_for.as_ref() == Some(&b.id) {
            return None;
        }
        let Some(have) = self.firmware_read_since(b.minted_at) else {
            self.push(Step::ReadFirmware);
            return Some(again());
        };
        let unknown: Vec<String> = c
            .firmware
            .iter()
            .filter(|f| !have.contains_key(&f.component))
            .map(|f| f.component.clone())
            .collect();
        if !unknown.is_empty() {
            let known: Vec<&str> = have.keys().map(String::as_str).collect();
            let msg = format!(
                "the BMC reports no firmware component {} (it reports: {})",
                unknown.join(", "),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            );
            return Some(self.fail_boot(BootOutcome::Abandoned, UNKNOWN_COMPONENT, msg));
        }
        let stale: Vec<FirmwareImage> = c
            .firmware
            .iter()
            .filter(|f| have.get(&f.component) != Some(&f.version))
            .cloned()
            .collect();
        for f in stale {
            self.push(Step::UpdateFirmware(f));
        }
        self.set_progress(Mark::FirmwareUpdatedFor(b.id.clone()));
        Some(again())
    }

    /// After boot `b` installed: read the versions again and check each
    /// component the class names. `None`: all on their versions.
    pub(super) fn firmware_after_install(
        &mut self,
        class: &ClassView,
        b: &BootRecord,
    ) -> Option<Step> {
        if class.firmware.is_empty() {
            return None;
        }
        let since = b.completed_at.unwrap_or(b.minted_at);
        let Some(have) = self.firmware_read_since(since) else {
            self.push(Step::ReadFirmware);
            return Some(again());
        };
        let missed: Vec<String> = class
            .firmware
            .iter()
            .filter(|f| have.get(&f.component) != Some(&f.version))
            .map(|f| {
                let got = have.get(&f.component).map_or("nothing", String::as_str);
                format!(
                    "firmware {}: wanted {}, the BMC reports {got}",
                    f.component, f.version
                )
            })
            .collect();
        if missed.is_empty() {
            return None;
        }
        let msg = format!(
            "{} after the install's reboot; the update did not apply",
            missed.join("; ")
        );
        self.error(NOT_UPDATED, msg);
        // A retry installs again: this boot no longer counts for the run.
        self.set_progress(Mark::PreviousBoot(b.id.clone()));
        let from = if self.phase() == MachinePhase::Reimaging {
            MachinePhase::Reimaging
        } else {
            MachinePhase::Provisioning
        };
        Some(self.back_off(from))
    }
}
