//! Stories: provision a server, roll a kubelet upgrade through a
//! MachineSet that reimages it in place, remediate it, retire it, on real
//! nodes of the virtual rack (tests/common/lab_nodes.rs: UEFI QEMU VMs,
//! their Redfish BMC from sushy-tools' libvirt driver, the Debian node
//! image deploy/node-image/ builds, the lab's kubeadm-made cluster). A real
//! node costs minutes of software emulation per install, so two servers
//! live through the stories, in order, in one test; `vm1` is the one each
//! story follows, `vm2` the set's other member:
//!
//! - `provision_a_server` (provision.rs): declared with its BMC and
//!   network and claimed by the set `lab-nodes` (the class, kubelet
//!   v1.34.3), the server is installed by real Ignition and
//!   coreos-installer and joins the cluster; the Machine is Ready only once
//!   its Node is.
//! - `roll_a_kubelet_upgrade` (roll.rs): the class moves to kubelet
//!   v1.34.4 and the set rolls it one server at a time, gated on the Node
//!   Ready again.
//! - `reimage_in_place` (reimage.rs), vm1 as the roll's first batch: the
//!   class change drains the Node through the eviction API (a budget
//!   refuses first), reinstalls the same
//!   server keeping its `data` partition, and the Node rejoins; the new
//!   class also sets a BIOS attribute and names the BIOS firmware, written
//!   and updated (`SimpleUpdate`) through sushy-tools before the
//!   reinstall's boot and both read back after it.
//! - `remediate_an_unhealthy_node` (remediate.rs): once `lab-nodes` is
//!   deleted, a MachineSet with a remediation policy adopts both servers
//!   as they are; vm1, suspended through libvirt, goes NotReady, the set
//!   has it power-cycled through its BMC, and it comes back from its disk
//!   without a reinstall.
//! - `retire_a_server` (retire.rs): deleting the Machine drains and deletes
//!   the Node, network-boots the live system where `metalherd-wipe.sh`
//!   clears the disk (the class wipes on deprovision), powers the server
//!   off, releases its address, and the Machine is gone.
//! - `create_a_raid_volume` (raid.rs): the class creates a RAID volume on
//!   each server through sushy-tools' Redfish `Volumes` before its first
//!   install; vm2's hints name it, and both of vm2's installs land on the
//!   disk the lab's RAID controller made for it.
//! - `select_a_disk_by_hints` (hints.rs): the VM has a second, smaller
//!   disk, which the installer's default (the smallest disk) would pick;
//!   each step names `/dev/vda` another way (serial number for the install,
//!   minimum size for the reinstall, device name for the wipe), and the
//!   decoy disk ends as it began.
//!
//! The simulated-rack walk of the same life is
//! src/controller/machine/tests/walk.rs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
#[path = "provision_reimage_and_retire_a_server/hints.rs"]
mod hints;
#[path = "provision_reimage_and_retire_a_server/provision.rs"]
mod provision;
#[path = "provision_reimage_and_retire_a_server/raid.rs"]
mod raid;
#[path = "provision_reimage_and_retire_a_server/reimage.rs"]
mod reimage;
#[path = "provision_reimage_and_retire_a_server/remediate.rs"]
mod remediate;
#[path = "provision_reimage_and_retire_a_server/retire.rs"]
mod retire;
#[path = "provision_reimage_and_retire_a_server/roll.rs"]
mod roll;

use std::time::Instant;

use common::control_plane::PREVIOUS_KUBE_VERSION;
use common::lab::{LAB_LOCK, Lab};
use common::lab_nodes::NODE_READY_TIMEOUT;

/// The class `lab-node` as every story declares it: it wipes the disk when
/// the server is retired (the wipe clears everything; a reimage keeps the
/// `data` partition) and creates the RAID volume `os` (raid.rs).
pub fn wipe() -> (&'static str, String) {
    (
        "LAB_NODE_CLASS_EXTRA",
        format!("  wipeOnDeprovision: true\n{}", raid::VOLUME),
    )
}

/// [`wipe`], a BIOS attribute and the BIOS firmware, from the reimage on:
/// the reimage writes the attribute and updates the firmware through
/// sushy-tools before its boot (sushy's libvirt driver moves BiosVersion
/// from 1.0.0 to 1.1.0 on any SimpleUpdate) and reads both back after.
/// The firmware image is a file in the run directory, pinned by sha256.
pub fn tuned(lab: &Lab) -> (&'static str, String) {
    use sha2::Digest;
    let image = b"BiosVersion=1.1.0\n";
    let path = lab.run.join("bios-1.1.0.img");
    std::fs::write(&path, image).unwrap();
    let sha = hex::encode(sha2::Sha256::digest(image));
    (
        "LAB_NODE_CLASS_EXTRA",
        format!(
            "  wipeOnDeprovision: true\n{}\n  biosAttributes:\n    ProcTurboMode: Disabled\n  \
             firmware:\n  - component: BIOS\n    version: \"1.1.0\"\n    image:\n      \
             url: file://{}\n      sha256: {sha}",
            raid::VOLUME,
            path.display()
        ),
    )
}

#[test]
fn provision_reimage_and_retire_a_server() {
    let _guard = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let t = Instant::now();
    let lab = Lab::up_nodes_with_decoy(roll::NODES);
    let wipe = wipe();
    lab.declare(&[
        ("LAB_NODE_SET", "1"),
        ("LAB_NODE_KUBE_VERSION", PREVIOUS_KUBE_VERSION),
        (wipe.0, wipe.1.as_str()),
        hints::BY_SERIAL,
        raid::VM2_ON_VOLUME,
    ]);
    let mut seen = Vec::new();
    lab.wait_phase("vm1", "Ready", NODE_READY_TIMEOUT, &mut seen);
    eprintln!("lab: vm1 Ready after {:?}", t.elapsed());
    roll::first_rollout(&lab);
    eprintln!("lab: both servers Ready after {:?}", t.elapsed());
    raid::create_a_raid_volume(&lab);

    let s = Instant::now();
    provision::provision_a_server(&lab, &seen);
    eprintln!("lab: provision_a_server checked in {:?}", s.elapsed());
    let s = Instant::now();
    roll::roll_a_kubelet_upgrade(&lab);
    eprintln!("lab: reimage_in_place and the roll took {:?}", s.elapsed());
    raid::reinstalled_on_the_volume(&lab);
    let s = Instant::now();
    remediate::remediate_an_unhealthy_node(&lab);
    eprintln!("lab: remediate_an_unhealthy_node took {:?}", s.elapsed());
    let s = Instant::now();
    retire::retire_a_server(&lab);
    eprintln!("lab: retire_a_server took {:?}", s.elapsed());
    hints::select_a_disk_by_hints(&lab);
    eprintln!("lab: the stories on two servers took {:?}", t.elapsed());
}
