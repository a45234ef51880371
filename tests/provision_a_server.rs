//! Story: provision a server. A Machine declared with only its BMC (the
//! virtual rack's Redfish emulator driving a real QEMU VM), its network and
//! a class goes Registering -> Provisioning -> Provisioned -> Ready through
//! real DHCP, TFTP (UEFI firmware fetches iPXE), HTTP (script, kernel,
//! initrd, Ignition) and the installer's and node's call-homes. At its end
//! neither the join token nor the BMC password appears in metalherd's log,
//! metrics, Events or the Machine's status.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::lab::{boot_steps, mac};

/// The steps a provisioning boot must show, in this order.
pub const INSTALL_STEPS: [&str; 8] = [
    "DHCPAck",
    "TFTP",
    "Script",
    "Kernel",
    "Initrd",
    "Ignition",
    "Installed",
    "Booted",
];

pub fn assert_steps_in_order(steps: &[String], want: &[&str]) {
    let mut it = steps.iter();
    for w in want {
        assert!(
            it.any(|s| s == w),
            "boot step {w} missing or out of order in {steps:?}"
        );
    }
}

#[test]
fn provision_a_server() {
    let (_lock, lab, seen) = common::lab::one_ready_vm();
    for p in ["Provisioning", "Provisioned", "Ready"] {
        assert!(
            seen.iter().any(|s| s == p),
            "phase {p} never seen: {seen:?}"
        );
    }
    let m = lab.machine("vm1").unwrap();
    // The boot MAC was learned from the BMC's inventory.
    assert_eq!(
        m["spec"]["bootMACAddress"].as_str(),
        Some(mac(1).as_str()),
        "{m}"
    );
    assert!(
        m["status"]["inventory"]["nics"]
            .as_array()
            .is_some_and(|n| !n.is_empty()),
        "{m}"
    );
    assert_steps_in_order(&boot_steps(&m), &INSTALL_STEPS);
    assert!(m["status"]["provisionedRevision"].is_string(), "{m}");
    assert_eq!(m["status"]["powerState"], "On");
    let console = lab.console(1);
    assert!(
        console.contains("installer: called home installed"),
        "{console}"
    );
    assert!(console.contains("node: called home booted"), "{console}");
    assert!(
        console.contains("addr 10.89.0.11/24"),
        "the node did not get its reserved address:\n{console}"
    );
    // describe tells the story without logs.
    let d = lab.cli_ok(&["describe", "machine", "vm1"]);
    assert!(d.contains("Installed") && d.contains("Booted"), "{d}");
    // After a whole provisioning, no secret went where operators read.
    lab.assert_no_secret_leaks();
}
