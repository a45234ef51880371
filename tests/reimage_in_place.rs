//! Story: reimage in place. Changing the class's image version reimages
//! the same VM: same address and name, the install path served a second
//! time, status shows the new revision, the OS partition is rewritten and
//! the data partition the class preserves keeps what the node wrote there
//! before the reimage.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::lab::boot_steps;
use common::lab_disk;

#[test]
fn reimage_in_place() {
    let (_lock, lab, _) = common::lab::one_ready_vm();
    let before = lab.machine("vm1").unwrap();
    let rev1 = before["status"]["provisionedRevision"]
        .as_str()
        .unwrap()
        .to_string();
    let boot1 = before["status"]["boot"]["id"].as_str().unwrap().to_string();
    let uid = before["metadata"]["uid"].clone();
    let installs_before = boot_steps(&before)
        .iter()
        .filter(|s| *s == "Installed")
        .count();

    // The installer wrote ROOT for this boot, and the node, up from the
    // disk, marked the DATA partition before it called home (so before
    // Ready). Both were synced by the guest: the image shows them.
    let img = lab.disk(1);
    let root = lab_disk::partition(&img, "ROOT").expect("no ROOT partition");
    let data = lab_disk::partition(&img, "DATA").expect("no DATA partition");
    assert_eq!(
        lab_disk::first_line(&img, root.start),
        format!("MHROOT boot={boot1} version=4230.2.3")
    );
    let marker = format!("MHDATA written-under-boot={boot1}");
    assert_eq!(lab_disk::first_line(&img, data.start), marker);

    // A new image version in the class: a new desired revision.
    lab.declare(&[("LAB_IMAGE_VERSION", "4230.2.4")]);
    let mut seen2 = Vec::new();
    // The reimage starts…
    lab.wait_phase("vm1", "Reimaging", Duration::from_secs(300), &mut seen2);
    // …and ends Ready again on the same server.
    lab.wait_phase("vm1", "Ready", Duration::from_secs(900), &mut seen2);
    let after = lab.machine("vm1").unwrap();
    let rev2 = after["status"]["provisionedRevision"].as_str().unwrap();
    assert_ne!(rev1, rev2, "revision did not move: {after}");
    assert_eq!(
        after["metadata"]["uid"], uid,
        "the Machine was replaced, not reimaged"
    );
    assert_eq!(after["spec"]["network"]["address"], "10.89.0.11/24");
    let installs_after = boot_steps(&after)
        .iter()
        .filter(|s| *s == "Installed")
        .count();
    assert!(
        installs_after > installs_before,
        "install path not served again: {after}"
    );
    let boot2 = after["status"]["boot"]["id"].as_str().unwrap();
    assert_ne!(boot1, boot2, "no new boot: {after}");
    let console = lab.console(1);
    assert!(
        console.matches("installer: called home installed").count() >= 2,
        "{console}"
    );
    // The same reserved address both times.
    assert!(
        console.matches("addr 10.89.0.11/24").count() >= 4,
        "{console}"
    );

    // The OS partition was rewritten by the reimage, with the new version…
    let root2 = lab_disk::partition(&img, "ROOT").expect("ROOT gone after the reimage");
    assert_eq!(
        lab_disk::first_line(&img, root2.start),
        format!("MHROOT boot={boot2} version=4230.2.4"),
        "{console}"
    );
    // …while the preserved DATA partition is still in the new table where
    // it was, with the marker written before the reimage (a lost partition
    // would have been marked anew under the reimage's boot, or not at all).
    assert_eq!(
        lab_disk::partition(&img, "DATA"),
        Some(data.clone()),
        "DATA not kept: {:?}\n{console}",
        lab_disk::partitions(&img)
    );
    assert_eq!(lab_disk::first_line(&img, data.start), marker, "{console}");
    assert!(console.contains("node: DATA keeps"), "{console}");
}
