//! BIOS settings around a network boot (part of `decide`, pure): before
//! the power-on of an install or reimage boot, the attributes the class
//! wants are compared with a fresh read and what differs is written to the
//! BMC's pending settings, which that boot applies; after the install they
//! are read again, and an attribute the BMC did not apply fails the boot,
//! named, as any failed boot (counted, backed off, retried).

use std::collections::BTreeMap;

use super::decide::{Planner, again};
use super::plan::{ClassObserved, ClassView, Mark, Step};
use crate::api::{BootRecord, MachinePhase};

/// The last error's reason when the BMC did not apply a BIOS attribute.
pub const NOT_APPLIED: &str = "BiosSettingNotApplied";

impl Planner<'_> {
    /// The BIOS read, when it was read at or after `since`.
    fn bios_read_since(&self, since: jiff::Timestamp) -> Option<&BTreeMap<String, String>> {
        self.st
            .bios
            .as_ref()
            .filter(|b| b.read_at >= since)
            .map(|b| &b.attributes)
    }

    /// Before the power-on of boot `b`: read the attributes (once per
    /// boot), then write what differs, its marker first. `None`: go on
    /// and power on (in the same plan).
    pub(super) fn bios_before_boot(&mut self, b: &BootRecord) -> Option<Step> {
        let ClassObserved::Present(c) = &self.o.class else {
            return None;
        };
        if c.bios.is_empty() || self.progress().bios_written_for.as_ref() == Some(&b.id) {
            return None;
        }
        let Some(have) = self.bios_read_since(b.minted_at) else {
            self.push(Step::ReadBios);
            return Some(again());
        };
        let differ: BTreeMap<String, String> = c
            .bios
            .iter()
            .filter(|(k, v)| have.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        self.set_progress(Mark::BiosWrittenFor(b.id.clone()));
        if !differ.is_empty() {
            self.push(Step::WriteBios(differ));
        }
        None
    }

    /// After boot `b` installed: read the attributes again (the boot
    /// applied the pending ones) and check each the class wants. `None`:
    /// all applied (or none wanted).
    pub(super) fn bios_after_install(&mut self, class: &ClassView, b: &BootRecord) -> Option<Step> {
        if class.bios.is_empty() {
            return None;
        }
        let since = b.completed_at.unwrap_or(b.minted_at);
        let Some(have) = self.bios_read_since(since) else {
            self.push(Step::ReadBios);
            return Some(again());
        };
        let missed: Vec<String> = class
            .bios
            .iter()
            .filter(|(k, v)| have.get(*k) != Some(*v))
            .map(|(k, v)| {
                let got = have.get(k).map_or("nothing", String::as_str);
                format!("BIOS attribute {k}: wanted {v}, the BMC reports {got}")
            })
            .collect();
        if missed.is_empty() {
            return None;
        }
        let msg = format!(
            "{} after the install's reboot; the BMC did not apply it",
            missed.join("; ")
        );
        self.error(NOT_APPLIED, msg);
        // A retry installs again: this boot no longer counts for the run.
        self.set_progress(Mark::PreviousBoot(b.id.clone()));
        let from = self.phase();
        let from = if from == MachinePhase::Reimaging {
            MachinePhase::Reimaging
        } else {
            MachinePhase::Provisioning
        };
        Some(self.back_off(from))
    }
}
