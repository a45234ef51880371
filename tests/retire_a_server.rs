//! Story: retire a server. Deleting a provisioned Machine deprovisions it
//! (finalizer), powers the VM off, releases its address, and the object is
//! gone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::proc::wait_for;

#[test]
fn retire_a_server() {
    let (_lock, lab, _) = common::lab::one_ready_vm();
    assert!(lab.vm_running(1));
    let m = lab.machine("vm1").unwrap();
    assert!(
        m["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty()),
        "no finalizer guards the machine: {m}"
    );

    // The server holds its DHCP lease while it runs.
    let bound = wait_for(Duration::from_secs(30), || {
        lab.metric("metalherd_dhcp_leases_bound")
            .filter(|v| *v >= 1.0)
    });
    assert!(
        bound.is_some(),
        "no bound lease before retirement:\n{}",
        lab.metrics()
    );

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
            .filter(|v| *v == 0.0)
    });
    assert!(
        released.is_some(),
        "lease still bound after retirement:\n{}",
        lab.metrics()
    );
    assert!(
        lab.metalherd_log()
            .contains("lease released for a retired machine")
    );
    // Events tell what happened.
    let ev = lab.cli_ok(&["get", "events", "-o", "json"]);
    assert!(ev.contains("Deprovision"), "{ev}");
}
