//! Story: a rack whose servers enforce Secure Boot, end to end on the
//! virtual rack: a libvirt VM with OVMF's Secure Boot build and Microsoft's
//! keys (as servers ship), powered by sushy-tools, whose System reports
//! Secure Boot on its SecureBoot resource.
//!
//! The Machine first says `secureBoot: false` (a wrong declaration): the
//! controller powers the VM on, DHCP hands the firmware iPXE, the firmware
//! fetches it and refuses it, and the controller warns (`BootLoaderNotRun`,
//! as an event and the last error) that the loader never ran, naming the
//! BMC's report against the declaration. With the declaration removed, the
//! BMC's report rules: the boot that follows (after the first one's
//! deadline) hands the firmware the signed shim, then Debian's signed GRUB,
//! its configuration, kernel and initrd over TFTP; the test OS installs and
//! calls home, the disk boots through its own signed shim and GRUB, and the
//! Machine is Ready.
//! Runs QEMU: take /tmp/metalherd-lab.lock around `cargo test`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::lab::{LAB_LOCK, Lab};
use serde_json::Value;

/// The steps of the Machine's boot history (of boot `boot` only, when
/// given), with their details.
fn steps(m: &Value, boot: Option<&str>) -> Vec<String> {
    m["status"]["bootHistory"]
        .as_array()
        .map(|h| {
            h.iter()
                .filter(|e| boot.is_none() || e["bootId"].as_str() == boot)
                .map(|e| {
                    format!(
                        "{} {}",
                        e["step"].as_str().unwrap_or_default(),
                        e["detail"].as_str().unwrap_or_default()
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn secure_boot_network_install_on_a_vm() {
    let _lock = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut lab = Lab::up_secure_boot(1);
    // A short install deadline and retry wait: the refused boot is given
    // up on within minutes.
    lab.merge_config("controller: {installDeadlineSeconds: 150, retryBaseSeconds: 5}");
    lab.kill_metalherd();
    lab.start_metalherd();
    lab.declare(&[("LAB_SECURE_BOOT_VM1", "false")]);

    // The wrong declaration: iPXE, refused by the firmware.
    let started = std::time::Instant::now();
    let events = loop {
        let ev = lab.cli_ok(&["get", "events", "-o", "json"]);
        if ev.contains("BootLoaderNotRun") {
            break ev;
        }
        assert!(
            started.elapsed() < Duration::from_secs(420),
            "no BootLoaderNotRun warning: {:#}\nconsole:\n{}",
            lab.machine("vm1").unwrap_or_default(),
            lab.console(1)
        );
        std::thread::sleep(Duration::from_secs(3));
    };
    let hint = "the BMC reports Secure Boot enabled but spec.secureBoot is false";
    assert!(events.contains(hint), "{events}");
    let warned = lab.machine("vm1").unwrap();
    assert_eq!(
        warned["status"]["inventory"]["secureBoot"], true,
        "{warned:#}"
    );
    // The last error says it too (the warning's, or the deadline's that
    // followed it).
    let message = warned["status"]["lastError"]["message"].as_str().unwrap();
    assert!(
        message.contains("ipxe.efi") && message.contains(hint),
        "{message}"
    );
    let got = steps(&warned, None);
    assert!(got.iter().any(|s| s == "TFTP ipxe.efi"), "{got:#?}");
    assert!(!got.iter().any(|s| s.starts_with("Script")), "{got:#?}");
    assert!(
        lab.console(1).contains("Access Denied"),
        "{}",
        lab.console(1)
    );

    // The declaration removed: the BMC's report rules.
    lab.declare(&[]);
    let mut seen = Vec::new();
    lab.wait_phase("vm1", "Ready", Duration::from_secs(900), &mut seen);
    let m = lab.machine("vm1").unwrap();
    let boot = m["status"]["boot"]["id"].as_str().unwrap().to_string();
    let this = steps(&m, Some(&boot));
    let mut it = this.iter();
    for want in [
        "TFTP shimx64.efi",
        "TFTP grubx64.efi",
        "TFTP /grub/grub.cfg",
        "Script install (grub)",
        "Kernel",
        "Initrd",
        "Ignition",
        "Installed",
        "Booted",
    ] {
        assert!(
            it.any(|s| s.starts_with(want)),
            "{want} missing or out of order in {this:#?}"
        );
    }
    assert!(
        !this.iter().any(|s| s.contains("ipxe")),
        "the Secure Boot boot got iPXE: {this:#?}"
    );
    eprintln!("secure boot on the rack: phases {seen:?}; the boot: {this:?}");
}
