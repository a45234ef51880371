//! Story: retire a server. Deleting a provisioned Machine deprovisions it
//! (finalizer), powers the VM off, releases its address, and the object is
//! gone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::lab::Lab;
use common::proc::wait_for;

#[test]
fn retire_a_server() {
    let _l = common::lab::LAB_LOCK
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let lab = Lab::up(1);
    lab.declare(&[]);
    let mut seen = Vec::new();
    lab.wait_phase("vm1", "Ready", Duration::from_secs(900), &mut seen);
    assert!(lab.vm_running(1));
    let m = lab.machine("vm1").unwrap();
    assert!(
        m["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty()),
        "no finalizer guards the machine: {m}"
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
    // Events tell what happened.
    let ev = lab.cli_ok(&["get", "events", "-o", "json"]);
    assert!(ev.contains("Deprovision"), "{ev}");
}
