//! Story: create a RAID volume before an install, the install landing on
//! it. The class declares a RAID0 volume `os` of 5 GiB on one drive; vm2's
//! `rootDeviceHints` name that volume (vm1's name `/dev/vda` by other
//! means, hints.rs). Before each server's first install metalherd reads
//! the volumes through sushy-tools' Redfish `Storage` (none), POSTs `os` to
//! the controller's `Volumes` and reads it back; sushy-tools reports no
//! WWN for it, so the install config names the disk by the volume's exact
//! size. The lab's RAID controller (lib.sh's `lab_raid_up`) attached the
//! volume's disk to the VM; vm2's installer writes the OS there, the VM
//! boots from it and joins, and its own disks (`data` on vda, the decoy)
//! are untouched. The roll's reinstall of vm2 creates nothing and lands on
//! the volume again.

use crate::common::lab::Lab;
use crate::common::lab_disk;
use crate::common::lab_nodes::{NODE_DATA_MARKER, NODE_DATA_START};

/// vm2's hints, at every declaration: the volume `os`.
pub const VM2_ON_VOLUME: (&str, &str) = ("LAB_HINTS_VM2", "{volume: os}");

/// The class's volume (appended to its extra lines).
pub const VOLUME: &str = "  volumes:\n  - name: os\n    raidType: RAID0\n    drives: {count: 1}\n    \
                          sizeGigabytes: 5";

const VOLUME_BYTES: u64 = 5 << 30;

/// The disks the installs on VM `i`'s console wrote, in order.
fn install_targets(lab: &Lab, i: usize) -> Vec<String> {
    lab.console(i)
        .lines()
        .filter_map(|l| l.split_once("metalherd-install: installing "))
        .filter_map(|(_, rest)| rest.split_once(" to "))
        .filter_map(|(_, t)| {
            t.split(|c: char| c.is_whitespace() || c == '[')
                .next()
                .map(str::to_string)
        })
        .collect()
}

/// After the first rollout: vm2's OS is on its volume.
pub fn create_a_raid_volume(lab: &Lab) {
    // Each server got its volume, read back by metalherd (no WWN).
    for (i, name) in [(1, "vm1"), (2, "vm2")] {
        let m = lab.machine(name).unwrap();
        let v = &m["status"]["volumes"]["volumes"];
        assert_eq!(v[0]["name"], "os", "{name}: {m:#}");
        assert_eq!(v[0]["capacityBytes"], VOLUME_BYTES, "{name}: {v}");
        assert!(v[0].get("wwn").is_none(), "{name}: {v}");
        let disks = lab.raid_disks(i);
        assert_eq!(disks.len(), 1, "{name}: {disks:?}");
    }
    assert_eq!(
        lab.bmc_calls_accepted("POST", "/Storage/1/Volumes"),
        2,
        "one volume POST accepted per server"
    );
    // vm2's install went to neither of its own disks but to the volume's.
    let targets = install_targets(lab, 2);
    assert_eq!(targets.len(), 1, "{targets:?}");
    assert!(
        targets[0] != "/dev/vda" && targets[0] != "/dev/vdb",
        "{targets:?}"
    );
    let volume = &lab.raid_disks(2)[0];
    let parts = lab_disk::partitions(volume).expect("vm2's volume has no partition table");
    let names: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
    assert!(names.contains(&"root"), "{names:?}");
    own_disks_untouched(lab);
    let log = std::fs::read_to_string(lab.run.join("raid.log")).unwrap_or_default();
    eprintln!("lab: vm2 installed on its volume ({}):\n{log}", targets[0]);
}

/// After the roll: vm2's reinstall landed on the volume again, and no
/// volume was created for it.
pub fn reinstalled_on_the_volume(lab: &Lab) {
    let targets = install_targets(lab, 2);
    assert_eq!(targets.len(), 2, "{targets:?}");
    assert_eq!(targets[0], targets[1], "{targets:?}");
    assert_eq!(lab.bmc_calls_accepted("POST", "/Storage/1/Volumes"), 2);
    assert_eq!(lab.raid_disks(2).len(), 1);
    own_disks_untouched(lab);
}

/// vm2's `/dev/vda` holds only its `data` partition and marker, its decoy
/// only `decoy`.
fn own_disks_untouched(lab: &Lab) {
    let vda = lab.run.join("vm2.img");
    let parts = lab_disk::partitions(&vda).expect("vm2's vda lost its table");
    let names: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["data"], "{parts:?}");
    assert_eq!(
        lab_disk::first_line(&vda, NODE_DATA_START),
        NODE_DATA_MARKER
    );
    let decoy = lab_disk::partitions(&lab.decoy(2)).expect("vm2's decoy lost its table");
    let names: Vec<&str> = decoy.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["decoy"], "{decoy:?}");
}
