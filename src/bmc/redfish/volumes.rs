//! Storage volumes through Redfish: each Storage member's `Volumes`
//! (name, RAID type, capacity, the WWN its `Identifiers` give), and a new
//! RAID volume POSTed to the first Storage that has a `Volumes` collection,
//! its members picked from that Storage's drives by [`pick_drives`].

use serde::Deserialize;
use serde_json::json;

use super::RedfishBmc;
use super::model::{Collection, Drive, Link};
use crate::api::{DriveHints, VolumeInfo, VolumeSpec};
use crate::bmc::BmcError;

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
struct StorageWithVolumes {
    drives: Vec<Link>,
    volumes: Option<Link>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
struct Volume {
    name: Option<String>,
    #[serde(rename = "RAIDType")]
    raid_type: Option<String>,
    capacity_bytes: Option<u64>,
    identifiers: Vec<Identifier>,
    links: VolumeLinks,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
struct Identifier {
    durable_name: Option<String>,
    durable_name_format: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
struct VolumeLinks {
    drives: Vec<Link>,
}

const GIB: u64 = 1 << 30;

/// How long a volume's POST may take to be answered: a controller may
/// build the volume before it answers (the lab's emulator does).
const CREATE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// The first `hints.count` drives (path, facts), in order, that match every
/// hint set and are not `taken`; `Err` says how many matched.
pub fn pick_drives(
    drives: &[(String, Drive)],
    taken: &[String],
    hints: &DriveHints,
) -> Result<Vec<String>, String> {
    let fits = |d: &Drive| {
        hints
            .media_type
            .as_ref()
            .is_none_or(|m| d.media_type.as_ref() == Some(m))
            && hints
                .model
                .as_ref()
                .is_none_or(|m| d.model.as_ref() == Some(m))
            && hints
                .min_size_gigabytes
                .is_none_or(|g| d.capacity_bytes.unwrap_or(0) >= g.saturating_mul(GIB))
    };
    let found: Vec<String> = drives
        .iter()
        .filter(|(p, d)| !taken.contains(p) && fits(d))
        .map(|(p, _)| p.clone())
        .collect();
    let want = hints.count as usize;
    if found.len() < want {
        return Err(format!(
            "{want} free drives match the hints, the BMC has {}",
            found.len()
        ));
    }
    Ok(found.into_iter().take(want).collect())
}

impl RedfishBmc {
    /// Every Storage member with its path.
    async fn storages(&self) -> Result<Vec<(String, StorageWithVolumes)>, BmcError> {
        let (sys, _) = self.system().await?;
        let link = sys.storage.ok_or_else(|| BmcError::Unsupported {
            address: self.address().to_string(),
            what: "storage volumes (the System links no Storage)".into(),
        })?;
        let (coll, _) = self.t.get_json::<Collection>(&link.odata_id).await?;
        let mut out = Vec::new();
        for m in coll.members {
            let (s, _) = self.t.get_json::<StorageWithVolumes>(&m.odata_id).await?;
            out.push((m.odata_id, s));
        }
        Ok(out)
    }

    async fn volumes_of(&self, s: &StorageWithVolumes) -> Result<Vec<Volume>, BmcError> {
        let Some(link) = &s.volumes else {
            return Ok(Vec::new());
        };
        let (coll, _) = self.t.get_json::<Collection>(&link.odata_id).await?;
        let mut out = Vec::new();
        for m in coll.members {
            let (v, _) = self.t.get_json::<Volume>(&m.odata_id).await?;
            out.push(v);
        }
        Ok(out)
    }

    pub(super) async fn do_volumes(&self) -> Result<Vec<VolumeInfo>, BmcError> {
        let mut out = Vec::new();
        for (_, s) in self.storages().await? {
            for v in self.volumes_of(&s).await? {
                let wwn = v
                    .identifiers
                    .iter()
                    .find(|i| matches!(i.durable_name_format.as_deref(), Some("NAA" | "EUI")))
                    .and_then(|i| i.durable_name.clone());
                out.push(VolumeInfo {
                    name: v.name.unwrap_or_default(),
                    raid_type: v.raid_type,
                    capacity_bytes: v.capacity_bytes,
                    wwn,
                });
            }
        }
        Ok(out)
    }

    pub(super) async fn do_create_volume(&self, spec: &VolumeSpec) -> Result<(), BmcError> {
        let storages = self.storages().await?;
        let Some((_, storage)) = storages.iter().find(|(_, s)| s.volumes.is_some()) else {
            return Err(BmcError::Unsupported {
                address: self.address().to_string(),
                what: "storage volumes (no Storage has a Volumes collection)".into(),
            });
        };
        let Some(volumes) = &storage.volumes else {
            return Ok(());
        };
        let existing = self.volumes_of(storage).await?;
        // A create tried again after its answer was lost (a timeout, a
        // 5xx after the BMC acted) finds the volume made the first time.
        if existing
            .iter()
            .any(|v| v.name.as_deref() == Some(spec.name.as_str()))
        {
            tracing::info!(address = %self.address(), volume = %spec.name, "volume already there");
            return Ok(());
        }
        let taken: Vec<String> = existing
            .into_iter()
            .flat_map(|v| v.links.drives.into_iter().map(|l| l.odata_id))
            .collect();
        let mut drives = Vec::new();
        for l in &storage.drives {
            let (d, _) = self.t.get_json::<Drive>(&l.odata_id).await?;
            drives.push((l.odata_id.clone(), d));
        }
        let members =
            pick_drives(&drives, &taken, &spec.drives).map_err(|detail| BmcError::Unsupported {
                address: self.address().to_string(),
                what: format!("volume {}: {detail}", spec.name),
            })?;
        let mut body = json!({
            "Name": spec.name,
            "RAIDType": spec.raid_type,
            "Links": {"Drives": members.iter().map(|p| json!({"@odata.id": p})).collect::<Vec<_>>()},
        });
        if let Some(g) = spec.size_gigabytes {
            body["CapacityBytes"] = json!(g.saturating_mul(GIB));
        }
        // Once: a 5xx may come after the BMC made the volume, and a retry
        // here would make a second one. The controller tries again later,
        // reading the volumes first (above).
        let r = self
            .t
            .post_once(&volumes.odata_id, &body, CREATE_TIMEOUT, None)
            .await?;
        match (r.status, r.location) {
            (202, Some(task)) => {
                self.follow_task(&task, super::firmware::UPDATE_DEADLINE)
                    .await
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drive(media: &str, gib: u64) -> Drive {
        Drive {
            media_type: Some(media.into()),
            capacity_bytes: Some(gib * GIB),
            model: Some("M".into()),
            ..Default::default()
        }
    }

    #[test]
    fn drives_are_picked_in_order_among_the_free_ones_that_match() {
        let drives: Vec<(String, Drive)> = [
            ("d0", "SSD", 480),
            ("d1", "HDD", 4000),
            ("d2", "SSD", 960),
            ("d3", "SSD", 960),
        ]
        .iter()
        .map(|(p, m, g)| (p.to_string(), drive(m, *g)))
        .collect();
        let hints = DriveHints {
            count: 2,
            media_type: Some("SSD".into()),
            min_size_gigabytes: Some(500),
            ..Default::default()
        };
        assert_eq!(pick_drives(&drives, &[], &hints).unwrap(), ["d2", "d3"]);
        let e = pick_drives(&drives, &["d2".into()], &hints).unwrap_err();
        assert_eq!(e, "2 free drives match the hints, the BMC has 1");
        let any = DriveHints {
            count: 4,
            ..Default::default()
        };
        assert_eq!(pick_drives(&drives, &[], &any).unwrap().len(), 4);
    }
}
