//! Story: create a RAID volume before an install, on the simulated rack
//! (tests/common/sim_rack.rs; its Redfish BMCs have a storage controller
//! whose free SSDs can form volumes, each given an NAA durable name).
//!
//! - A class describes a RAID1 volume `os` of two SSDs; a Machine of that
//!   class names it in `rootDeviceHints.volume`. Before the install's
//!   power-on metalherd creates the volume through the BMC's `Volumes`
//!   collection (from the two SSDs its drive hints pick), reads it
//!   back into `status.volumes`, and the install config it serves tells
//!   the installer to write the disk with the volume's WWN.
//!   rv1's BMC answers its first volume POST with a 500 after making the
//!   volume: metalherd does not POST again at once, and its next try
//!   finds the volume by name and makes no second one.
//! - A reimage finds the volume by name and creates nothing.
//! - A BMC with too few free drives: the boot stops before its power-on,
//!   the Machine's last error says how many drives matched.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::sim_rack::{MACHINES, Story, story};
use serde_json::json;

const CLASSES: &str = "/apis/metalherd.dev/v1alpha1/namespaces/default/machineclasses";

/// Give machine `name` the class `raid` and the hint naming volume `os`.
async fn declare_on_the_volume(s: &Story, name: &str) {
    s.edit(format!("{MACHINES}/{name}"), |m| {
        m["spec"]["classRef"] = json!({"name": "raid"});
        m["spec"]["rootDeviceHints"] = json!({"volume": "os"});
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_a_raid_volume_on_the_simulated_rack() {
    let s = story("rv", 28, &[("raid", "1.0", &[])]).await;
    s.edit(format!("{CLASSES}/raid"), |c| {
        c["spec"]["volumes"] = json!([{"name": "os", "raidType": "RAID1",
            "drives": {"count": 2, "mediaType": "SSD", "model": "SimRAID"},
            "sizeGigabytes": 400}]);
    })
    .await;

    // rv1: two free SSDs besides its boot drive.
    {
        let mut sim = s.rack.machines[0].bmc.sim.lock().unwrap();
        sim.opts.raid_drives = 2;
        sim.opts.volume_answers_lost = 1;
    }
    declare_on_the_volume(&s, "rv1").await;
    let m = s
        .until("rv1", "Ready", |m| m["status"]["phase"] == "Ready")
        .await;
    let (vols, posts) = {
        let sim = s.rack.machines[0].bmc.sim.lock().unwrap();
        (sim.volumes.clone(), sim.counters.volume_posts)
    };
    assert_eq!(vols.len(), 1, "{vols:?}");
    assert_eq!(posts, 1, "the lost answer was followed by a second POST");
    assert_eq!(vols[0]["Name"], "os");
    assert_eq!(vols[0]["RAIDType"], "RAID1");
    assert_eq!(vols[0]["CapacityBytes"], 400u64 << 30);
    let members: Vec<&str> = vols[0]["Links"]["Drives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["@odata.id"].as_str().unwrap())
        .collect();
    assert_eq!(
        members,
        [
            "/redfish/v1/Systems/1/Storage/1/Drives/R0",
            "/redfish/v1/Systems/1/Storage/1/Drives/R1"
        ]
    );
    let read = &m["status"]["volumes"]["volumes"];
    assert_eq!(read[0]["name"], "os", "{m:#}");
    let wwn = read[0]["wwn"].as_str().unwrap().to_string();
    assert_eq!(wwn, vols[0]["Identifiers"][0]["DurableName"]);
    // The installer is told to write that disk (install.env, percent-encoded).
    let config = s.rack.machines[0].ignition.lock().unwrap().clone();
    assert!(
        config.contains(&format!("HINT_WWN%3D%22{wwn}%22")),
        "no HINT_WWN={wwn} in the install config: {config}"
    );

    // A reimage finds the volume and creates nothing.
    let before = m["status"]["provisionedRevision"].clone();
    s.edit_class("raid", "1.1").await;
    s.until("rv1", "reimaged", |m| {
        m["status"]["phase"] == "Ready" && m["status"]["provisionedRevision"] != before
    })
    .await;
    {
        let sim = s.rack.machines[0].bmc.sim.lock().unwrap();
        assert_eq!(sim.volumes.len(), 1);
        assert_eq!(sim.counters.volume_posts, 1);
    }
    assert_eq!(s.rack.boots()[0], 2);

    // rv2 has one free SSD: the boot stops before its power-on, named.
    s.rack.machines[1].bmc.sim.lock().unwrap().opts.raid_drives = 1;
    declare_on_the_volume(&s, "rv2").await;
    let m = s
        .until("rv2", "a volume error", |m| {
            m["status"]["lastError"]["reason"] == "BmcUnsupported"
        })
        .await;
    let msg = m["status"]["lastError"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("CreateVolume(os): ")
            && msg.ends_with("volume os: 2 free drives match the hints, the BMC has 1"),
        "{msg}"
    );
    let sim = s.rack.machines[1].bmc.sim.lock().unwrap();
    assert_eq!(sim.counters.power_ons, 0);
    assert!(sim.volumes.is_empty());
}
