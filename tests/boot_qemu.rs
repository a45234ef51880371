//! Story: a server network-boots and installs. Real PXE firmware under QEMU
//! (software emulation) boots against metalherd in a network namespace:
//! - legacy BIOS: SeaBIOS + QEMU's NIC ROM (iPXE): DHCP -> HTTP script ->
//!   kernel + initrd;
//! - UEFI: OVMF firmware DHCP -> TFTP ipxe.efi -> iPXE DHCP -> HTTP script
//!   -> kernel + initrd;
//! - UEFI HTTP boot: OVMF's own HTTP boot (its PXE turned off, no TFTP
//!   server at all): DHCP as `HTTPClient` -> HTTP ipxe.efi from the URL in
//!   the answer -> iPXE as above.
//!
//! The test OS fetches its Ignition config with the per-boot token, calls
//! home `installed` and prints a marker. The test asserts the marker, the
//! call-home (the boot is closed with outcome `installed`) and every step
//! in the Machine's boot history. Each firmware boots twice, without and
//! with metalherd's minimal IPv6 router advertisement; the time from power
//! on to the Ignition fetch is printed (not asserted).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::initramfs;
use common::qemu::Firmware;
use common::qemu_boot::{Dhcp, boot_once};

fn check_steps(fw: Firmware, steps: &[String]) {
    let mut want = vec![
        "DHCPAck",
        "Script",
        "Kernel",
        "Initrd",
        "Ignition",
        "Installed",
    ];
    match fw {
        Firmware::Uefi => {
            // Firmware DHCP and the TFTP of ipxe.efi come first.
            want.insert(0, "TFTP");
            want.insert(0, "DHCPAck");
        }
        Firmware::UefiHttp => {
            // Firmware DHCP, then ipxe.efi over HTTP: no TFTP step.
            want.insert(0, "DHCPAck");
            assert!(
                !steps.iter().any(|s| s == "TFTP"),
                "UEFI HTTP boot used TFTP: {steps:?}"
            );
        }
        Firmware::Bios | Firmware::SecureBoot | Firmware::SiteKey => {}
    }
    let mut it = steps.iter();
    for w in want {
        assert!(
            it.any(|s| s == w),
            "{fw:?}: step {w} missing or out of order in {steps:?}"
        );
    }
}

fn run(fw: Firmware, mac_last: u8) {
    common::require_root();
    common::require_tool("qemu-system-x86_64");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let os = initramfs::build(dir.path());
    let mac = format!("52:54:00:4d:48:{mac_last:02x}");
    let plain = rt.block_on(boot_once(fw, false, Dhcp::Metalherd, &mac, &os));
    check_steps(fw, &plain.steps);
    let with_ra = rt.block_on(boot_once(fw, true, Dhcp::Metalherd, &mac, &os));
    check_steps(fw, &with_ra.steps);
    println!(
        "boot_qemu {fw:?}: power-on to Ignition fetch: {:.1} s without router advertisement, {:.1} s with (saved {:.1} s); iPXE DISCOVER to ACK {:?}; steps {:?}",
        plain.to_ignition.as_secs_f64(),
        with_ra.to_ignition.as_secs_f64(),
        plain.to_ignition.as_secs_f64() - with_ra.to_ignition.as_secs_f64(),
        plain.ipxe_dhcp,
        plain.steps,
    );
}

#[test]
fn legacy_bios_server_pxe_boots_and_installs() {
    run(Firmware::Bios, 0x01);
}

#[test]
fn uefi_server_pxe_boots_and_installs() {
    run(Firmware::Uefi, 0x02);
}

/// OVMF's own UEFI HTTP boot: the DHCP answer's URL (under `/assets/`)
/// must be one boot HTTP serves, since there is no TFTP to fall back on.
#[test]
fn uefi_server_http_boots_without_tftp_and_installs() {
    common::require_root();
    common::require_tool("qemu-system-x86_64");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let os = initramfs::build(dir.path());
    let out = rt.block_on(boot_once(
        Firmware::UefiHttp,
        false,
        Dhcp::Metalherd,
        "52:54:00:4d:48:03",
        &os,
    ));
    check_steps(Firmware::UefiHttp, &out.steps);
    assert!(
        out.http_boot_fetch,
        "the firmware never fetched /assets/ipxe.efi over HTTP"
    );
    println!(
        "boot_qemu UefiHttp: power-on to Ignition fetch: {:.1} s; steps {:?}",
        out.to_ignition.as_secs_f64(),
        out.steps
    );
}

/// Proxy mode beside a site DHCP server: dnsmasq hands out the address,
/// metalherd only the boot (ProxyDHCP offers on port 67 and 4011). Both
/// firmware kinds install through it.
fn run_proxy(fw: Firmware, mac_last: u8) {
    common::require_root();
    common::require_tool("qemu-system-x86_64");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let os = initramfs::build(dir.path());
    let mac = format!("52:54:00:4d:48:{mac_last:02x}");
    let out = rt.block_on(boot_once(fw, false, Dhcp::ProxyBesideDnsmasq, &mac, &os));
    check_proxy_steps(fw, &out.steps);
    println!(
        "boot_qemu {fw:?} in proxy mode beside dnsmasq: power-on to Ignition fetch: {:.1} s; steps {:?}",
        out.to_ignition.as_secs_f64(),
        out.steps
    );
}

/// In proxy mode metalherd hands out no lease: its steps start with the
/// boot file (TFTP for UEFI) or the script.
fn check_proxy_steps(fw: Firmware, steps: &[String]) {
    let mut want = vec!["Script", "Kernel", "Initrd", "Ignition", "Installed"];
    if fw == Firmware::Uefi {
        want.insert(0, "TFTP");
    }
    let mut it = steps.iter();
    for w in want {
        assert!(
            it.any(|s| s == w),
            "{fw:?} proxy: step {w} missing or out of order in {steps:?}"
        );
    }
}

#[test]
fn legacy_bios_server_boots_through_proxy_dhcp_beside_a_site_dhcp_server() {
    run_proxy(Firmware::Bios, 0x04);
}

#[test]
fn uefi_server_boots_through_proxy_dhcp_beside_a_site_dhcp_server() {
    run_proxy(Firmware::Uefi, 0x05);
}
