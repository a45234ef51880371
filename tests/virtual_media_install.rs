//! Story: install a server on a network with no DHCP or PXE at all, from
//! Redfish virtual media, end to end on the virtual rack: a libvirt VM
//! (OVMF) whose BMC is sushy-tools' libvirt driver, and metalherd serving
//! only TFTP and boot HTTP on the rack's bridge (no `dhcp:` section).
//!
//! The Machine says `boot: virtualMedia`. The controller inserts the URL of
//! the boot's ISO into the System's virtual CD (sushy-tools downloads it
//! from metalherd's boot HTTP during the InsertMedia call, with the boot's
//! media token, and attaches it to the VM as a CD), sets a one-time boot
//! from CD and powers on. OVMF boots the ISO's systemd-boot, which starts
//! the lab's test OS with the command line metalherd wrote: the Machine's
//! static address (`ip=`, `ifname=`), the Ignition URL with its token. The
//! test OS fetches its install config, installs and calls home; the
//! controller then boots the disk and ejects the ISO, and the installed
//! OS (its static address from the installer's record) calls home
//! `booted`: the Machine is Ready.
//!
//! Checked: the boot history in order (Media, MediaInserted, Ignition,
//! Installed, MediaEjected, Booted) with no DHCP or TFTP step; the VM's
//! definition holds the ISO as a CD while it installs and none at the end;
//! sushy-tools reads the drive back empty; the ISO URL was fetched only
//! with the media token (a wrong token is refused); the console shows the
//! static address and no DHCP client.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::lab::{LAB_LOCK, Lab, boot_steps};

#[test]
fn virtual_media_install() {
    let _lock = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let lab = Lab::up_without_dhcp(1);
    let config = std::fs::read_to_string(lab.run.join("config.yaml")).unwrap();
    assert!(!config.contains("dhcp:"), "{config}");
    lab.declare(&[("LAB_BOOT_VM1", "virtualMedia")]);

    // While it installs, the VM's definition carries the ISO as its CD.
    let started = std::time::Instant::now();
    let mut saw_cd = false;
    let mut seen = Vec::new();
    loop {
        if !saw_cd {
            let xml = lab.virsh(&["dumpxml", "--inactive", &format!("{}-vm1", lab.ns)]);
            saw_cd = xml.contains("device='cdrom'") || xml.contains("device=\"cdrom\"");
        }
        let phase = lab.phase("vm1").unwrap_or_default();
        if seen.last() != Some(&phase) {
            eprintln!("lab: vm1 -> {phase} ({:?})", started.elapsed());
            seen.push(phase.clone());
        }
        if phase == "Ready" {
            break;
        }
        assert!(
            phase != "Error" && started.elapsed() < Duration::from_secs(900),
            "vm1 {phase}: {:#}\nconsole:\n{}\nmetalherd:\n{}",
            lab.machine("vm1").unwrap_or_default(),
            lab.console(1),
            lab.metalherd_log()
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    assert!(saw_cd, "the VM's definition never had a CD");

    let m = lab.machine("vm1").unwrap();
    let steps = boot_steps(&m);
    // sushy-tools downloads the ISO during the InsertMedia call, so the
    // ISO is served (`Media`) before the insert is noted.
    let mut it = steps.iter();
    for want in [
        "Media",
        "MediaInserted",
        "Ignition",
        "Installed",
        "MediaEjected",
        "Booted",
    ] {
        assert!(
            it.any(|s| s == want),
            "{want} missing or out of order in {steps:?}"
        );
    }
    for never in ["DHCPOffer", "DHCPAck", "TFTP", "Script"] {
        assert!(
            !steps.iter().any(|s| s == never),
            "{never} in a boot without DHCP or PXE: {steps:?}"
        );
    }
    // The media URL in the history names no token.
    let history = m["status"]["bootHistory"].to_string();
    assert!(history.contains("/.../boot.iso"), "{history}");

    // Ejected: sushy-tools reads the drive back empty, and the VM's
    // definition has no CD any more.
    let uuid = &lab.uuids[0];
    let cd = lab.cmd_in_ns(
        "curl",
        &[
            "-fs",
            &format!("http://127.0.0.1:8000/redfish/v1/Systems/{uuid}/VirtualMedia/Cd"),
        ],
    );
    let cd: serde_json::Value = serde_json::from_slice(&cd.stdout).unwrap();
    assert_eq!(cd["Inserted"], false, "{cd:#}");
    let xml = lab.virsh(&["dumpxml", "--inactive", &format!("{}-vm1", lab.ns)]);
    assert!(
        !xml.contains("device='cdrom'"),
        "the CD is still defined: {xml}"
    );

    // The live system took the static address, and asked no DHCP server.
    let console = lab.console(1);
    assert!(
        console.contains("static address 10.89.0.11/24 (no DHCP asked)"),
        "{console}"
    );
    assert!(!console.contains("dhcp failed"), "{console}");
    assert!(console.contains("METALHERD-INSTALL-DONE"), "{console}");

    // The ISO's URL with another token is refused.
    let mac = m["spec"]["bootMACAddress"]
        .as_str()
        .unwrap()
        .replace(':', "-");
    let wrong = lab.cmd_in_ns(
        "curl",
        &[
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!(
                "http://10.89.0.1:8080/vmedia/{mac}/{}/boot.iso",
                "ab".repeat(32)
            ),
        ],
    );
    assert_eq!(String::from_utf8_lossy(&wrong.stdout), "403");
    lab.assert_no_secret_leaks();
    eprintln!("virtual media on the rack: phases {seen:?}; history {steps:?}");
}
