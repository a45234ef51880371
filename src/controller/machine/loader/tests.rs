use super::*;
use crate::api::{BootEvent, Inventory, MachineStatus};

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn step(s: i64, step: BootStep, detail: &str) -> BootEvent {
    BootEvent {
        time: at(s),
        step,
        detail: detail.into(),
        bytes: None,
        boot_id: Some("b1".into()),
    }
}

fn machine(history: Vec<BootEvent>) -> Machine {
    let mut m = Machine::new("vm1", Default::default());
    m.status = Some(MachineStatus {
        boot_history: history,
        ..Default::default()
    });
    m
}

#[test]
fn a_fetch_without_a_script_stalls_after_the_grace() {
    let m = machine(vec![
        step(0, BootStep::DhcpAck, "10.0.0.7 via pxe"),
        step(1, BootStep::Tftp, "ipxe.efi"),
        // The firmware gave up on it and asked DHCP again.
        step(5, BootStep::DhcpAck, "10.0.0.7 via pxe"),
    ]);
    assert_eq!(stalled_loader(&m, "b1", at(60)), None);
    assert_eq!(
        stalled_loader(&m, "b1", at(95)).as_deref(),
        Some("ipxe.efi")
    );
    // Another boot's steps are not this one's.
    assert_eq!(stalled_loader(&m, "b2", at(95)), None);
}

#[test]
fn a_script_after_the_fetch_is_progress() {
    let m = machine(vec![
        step(1, BootStep::Tftp, "shimx64.efi"),
        step(3, BootStep::Tftp, "grubx64.efi"),
        step(6, BootStep::Tftp, "grub/grub.cfg"),
        step(7, BootStep::Script, "install (grub)"),
    ]);
    assert_eq!(stalled_loader(&m, "b1", at(500)), None);
    // GRUB fetched but its configuration never came: GRUB stalled.
    let m = machine(vec![
        step(1, BootStep::Tftp, "shimx64.efi"),
        step(3, BootStep::Tftp, "grubx64.efi"),
    ]);
    assert_eq!(
        stalled_loader(&m, "b1", at(500)).as_deref(),
        Some("grubx64.efi")
    );
}

#[test]
fn the_message_follows_what_is_known_of_secure_boot() {
    let mut m = machine(Vec::new());
    let unknown = stalled_message(&m, "ipxe.efi");
    assert!(unknown.contains("set spec.secureBoot: true"), "{unknown}");
    m.spec.secure_boot = Some(false);
    if let Some(st) = m.status.as_mut() {
        st.inventory = Some(Inventory {
            secure_boot: Some(true),
            ..Default::default()
        });
    }
    let contradicted = stalled_message(&m, "ipxe.efi");
    assert!(
        contradicted.contains("the BMC reports Secure Boot enabled but spec.secureBoot is false"),
        "{contradicted}"
    );
    m.spec.secure_boot = None;
    let enforced = stalled_message(&m, "shimx64.efi");
    assert!(enforced.contains("dhcp.secureBootFiles"), "{enforced}");
}
