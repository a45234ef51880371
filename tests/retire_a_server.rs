//! Story: retire a server. Deleting a provisioned Machine deprovisions it
//! (finalizer), powers the VM off, releases its address, and the object is
//! gone. Cleaning is the class's choice, per operation: vm1's class keeps
//! its disk as it is; vm2's class wipes on deprovision, so retiring it
//! network-boots the wiper, which clears the disk's partition tables and
//! filesystem signatures (the very partitions a reimage would preserve)
//! and calls home `wiped` before metalherd powers it off and lets it go.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::lab_disk;
use common::proc::wait_for;

#[test]
fn retire_a_server() {
    let (_lock, lab, _) = common::lab::ready_vms(2, &[("LAB_WIPE_VMS", "2")]);
    assert!(lab.vm_running(1));
    let m = lab.machine("vm1").unwrap();
    assert!(
        m["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty()),
        "no finalizer guards the machine: {m}"
    );
    assert_eq!(
        lab.machine("vm2").unwrap()["spec"]["classRef"]["name"],
        "lab-wipe"
    );

    // The servers hold their DHCP leases while they run.
    let bound = wait_for(Duration::from_secs(30), || {
        lab.metric("metalherd_dhcp_leases_bound")
            .filter(|v| *v >= 2.0)
    });
    assert!(
        bound.is_some(),
        "no bound leases before retirement:\n{}",
        lab.metrics()
    );

    // Without a wipe: gone, off, the address released, the disk untouched.
    let out = lab.cli_ok(&["delete", "machine", "vm1"]);
    assert!(out.contains("vm1"), "{out}");
    let gone = wait_for(Duration::from_secs(300), || {
        lab.machine("vm1").is_none().then_some(())
    });
    assert!(
        gone.is_some(),
        "vm1 still exists: {:?}\n{}",
        lab.machine("vm1"),
        lab.metalherd_log()
    );
    let off = wait_for(Duration::from_secs(60), || {
        (!lab.vm_running(1)).then_some(())
    });
    assert!(off.is_some(), "the VM still runs after retirement");
    // The address was released, not left to expire.
    let released = wait_for(Duration::from_secs(30), || {
        lab.metric("metalherd_dhcp_leases_bound")
            .filter(|v| *v == 1.0)
    });
    assert!(
        released.is_some(),
        "vm1's lease still bound after retirement:\n{}",
        lab.metrics()
    );
    assert!(
        lab.metalherd_log()
            .contains("lease released for a retired machine")
    );
    let names: Vec<String> = lab_disk::partitions(&lab.disk(1))
        .expect("vm1's disk lost its table without a wipe")
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["ESP", "ROOT", "DATA"]);
    assert!(!lab.console(1).contains("wiper:"), "vm1 was wiped");

    // With a wipe: the wiper boots, clears the disk and calls home; then
    // the server is off, its address released, the Machine gone.
    let img = lab.disk(2);
    let starts: Vec<u64> = lab_disk::partitions(&img)
        .expect("vm2's disk has no table before its retirement")
        .iter()
        .map(|p| p.start)
        .collect();
    assert_eq!(starts.len(), 3);
    let out = lab.cli_ok(&["delete", "machine", "vm2"]);
    assert!(out.contains("vm2"), "{out}");
    let gone = wait_for(Duration::from_secs(900), || {
        lab.machine("vm2").is_none().then_some(())
    });
    let console = lab.console(2);
    assert!(
        gone.is_some(),
        "vm2 still exists: {:?}\nconsole:\n{console}\n{}",
        lab.machine("vm2"),
        lab.metalherd_log()
    );
    assert!(console.contains("wiper: called home wiped"), "{console}");
    let log = lab.metalherd_log();
    assert!(
        log.lines()
            .any(|l| l.contains("/callhome/wiped") && l.contains("call-home recorded")),
        "metalherd did not record the wiped call-home:\n{log}"
    );
    let off = wait_for(Duration::from_secs(60), || {
        (!lab.vm_running(2)).then_some(())
    });
    assert!(off.is_some(), "vm2 still runs after retirement");
    let released = wait_for(Duration::from_secs(30), || {
        lab.metric("metalherd_dhcp_leases_bound")
            .filter(|v| *v == 0.0)
    });
    assert!(
        released.is_some(),
        "vm2's lease still bound after retirement:\n{}",
        lab.metrics()
    );
    // The VM is off: its disk image is what the wiper left. No partition
    // table (primary, backup, protective MBR) and no filesystem signature
    // where the partitions were, DATA included although the class
    // preserves it on reimage.
    assert_eq!(
        lab_disk::partitions(&img),
        None,
        "a partition table is left"
    );
    let left = lab_disk::leftovers(&img, &starts);
    assert!(left.is_empty(), "the wipe left {left:?}\n{console}");

    // Events tell what happened.
    let ev = lab.cli_ok(&["get", "events", "-o", "json"]);
    assert!(ev.contains("Deprovision"), "{ev}");
}
