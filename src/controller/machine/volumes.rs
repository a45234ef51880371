//! RAID volumes before a network boot (part of `decide`, pure): before the
//! power-on of an install or reimage boot, the volumes the BMC reports are
//! compared with the class's `volumes` by name, each missing one is
//! created, and the volumes are read again so the install can find the
//! disk `rootDeviceHints.volume` names by its WWN. The marker follows the
//! creations: one that fails stops the plan and is tried again.

use super::decide::{Planner, again};
use super::plan::{ClassObserved, Mark, Step};
use crate::api::{BootRecord, VolumeInfo, VolumeSpec};

impl Planner<'_> {
    /// The volumes read at or after `since`.
    fn volumes_read_since(&self, since: jiff::Timestamp) -> Option<&[VolumeInfo]> {
        self.st
            .volumes
            .as_ref()
            .filter(|v| v.read_at >= since)
            .map(|v| v.volumes.as_slice())
    }

    /// Before the power-on of boot `b`: read the volumes (once per boot),
    /// then create the missing ones and read again, the marker after
    /// them. `None`: go on (none wanted, or already done).
    pub(super) fn volumes_before_boot(&mut self, b: &BootRecord) -> Option<Step> {
        let ClassObserved::Present(c) = &self.o.class else {
            return None;
        };
        if c.volumes.is_empty() || self.progress().volumes_created_for.as_ref() == Some(&b.id) {
            return None;
        }
        let Some(have) = self.volumes_read_since(b.minted_at) else {
            self.push(Step::ReadVolumes);
            return Some(again());
        };
        let missing: Vec<VolumeSpec> = c
            .volumes
            .iter()
            .filter(|v| !have.iter().any(|h| h.name == v.name))
            .cloned()
            .collect();
        let created = !missing.is_empty();
        for v in missing {
            self.push(Step::CreateVolume(v));
        }
        if created {
            self.push(Step::ReadVolumes);
        }
        self.set_progress(Mark::VolumesCreatedFor(b.id.clone()));
        Some(again())
    }
}
