//! The test OS for network-boot tests: Debian's kernel and an initramfs
//! built from busybox-static by `deploy/lab/build-initramfs` (its /init
//! brings the NIC up with udhcpc, fetches the Ignition URL given as
//! `metalherd.ignition=` on the kernel command line with plain busybox
//! `wget`, checks it is an Ignition config and takes its install
//! instructions from it (a VM without a disk gets nothing written), calls
//! home `installed`, prints `METALHERD-INSTALL-DONE` on the console and
//! powers off, which ends the QEMU).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The serial-console marker of a finished install.
pub const INSTALL_DONE: &str = "METALHERD-INSTALL-DONE";

pub struct TestOs {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
}

/// Build the initramfs into `dir`; returns it with the matching kernel.
pub fn build(dir: &Path) -> TestOs {
    super::require_tool("busybox");
    super::require_tool("cpio");
    let initrd = dir.join("test-os.cpio.gz");
    let out = Command::new(super::repo_root().join("deploy/lab/build-initramfs"))
        .arg(&initrd)
        .output()
        .expect("run deploy/lab/build-initramfs");
    assert!(
        out.status.success(),
        "build-initramfs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kernel = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        kernel.is_file(),
        "kernel {kernel:?} missing: install linux-image-amd64"
    );
    TestOs { kernel, initrd }
}
