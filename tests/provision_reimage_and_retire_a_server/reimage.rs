//! Story: reimage in place, on a real node. A Node of the lab's
//! kubeadm-made cluster (the Debian node image, joined by `kubeadm join`)
//! runs a Pod bound to it (`nodeName`, no scheduler needed) behind a
//! PodDisruptionBudget. Changing the class's image version (and its
//! kubelet: the set's rollout, roll.rs, of which vm1 is the first batch)
//! reimages the same server: metalherd cordons and drains the Node through the real
//! eviction API (the budget refuses the first evictions; once it is
//! removed the Pod is evicted), boots the installer again, coreos-installer
//! rewrites the OS and keeps the `data` partition the class preserves, and
//! the server rejoins under the same Node name with a new boot, Ready
//! before the Machine is.

use std::time::Duration;

use crate::common::lab::{Lab, boot_steps};
use crate::common::lab_disk;
use crate::common::lab_nodes::{NODE_DATA_MARKER, NODE_DATA_START, NODE_READY_TIMEOUT};
use crate::common::proc::wait_for;
use serde_json::Value;

const WORKLOAD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: pinned, namespace: default, labels: {app: pinned}}
spec:
  nodeName: vm1
  terminationGracePeriodSeconds: 5
  containers:
  - name: pause
    image: registry.k8s.io/pause:3.10.1
    imagePullPolicy: Never
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: pinned, namespace: default}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: pinned}}
"#;

fn node(lab: &Lab) -> Value {
    let (ok, out, err) = lab.kubectl(&["get", "node", "vm1", "-o", "json"]);
    assert!(ok, "kubectl get node vm1: {err}");
    serde_json::from_str(&out).unwrap()
}

fn node_ready(n: &Value) -> bool {
    n["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// `changed`: called once the new class is applied.
pub fn reimage_in_place(lab: &Lab, changed: impl FnOnce()) {
    let before = lab.machine("vm1").unwrap();
    let rev1 = before["status"]["provisionedRevision"]
        .as_str()
        .unwrap()
        .to_string();
    let boot1 = before["status"]["boot"]["id"].as_str().unwrap().to_string();
    let uid = before["metadata"]["uid"].clone();
    let installs_before = boot_steps(&before)
        .iter()
        .filter(|s| *s == "Installed")
        .count();
    let node_boot1 = node(lab)["status"]["nodeInfo"]["bootID"]
        .as_str()
        .unwrap()
        .to_string();

    // A workload the drain must move, behind a budget that forbids it.
    let manifest = lab.run.join("workload.yaml");
    std::fs::write(&manifest, WORKLOAD).unwrap();
    let (ok, _, err) = lab.kubectl(&["apply", "-f", &manifest.to_string_lossy()]);
    assert!(ok, "{err}");
    let running = wait_for(Duration::from_secs(600), || {
        let (_, phase, _) =
            lab.kubectl(&["get", "pod", "pinned", "-o", "jsonpath={.status.phase}"]);
        (phase == "Running").then_some(())
    });
    let (_, pod, _) = lab.kubectl(&["describe", "pod", "pinned"]);
    assert!(running.is_some(), "the Pod never ran on vm1:\n{pod}");
    eprintln!("lab: Pod pinned runs on vm1 ({} s)", lab.since());

    // The reinstall finds the disk by its size: the Machine's hints move
    // first (nothing happens), then a new image version in the class: a
    // new desired revision.
    let tuned = crate::tuned(lab);
    let env = [
        ("LAB_NODE_SET", "1"),
        ("LAB_NODE_IMAGE_VERSION", "12.1"),
        (tuned.0, tuned.1.as_str()),
        crate::hints::BY_SIZE,
        crate::raid::VM2_ON_VOLUME,
    ];
    crate::hints::apply_hints(lab, &env);
    crate::hints::assert_hints(lab, "minSizeGigabytes", serde_json::json!(6));
    lab.declare(&env);
    changed();
    let mut seen = Vec::new();
    lab.wait_phase("vm1", "Reimaging", Duration::from_secs(300), &mut seen);

    // The drain asks to evict the Pod and the budget refuses (429)…
    let refused = wait_for(Duration::from_secs(300), || {
        lab.evictions("pinned").contains(&429).then_some(())
    });
    assert!(
        refused.is_some(),
        "no eviction refused by the budget: {:?}",
        lab.evictions("pinned")
    );
    let n = node(lab);
    assert_eq!(n["spec"]["unschedulable"], true, "vm1 not cordoned: {n}");
    // …and the server is not touched while the Pod is there: the same
    // boot of the node, its kubelet still Ready.
    assert!(node_ready(&n), "{n}");
    assert_eq!(
        n["status"]["nodeInfo"]["bootID"].as_str(),
        Some(node_boot1.as_str()),
        "the server restarted before the drain finished: {n}"
    );
    // Lifting the budget lets the next eviction through.
    let (ok, _, err) = lab.kubectl(&["delete", "pdb", "pinned"]);
    assert!(ok, "{err}");
    let gone = wait_for(Duration::from_secs(300), || {
        let (ok, _, err) = lab.kubectl(&["get", "pod", "pinned"]);
        (!ok && err.contains("NotFound")).then_some(())
    });
    assert!(gone.is_some(), "the Pod was not evicted");
    assert!(
        lab.evictions("pinned").iter().any(|c| *c < 300),
        "{:?}",
        lab.evictions("pinned")
    );
    eprintln!("lab: Pod pinned evicted ({} s)", lab.since());

    // …and the same server ends Ready again, its Node rejoined.
    lab.wait_phase("vm1", "Ready", NODE_READY_TIMEOUT, &mut seen);
    let after = lab.machine("vm1").unwrap();
    let rev2 = after["status"]["provisionedRevision"].as_str().unwrap();
    assert_ne!(rev1, rev2, "revision did not move: {after}");
    assert_eq!(
        after["metadata"]["uid"], uid,
        "the Machine was replaced, not reimaged"
    );
    assert_eq!(after["spec"]["network"]["address"], "10.89.0.11/24");
    let installs_after = boot_steps(&after)
        .iter()
        .filter(|s| *s == "Installed")
        .count();
    assert!(
        installs_after > installs_before,
        "install path not served again: {after}"
    );
    // The class's BIOS attribute: written before the boot, read back.
    assert_eq!(
        after["status"]["bios"]["attributes"]["ProcTurboMode"], "Disabled",
        "{after}"
    );
    assert!(
        lab.bmc_calls("PATCH", "BIOS/Settings") > 0,
        "no BIOS settings written through the emulator"
    );
    // The class's firmware: updated through SimpleUpdate before the boot,
    // its task followed, the version read back after the reboot.
    assert_eq!(
        after["status"]["firmware"]["versions"]["BIOS"], "1.1.0",
        "{after}"
    );
    assert!(
        lab.bmc_calls("POST", "UpdateService.SimpleUpdate") > 0,
        "no SimpleUpdate through the emulator"
    );
    let boot2 = after["status"]["boot"]["id"].as_str().unwrap();
    assert_ne!(boot1, boot2, "no new boot: {after}");
    let console = lab.console(1);
    assert!(
        console
            .matches("metalherd-install: done, rebooting")
            .count()
            >= 2,
        "the installer did not run twice"
    );

    // The Node: same name, Ready, schedulable again, a new boot.
    let n = node(lab);
    assert!(node_ready(&n), "{n}");
    assert_ne!(n["spec"]["unschedulable"], true, "still cordoned: {n}");
    assert_ne!(
        n["status"]["nodeInfo"]["bootID"].as_str(),
        Some(node_boot1.as_str()),
        "the Node did not come back from a new boot: {n}"
    );

    crate::hints::assert_installed_to_vda(lab, 2);
    crate::hints::assert_decoy_untouched(lab);

    // The preserved partition kept what was there before both installs.
    let img = lab.disk(1);
    let data = lab_disk::partition(&img, "data").expect("data partition gone");
    assert_eq!(data.start, NODE_DATA_START);
    assert_eq!(lab_disk::first_line(&img, data.start), NODE_DATA_MARKER);
}
