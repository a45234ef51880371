//! Story: a server whose firmware enforces Secure Boot network-boots and
//! installs. Real firmware under QEMU (OVMF's Secure Boot build, Microsoft's
//! keys enrolled, as servers ship) against metalherd in a network
//! namespace:
//! - `secure_boot_network_install`: the Machine says `secureBoot: true`, so
//!   DHCP hands the firmware the Microsoft-signed shim; shim loads Debian's
//!   signed network GRUB, which reads metalherd's `grub/grub.cfg`, this
//!   machine's configuration and the kernel and initrd over TFTP (it has no
//!   HTTP), then boots Debian's signed kernel with the test OS, which
//!   fetches its Ignition with the boot's token and calls home `installed`;
//!   the kernel reports Secure Boot enabled. Then the same VM with the Machine saying `secureBoot: false`
//!   gets iPXE: the firmware fetches it and refuses it ("Access Denied"),
//!   nothing asks for a script, and the controller's check on that boot
//!   history says why (`BootLoaderNotRun`).
//! - `secure_boot_with_a_site_key`: firmware that trusts only a site's own
//!   key (OVMF's snakeoil key stands in) boots the site's iPXE signed with
//!   that key, named in `dhcp.secureBootFiles`, and installs through it; the
//!   class's kernel is signed with the same key (iPXE hands it to the
//!   firmware, which checks it against the same keys).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::initramfs::{self, INSTALL_DONE};
use common::qemu::Firmware;
use common::qemu_boot::{Dhcp, Extra, start, tail};
use metalherd::api::{BootEvent, Machine};

/// The boot's steps as `Step detail`, in order.
fn steps(m: &Machine) -> Vec<String> {
    let st = m.status.as_ref().unwrap();
    st.boot_history
        .iter()
        .map(|e: &BootEvent| format!("{} {}", e.step, e.detail).trim().to_string())
        .collect()
}

/// `want` appear in `got` in this order (each the start of a step, or
/// with `~`, found anywhere in it).
fn in_order(got: &[String], want: &[&str]) {
    let mut it = got.iter();
    for w in want {
        assert!(
            it.any(|s| match w.strip_prefix('~') {
                Some(part) => s.contains(part),
                None => s.starts_with(w),
            }),
            "step {w:?} missing or out of order in {got:#?}"
        );
    }
}

fn installed(m: &Machine) {
    let b = m.status.as_ref().and_then(|s| s.boot.as_ref()).unwrap();
    assert_eq!(
        b.outcome.as_ref().map(|o| o.as_str()),
        Some("installed"),
        "the call-home closes the boot"
    );
}

#[test]
fn secure_boot_network_install() {
    common::require_root();
    for f in ["shimx64.efi", "grubx64.efi"] {
        assert!(
            common::repo_root().join("boot-assets").join(f).is_file(),
            "boot-assets/{f} missing: run scripts/setup (boot-assets/fetch-secure-boot)"
        );
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let os = initramfs::build(dir.path());
    let mac = "52:54:00:4d:53:01";

    // shim -> GRUB -> signed kernel.
    let mut rig = rt.block_on(start(
        Firmware::SecureBoot,
        false,
        Dhcp::Metalherd,
        mac,
        &os,
        &Extra {
            secure_boot: Some(true),
            ..Extra::default()
        },
    ));
    let serial = wait_installed(&mut rig);
    assert!(
        serial.contains("Secure boot enabled"),
        "the kernel did not run with Secure Boot: {}",
        tail(&serial, 80)
    );
    assert!(!serial.contains("iPXE initialising"), "iPXE ran");
    rig.vm.wait_exit(Duration::from_secs(30));
    let m = rt.block_on(rig.machine());
    installed(&m);
    let got = steps(&m);
    in_order(
        &got,
        &[
            "DHCPAck",
            "TFTP shimx64.efi",
            "TFTP grubx64.efi",
            "~grub/grub.cfg",
            "Script install (grub)",
            "Kernel",
            "Initrd",
            "Ignition",
            "Installed",
        ],
    );
    assert!(
        !got.iter().any(|s| s.contains("ipxe")),
        "a Secure Boot machine got iPXE: {got:#?}"
    );
    println!("secure boot install: {got:?}");
    let work = rig.work.clone();
    drop(rig);
    let _ = std::fs::remove_dir_all(work);

    // The same firmware handed iPXE refuses it.
    let mut rig = rt.block_on(start(
        Firmware::SecureBoot,
        false,
        Dhcp::Metalherd,
        mac,
        &os,
        &Extra {
            secure_boot: Some(false),
            ..Extra::default()
        },
    ));
    let refused = rig
        .vm
        .wait_serial_or_exit("Access Denied", Duration::from_secs(240));
    let serial = rig.vm.serial_text();
    assert!(
        refused.is_some(),
        "the firmware did not refuse iPXE (work dir {}): {}",
        rig.work.display(),
        tail(&serial, 40)
    );
    assert!(!serial.contains("iPXE initialising"), "unsigned iPXE ran");
    let m = rt.block_on(rig.machine());
    let got = steps(&m);
    in_order(&got, &["DHCPAck", "TFTP ipxe.efi"]);
    assert!(
        !got.iter().any(|s| s.starts_with("Script")),
        "something asked for a script: {got:#?}"
    );
    // What the controller says of this boot once its grace is over: the
    // loader never ran, and why.
    let boot = m.status.as_ref().and_then(|s| s.boot.as_ref()).unwrap();
    let later = jiff::Timestamp::now()
        .checked_add(metalherd::controller::machine::loader::LOADER_GRACE)
        .unwrap();
    let file = metalherd::controller::machine::loader::stalled_loader(&m, &boot.id, later);
    assert_eq!(file.as_deref(), Some("ipxe.efi"), "{got:#?}");
    let why = metalherd::controller::machine::loader::stalled_message(&m, "ipxe.efi");
    assert!(why.contains("Secure Boot"), "{why}");
    println!("refused: {got:?}; the controller says: {why}");
    let work = rig.work.clone();
    drop(rig);
    let _ = std::fs::remove_dir_all(work);
}

#[test]
fn secure_boot_with_a_site_key() {
    common::require_root();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut os = initramfs::build(dir.path());
    // The site signs its kernel too: Debian's signature off, the site's on.
    let unsigned = dir.path().join("vmlinuz.unsigned");
    std::fs::copy(&os.kernel, &unsigned).unwrap();
    run(Command::new(common::require_tool("sbattach"))
        .arg("--remove")
        .arg(&unsigned));
    let kernel = dir.path().join("vmlinuz.site");
    site_sign(&unsigned, &kernel);
    os.kernel = kernel;
    // The site's TFTP root: the usual iPXE, and iPXE signed with its key.
    let root = dir.path().join("tftp");
    std::fs::create_dir_all(&root).unwrap();
    let ipxe = common::repo_root().join("boot-assets/ipxe.efi");
    std::fs::copy(&ipxe, root.join("ipxe.efi")).unwrap();
    site_sign(&ipxe, &root.join("ipxe-site.efi"));
    let mut rig = rt.block_on(start(
        Firmware::SiteKey,
        false,
        Dhcp::Metalherd,
        "52:54:00:4d:53:02",
        &os,
        &Extra {
            secure_boot: Some(true),
            dhcp_lines: "  secureBootFiles: {7: ipxe-site.efi}\n".into(),
            tftp_root: Some(root),
        },
    ));
    let serial = wait_installed(&mut rig);
    assert!(
        serial.contains("Secure boot enabled") || serial.contains("secureboot"),
        "the firmware did not report Secure Boot to the kernel: {}",
        tail(&serial, 80)
    );
    rig.vm.wait_exit(Duration::from_secs(30));
    let m = rt.block_on(rig.machine());
    installed(&m);
    let got = steps(&m);
    in_order(
        &got,
        &[
            "DHCPAck",
            "TFTP ipxe-site.efi",
            "DHCPAck",
            "Script install",
            "Kernel",
            "Initrd",
            "Ignition",
            "Installed",
        ],
    );
    println!("site key install: {got:?}");
    let work = rig.work.clone();
    drop(rig);
    let _ = std::fs::remove_dir_all(work);
}

/// The console once the test OS says it installed (300 s at most, else
/// fail with the console and metalherd's log).
fn wait_installed(rig: &mut common::qemu_boot::Rig) -> String {
    let done = rig
        .vm
        .wait_serial_or_exit(INSTALL_DONE, Duration::from_secs(300));
    let serial = rig.vm.serial_text();
    assert!(
        done.is_some(),
        "no {INSTALL_DONE} within 300 s (work dir {})\n--- serial ---\n{}\n--- metalherd ---\n{}",
        rig.work.display(),
        tail(&serial, 60),
        tail(&rig.log(), 40)
    );
    serial
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Sign an EFI binary with the site's key (OVMF's snakeoil test key; its
/// private key file is protected by the passphrase `snakeoil`).
fn site_sign(input: &std::path::Path, output: &std::path::Path) {
    let key = output.with_extension("key");
    run(Command::new(common::require_tool("openssl"))
        .args(["pkey", "-in", "/usr/share/ovmf/PkKek-1-snakeoil.key"])
        .args(["-passin", "pass:snakeoil", "-out"])
        .arg(&key));
    run(Command::new(common::require_tool("sbsign"))
        .arg("--key")
        .arg(&key)
        .args(["--cert", "/usr/share/ovmf/PkKek-1-snakeoil.pem"])
        .arg("--output")
        .arg(output)
        .arg(input));
}
