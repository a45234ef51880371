//! What a boot gets (the intent a Machine's status calls for). The boot
//! recorder's tests are in `recorder/tests.rs`.

use serde_json::json;

use super::*;
use crate::api::Machine;

/// A Machine in `phase` with `boot` as its current boot.
fn booting(phase: &str, boot: serde_json::Value) -> Machine {
    serde_json::from_value(json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": "m1", "namespace": "default", "uid": "u1"},
        "spec": {"bmc": {"address": "ipmi://10.0.0.1", "credentialsSecretRef": {"name": "b"}}, "bootMACAddress": "52:54:00:00:00:01"},
        "status": {"phase": phase, "boot": boot}
    }))
    .unwrap()
}

#[test]
fn an_open_deprovisioning_boot_gets_the_live_os_and_a_closed_one_does_not() {
    let open = json!({"id": "b9", "purpose": "deprovision", "mintedAt": "2026-01-01T00:00:00Z"});
    let e = MachineEntry::from_machine(&booting("Deprovisioning", open.clone())).unwrap();
    assert_eq!(
        e.intent,
        BootIntent::Install {
            boot_id: "b9".into(),
            purpose: BootPurpose::Deprovision
        },
        "a wipe boot is a live-OS boot (its config is the wipe config)"
    );
    let mut wiped = open;
    wiped["completedAt"] = json!("2026-01-01T00:05:00Z");
    wiped["outcome"] = json!("wiped");
    let e = MachineEntry::from_machine(&booting("Deprovisioning", wiped)).unwrap();
    assert_eq!(e.intent, BootIntent::Idle, "once wiped, nothing is served");
    // Install and reimage boots are live-OS boots as before.
    for (phase, purpose) in [
        ("Provisioning", BootPurpose::Install),
        ("Reimaging", BootPurpose::Reimage),
    ] {
        let b = json!({"id": "b1", "purpose": purpose, "mintedAt": "2026-01-01T00:00:00Z"});
        let e = MachineEntry::from_machine(&booting(phase, b)).unwrap();
        assert_eq!(
            e.intent,
            BootIntent::Install {
                boot_id: "b1".into(),
                purpose
            }
        );
    }
}
