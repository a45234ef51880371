//! Story: select a disk by hints. The VM has two disks: `/dev/vda` (8 GiB,
//! serial `node-root-8g`), where the OS belongs, and `/dev/vdb` (4 GiB,
//! serial `decoy-4g`, a partition `decoy` with a marker), which the
//! installer's default (the smallest disk) would pick. Each step of the
//! server's life names `/dev/vda` another way in `spec.rootDeviceHints`:
//! its serial number for the install, a minimum size for the reinstall,
//! its device name for the wipe. `metalherd-select-disk.sh` (included in
//! the install and wipe scripts the live system ran) must pick `/dev/vda`
//! every time, and the decoy ends as it began.

use crate::common::lab::Lab;
use crate::common::lab_disk;
use crate::common::lab_nodes::{DECOY_MARKER, DECOY_START};

/// The provisioning's hints: the serial number.
pub const BY_SERIAL: (&str, &str) = ("LAB_HINTS", "{serialNumber: node-root-8g}");
/// The reinstall's hints: at least 6 GiB (only vda has them).
pub const BY_SIZE: (&str, &str) = ("LAB_HINTS", "{minSizeGigabytes: 6}");
/// The wipe's hints: the device name.
pub const BY_NAME: (&str, &str) = ("LAB_HINTS", "{deviceName: /dev/vda}");

/// Apply only the Machine, with these hints (and the class's `env`, which
/// is not applied): it takes effect at the next install or wipe, not by
/// itself.
/// vm2 keeps its hints (raid.rs).
pub fn apply_hints(lab: &Lab, env: &[(&str, &str)]) {
    let mut env = env.to_vec();
    env.push(crate::raid::VM2_ON_VOLUME);
    lab.write_manifests(&env);
    lab.cli_ok(&[
        "apply",
        "-f",
        &lab.run.join("machines.yaml").display().to_string(),
    ]);
}

/// The Machine's hints as metalherd holds them.
pub fn assert_hints(lab: &Lab, key: &str, want: serde_json::Value) {
    let m = lab.machine("vm1").unwrap();
    let h = &m["spec"]["rootDeviceHints"];
    assert_eq!(h[key], want, "{h}");
    assert_eq!(h.as_object().map(|o| o.len()), Some(1), "{h}");
}

/// The `n`th install on the console (1-based) wrote `/dev/vda`.
pub fn assert_installed_to_vda(lab: &Lab, n: usize) {
    let console = lab.console(1);
    let installs: Vec<&str> = console
        .lines()
        .filter(|l| l.contains("metalherd-install: installing "))
        .collect();
    let line = installs.get(n - 1).unwrap_or_else(|| {
        panic!("install {n} not on the console: {installs:?}");
    });
    // The kernel may print on the same console line right after it.
    let target = line
        .split_once("metalherd-install: installing ")
        .and_then(|(_, rest)| rest.split_once(" to "))
        .and_then(|(_, t)| t.split(|c: char| c.is_whitespace() || c == '[').next());
    assert_eq!(target, Some("/dev/vda"), "{line}");
}

/// The decoy disk still has its table, its one partition and its marker.
pub fn assert_decoy_untouched(lab: &Lab) {
    let img = lab.decoy(1);
    let parts = lab_disk::partitions(&img).expect("the decoy lost its partition table");
    let names: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["decoy"], "{parts:?}");
    assert_eq!(parts[0].start, DECOY_START);
    assert_eq!(lab_disk::first_line(&img, DECOY_START), DECOY_MARKER);
}

/// After the three stories: two installs and a wipe, all on `/dev/vda`.
pub fn select_a_disk_by_hints(lab: &Lab) {
    assert_installed_to_vda(lab, 1);
    assert_installed_to_vda(lab, 2);
    let console = lab.console(1);
    assert!(
        console.contains("metalherd-wipe: wiping /dev/vda"),
        "the wipe did not pick /dev/vda"
    );
    assert_decoy_untouched(lab);
}
