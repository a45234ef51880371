//! Story: install a server on an IPv6-only provisioning network, end to end
//! on the virtual rack: a libvirt VM (OVMF with its IPv4 stack turned off,
//! `opt/org.tianocore/IPv4Support=no`, so it has only IPv6 PXE and HTTP
//! boot entries) whose BMC is sushy-tools' libvirt driver, on a bridge with
//! `fd00:89::1/64` and no IPv4 address at all (lib.sh's `lab_config` with
//! `LAB_IPV6=1`).
//!
//! metalherd serves DHCPv6 (no DHCPv4), router advertisements with the
//! managed flag and the on-link prefix, TFTP and boot HTTP on
//! `fd00:89::1`. The Machine's `spec.network.address` is `fd00:89::11/64`.
//! The chain: OVMF's IPv6 PXE solicits, is given the Machine's address and
//! `tftp://[fd00:89::1]/ipxe.efi`, fetches iPXE over TFTP on IPv6; iPXE
//! reads the router advertisement, asks DHCPv6 itself (User Class `iPXE`)
//! and is given its script's URL; the script, kernel and initrd come over
//! HTTP on IPv6, the live system takes its static IPv6 address from the
//! kernel arguments metalherd rendered, fetches its install config with the
//! boot's token and calls home `installed`; the controller boots the disk
//! and the installed OS calls home `booted` from the same address.
//!
//! Checked: the Machine is Ready; its boot history holds DHCPOffer, DHCPAck,
//! TFTP, Script, Ignition, Installed and Booted in that order; DHCPv6 leased
//! the Machine's address; nothing on the rack's bridge has an IPv4 address;
//! the console shows OVMF's PXE over IPv6 (never over IPv4) and the live
//! system's static IPv6 address.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::lab::{LAB_LOCK, Lab, boot_steps};

#[test]
fn ipv6_only_network_install() {
    let _lock = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let lab = Lab::up_ipv6_only(1);
    let config = std::fs::read_to_string(lab.run.join("config.yaml")).unwrap();
    assert!(
        config.contains("dhcp6:") && !config.contains("\ndhcp:"),
        "{config}"
    );
    // The rack's network has no IPv4 address at all.
    let addrs = lab.cmd_in_ns("ip", &["-4", "-o", "addr", "show", "dev", "br0"]);
    assert!(
        String::from_utf8_lossy(&addrs.stdout).trim().is_empty(),
        "br0 has IPv4: {}",
        String::from_utf8_lossy(&addrs.stdout)
    );
    lab.declare(&[("LAB_IPV6", "1")]);

    let started = std::time::Instant::now();
    let mut seen = Vec::new();
    loop {
        let phase = lab.phase("vm1").unwrap_or_default();
        if seen.last() != Some(&phase) {
            eprintln!("lab: vm1 -> {phase} ({:?})", started.elapsed());
            seen.push(phase.clone());
        }
        if phase == "Ready" {
            break;
        }
        assert!(
            phase != "Error" && started.elapsed() < Duration::from_secs(1200),
            "vm1 {phase}: {:#}\nconsole:\n{}\nmetalherd:\n{}",
            lab.machine("vm1").unwrap_or_default(),
            lab.console(1),
            lab.metalherd_log()
        );
        std::thread::sleep(Duration::from_secs(2));
    }

    let m = lab.machine("vm1").unwrap();
    let steps = boot_steps(&m);
    let mut it = steps.iter();
    for want in [
        "DHCPOffer",
        "DHCPAck",
        "TFTP",
        "Script",
        "Ignition",
        "Installed",
        "Booted",
    ] {
        assert!(
            it.any(|s| s == want),
            "{want} missing or out of order in {steps:?}"
        );
    }
    // DHCPv6 leased the Machine's address to the firmware's PXE client
    // (with the TFTP URL of iPXE) and to iPXE (with its script's URL);
    // no IPv4 address appears anywhere in the history.
    let history = m["status"]["bootHistory"].to_string();
    let acks: Vec<String> = m["status"]["bootHistory"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["step"] == "DHCPAck")
        .map(|e| e["detail"].as_str().unwrap_or_default().to_string())
        .collect();
    for (kind, url) in [
        ("uefi-pxe", "tftp://[fd00:89::1]/ipxe.efi"),
        ("ipxe", "http://[fd00:89::1]:8080/boot.ipxe"),
    ] {
        assert!(
            acks.iter().any(|d| d.starts_with("fd00:89::11 via ")
                && d.contains(&format!("via {kind} (DHCPv6)"))
                && d.contains(url)),
            "no DHCPv6 ack of fd00:89::11 to {kind} with {url}: {acks:?}"
        );
    }
    assert!(!history.contains("10.89."), "{history}");

    // The firmware booted over IPv6 only; the live system took the static
    // IPv6 address and asked no DHCPv4 server.
    let console = lab.console(1);
    assert!(console.contains("PXE over IPv6"), "{console}");
    assert!(!console.contains("PXE over IPv4"), "{console}");
    assert!(
        console.contains("static IPv6 address fd00:89::11/64"),
        "{console}"
    );
    assert!(!console.contains("dhcp failed"), "{console}");
    eprintln!("boot history: {steps:?}");

    // DHCPv6 counted the exchange.
    let metrics = lab.metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("metalherd_dhcp6_") && !l.ends_with(" 0")),
        "no DHCPv6 metric moved:\n{metrics}"
    );
    lab.assert_no_secret_leaks();
}
