//! Story: reimage in place. Changing the class's image version reimages
//! the same VM: same address and name, the install path served a second
//! time, and status shows the new revision.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::lab::boot_steps;

#[test]
fn reimage_in_place() {
    let (_lock, lab, _) = common::lab::one_ready_vm();
    let before = lab.machine("vm1").unwrap();
    let rev1 = before["status"]["provisionedRevision"]
        .as_str()
        .unwrap()
        .to_string();
    let uid = before["metadata"]["uid"].clone();
    let installs_before = boot_steps(&before)
        .iter()
        .filter(|s| *s == "Installed")
        .count();

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
}
