//! Story: provision a server. A Machine declared with only its BMC (the
//! virtual rack's Redfish emulator driving a real QEMU VM) and its network,
//! claimed by the MachineSet `lab-nodes` (its template: the class, with
//! kubelet v1.34.3), goes Provisioning -> Provisioned -> Ready through
//! real DHCP, TFTP (UEFI firmware fetches iPXE) and HTTP (script, kernel,
//! initrd, the live root, Ignition). The OS is a real one (the Debian node
//! image deploy/node-image/ builds, class `lab-node`): real Ignition applies
//! the install config in the live system, metalherd's install script picks
//! the disk and writes the image with coreos-installer, the installed OS's
//! first boot runs Ignition with the node config, containerd and kubelet
//! start and `kubeadm join` joins the lab's kubeadm-made cluster; metalherd
//! marks the Machine Ready only once the Node is Ready there. At its end
//! neither the join token nor the BMC password appears in metalherd's log,
//! metrics, Events or the Machine's status.

use crate::common::control_plane::PREVIOUS_KUBE_VERSION;
use crate::common::lab::{Lab, boot_steps, mac};
use crate::common::lab_disk;
use crate::common::lab_nodes::{NODE_DATA_MARKER, NODE_DATA_START};

/// The steps a provisioning boot must show, in this order.
pub const INSTALL_STEPS: [&str; 8] = [
    "DHCPAck",
    "TFTP",
    "Script",
    "Kernel",
    "Initrd",
    "Ignition",
    "Installed",
    "Booted",
];

pub fn assert_steps_in_order(steps: &[String], want: &[&str]) {
    let mut it = steps.iter();
    for w in want {
        assert!(
            it.any(|s| s == w),
            "boot step {w} missing or out of order in {steps:?}"
        );
    }
}

/// `seen`: the phases the Machine went through to its first Ready.
pub fn provision_a_server(lab: &Lab, seen: &[String]) {
    for p in ["Provisioning", "Provisioned", "Ready"] {
        assert!(
            seen.iter().any(|s| s == p),
            "phase {p} never seen: {seen:?}"
        );
    }
    let m = lab.machine("vm1").unwrap();
    // The boot MAC was learned from the BMC's inventory.
    assert_eq!(
        m["spec"]["bootMACAddress"].as_str(),
        Some(mac(1).as_str()),
        "{m}"
    );
    assert!(
        m["status"]["inventory"]["nics"]
            .as_array()
            .is_some_and(|n| !n.is_empty()),
        "{m}"
    );
    assert_steps_in_order(&boot_steps(&m), &INSTALL_STEPS);
    // The timeline, for BENCHMARKS.md's power-on to Node Ready.
    for s in m["status"]["bootHistory"].as_array().into_iter().flatten() {
        eprintln!("lab: {} {}", s["time"], s["step"]);
    }
    assert!(m["status"]["provisionedRevision"].is_string(), "{m}");
    assert_eq!(m["status"]["powerState"], "On");
    assert_eq!(m["status"]["nodeRef"]["name"], "vm1", "{m}");

    // The real installer ran in the live system and wrote the image.
    let console = lab.console(1);
    for line in [
        "metalherd-install: installing Debian (CoreOS-style)",
        "metalherd-install: done, rebooting",
    ] {
        assert!(console.contains(line), "{line:?} not on the console");
    }

    // The data partition the class preserves is still where it was, with
    // what was written there before the install.
    let img = lab.disk(1);
    let data = lab_disk::partition(&img, "data").expect("data partition gone");
    assert_eq!(
        data.start,
        NODE_DATA_START,
        "{:?}",
        lab_disk::partitions(&img)
    );
    assert_eq!(lab_disk::first_line(&img, data.start), NODE_DATA_MARKER);
    assert!(
        lab_disk::partition(&img, "root").is_some(),
        "no root partition written: {:?}",
        lab_disk::partitions(&img)
    );

    // The serial number led the installer to /dev/vda, not the smaller
    // decoy.
    crate::hints::assert_hints(lab, "serialNumber", serde_json::json!("node-root-8g"));
    crate::hints::assert_installed_to_vda(lab, 1);
    crate::hints::assert_decoy_untouched(lab);

    // The Node: Ready, the class's labels and taint, the image's
    // containerd and the class's kubelet.
    let (ok, out, err) = lab.kubectl(&["get", "node", "vm1", "-o", "json"]);
    assert!(ok, "kubectl get node vm1: {err}");
    let node: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ready = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    assert!(ready, "{out}");
    let labels = &node["metadata"]["labels"];
    assert_eq!(labels["node.kubernetes.io/pool"], "lab", "{labels}");
    assert_eq!(labels["metalherd.dev/os"], "debian-coreos", "{labels}");
    assert!(
        node["spec"]["taints"].as_array().is_some_and(|t| t
            .iter()
            .any(|t| t["key"] == "metalherd.dev/lab" && t["effect"] == "PreferNoSchedule")),
        "{out}"
    );
    let info = &node["status"]["nodeInfo"];
    assert_eq!(info["kubeletVersion"], PREVIOUS_KUBE_VERSION, "{info}");
    assert!(
        info["containerRuntimeVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("containerd://1.6.20")),
        "{info}"
    );
    let (_, wide, _) = lab.kubectl(&["get", "nodes", "-o", "wide"]);
    eprintln!("lab: kubectl get nodes -o wide\n{wide}");

    // describe tells the story without logs.
    let d = lab.cli_ok(&["describe", "machine", "vm1"]);
    assert!(d.contains("Installed") && d.contains("Booted"), "{d}");
    // After a whole provisioning, no secret went where operators read.
    lab.assert_no_secret_leaks();
}
