//! Story: the ISO metalherd builds for a Redfish virtual-media boot boots on
//! UEFI firmware and hands the kernel exactly the command line of the boot.
//!
//! The real firmware is the first target: OVMF under QEMU (software
//! emulation) boots the image from its CD drive, so EDK2's El Torito
//! driver finds the FAT boot image, runs systemd-boot from it, and
//! systemd-boot reads its loader entry and starts Debian's kernel with a
//! busybox initrd whose /init prints /proc/cmdline and powers off.
//!
//! The initrd is padded so the FAT image is past 65535 512-byte sectors,
//! the size of real kernels with their initrds: the catalog's sector count
//! is then 1 and the firmware must take the image to the end of the
//! volume. The FAT image passes fsck.fat before it boots. The command
//! line holds a URL with `?`, `&` and `=` in it. The time from QEMU's
//! start to the kernel's answer is printed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::proc::{ChildGuard, wait_for};

const DONE: &str = "VMEDIA-INIT-DONE";

/// The init of the test initrd: the command line between brackets, then
/// the marker, then power off (which ends QEMU).
const INIT: &str = "#!/bin/busybox sh
/bin/busybox mkdir -p /proc
/bin/busybox mount -t proc proc /proc
echo \"CMDLINE=[$(/bin/busybox cat /proc/cmdline)]\"
echo VMEDIA-INIT-DONE
/bin/busybox poweroff -f
";

/// Debian's newest kernel, as deploy/lab/build-initramfs picks it.
fn kernel() -> PathBuf {
    let mut kernels: Vec<PathBuf> = std::fs::read_dir("/boot")
        .expect("read /boot")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .collect();
    kernels.sort();
    kernels
        .pop()
        .expect("no /boot/vmlinuz-*: install linux-image-amd64 (scripts/setup)")
}

/// An uncompressed newc cpio of busybox, [`INIT`] and `pad` bytes of
/// padding (uncompressed, so the FAT image grows by as much).
fn initrd(work: &Path, pad: usize) -> PathBuf {
    let busybox = common::require_tool("busybox");
    common::require_tool("cpio");
    let root = work.join("initrd-root");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::copy(&busybox, root.join("bin/busybox")).unwrap();
    std::fs::write(root.join("init"), INIT).unwrap();
    std::fs::write(root.join("pad"), vec![0u8; pad]).unwrap();
    let out = work.join("initrd.cpio");
    let st = Command::new("sh")
        .arg("-c")
        .arg("chmod 755 init bin/busybox && find . | cpio -o -H newc --quiet > \"$0\"")
        .arg(&out)
        .current_dir(&root)
        .status()
        .unwrap();
    assert!(st.success(), "cpio failed");
    out
}

#[test]
fn virtual_media_iso_boots() {
    let qemu = common::require_tool("qemu-system-x86_64");
    let loader = PathBuf::from(metalherd::vmedia::SYSTEMD_BOOT);
    assert!(
        loader.is_file(),
        "{loader:?} missing: install systemd-boot-efi (scripts/setup)"
    );
    let code = Path::new("/usr/share/OVMF/OVMF_CODE_4M.fd");
    let vars_src = Path::new("/usr/share/OVMF/OVMF_VARS_4M.fd");
    assert!(
        code.is_file() && vars_src.is_file(),
        "OVMF missing: run scripts/setup"
    );
    let work = tempfile::tempdir().unwrap();
    let work = work.path();
    let vars = work.join("OVMF_VARS.fd");
    std::fs::copy(vars_src, &vars).unwrap();

    let cmdline =
        "console=ttyS0 metalherd.test=https://10.0.0.1:8443/i?mac=52:54:00:00:00:01&token=a=b";
    let iso = work.join("boot.iso");
    let initrd = initrd(work, 40 << 20);
    metalherd::vmedia::write_iso_file(&iso, &loader, &kernel(), &initrd, cmdline).unwrap();
    let image = std::fs::read(&iso).unwrap();
    let catalog = 19 * 2048 + 32;
    assert_eq!(
        u16::from_le_bytes([image[catalog + 6], image[catalog + 7]]),
        1,
        "the FAT image should be past the 16-bit sector count"
    );
    // dosfstools' checker passes the FAT image (the root directory's file
    // record, after "." and "..", gives its place and length).
    let le32 = |at: usize| u32::from_le_bytes(image[at..at + 4].try_into().unwrap()) as usize;
    let record = 22 * 2048 + 68;
    let (lba, len) = (le32(record + 2), le32(record + 10));
    let fat = work.join("efiboot.img");
    std::fs::write(&fat, &image[lba * 2048..lba * 2048 + len]).unwrap();
    drop(image);
    let fsck = Command::new(common::require_tool("fsck.fat"))
        .arg("-n")
        .arg(&fat)
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "fsck.fat: {}{}",
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );

    let serial = work.join("serial.log");
    let mut cmd = Command::new(qemu);
    cmd.args([
        "-accel", "tcg", "-machine", "q35", "-m", "1024", "-smp", "1",
    ])
    .args(["-display", "none", "-monitor", "none", "-no-reboot"])
    .arg("-serial")
    .arg(format!("file:{}", serial.display()))
    .arg("-drive")
    .arg(format!(
        "if=pflash,format=raw,unit=0,readonly=on,file={}",
        code.display()
    ))
    .arg("-drive")
    .arg(format!(
        "if=pflash,format=raw,unit=1,file={}",
        vars.display()
    ))
    .arg("-cdrom")
    .arg(&iso)
    .args(["-boot", "d"]);
    let started = Instant::now();
    let mut vm = ChildGuard::spawn("qemu", &mut cmd, &work.join("qemu.log"));
    let text = || {
        std::fs::read(&serial)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let done = wait_for(Duration::from_secs(240), || {
        (text().contains(DONE) || !vm.running()).then_some(())
    });
    let console = text();
    assert!(
        done.is_some() && console.contains(DONE),
        "no {DONE} on the console after {:?}; console:\n{console}\nqemu: {}",
        started.elapsed(),
        std::fs::read_to_string(work.join("qemu.log")).unwrap_or_default()
    );
    eprintln!(
        "virtual media boot: kernel answered after {:?}",
        started.elapsed()
    );

    let got = console
        .split("CMDLINE=[")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .unwrap_or_else(|| panic!("no CMDLINE line:\n{console}"));
    // Debian 12's systemd-boot (252) puts the entry's initrd in front, as
    // `initrd=\initrd`, for kernels that cannot take it over LoadFile2;
    // versions that dropped that leave the line alone. What follows is the
    // entry's options, byte for byte.
    assert!(
        got == cmdline || got == format!("initrd=\\initrd {cmdline}"),
        "the kernel got {got:?}, not {cmdline:?}"
    );
    // The init powers off, which ends QEMU.
    let exited = wait_for(Duration::from_secs(30), || (!vm.running()).then_some(()));
    assert!(exited.is_some(), "QEMU did not exit after the power-off");
}
