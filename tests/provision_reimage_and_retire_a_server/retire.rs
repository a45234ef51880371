//! Story: retire a server, a real node. Deleting its Machine deprovisions
//! it (the finalizer holds the object): metalherd cordons and drains the
//! Node through the eviction API (a Pod bound to it is evicted) and deletes
//! it; the class wipes on deprovision, so the server network-boots the live
//! system once more, where real Ignition applies the wipe config and
//! `metalherd-wipe.sh` picks the disk from the Machine's rootDeviceHints
//! and clears every partition's signatures and the partition tables (the
//! `data` partition too: a reimage keeps it, a retirement does not), calls
//! home `wiped` and powers off. Then the address is released and the
//! Machine is gone.

use std::time::Duration;

use crate::common::lab::Lab;
use crate::common::lab_disk;
use crate::common::proc::wait_for;

const WORKLOAD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: leaving, namespace: default}
spec:
  nodeName: vm1
  terminationGracePeriodSeconds: 5
  containers:
  - name: pause
    image: registry.k8s.io/pause:3.10.1
    imagePullPolicy: Never
"#;

pub fn retire_a_server(lab: &Lab) {
    let m = lab.machine("vm1").unwrap();
    assert_eq!(m["status"]["phase"], "Ready", "{m}");
    assert!(
        m["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty()),
        "no finalizer guards the machine: {m}"
    );
    let bound = wait_for(Duration::from_secs(30), || {
        lab.metric("metalherd_dhcp_leases_bound")
            .filter(|v| *v >= 1.0)
    });
    let bound = bound.unwrap_or_else(|| panic!("no bound lease:\n{}", lab.metrics()));

    // A workload on the node the drain must move.
    let manifest = lab.run.join("leaving.yaml");
    std::fs::write(&manifest, WORKLOAD).unwrap();
    let (ok, _, err) = lab.kubectl(&["apply", "-f", &manifest.to_string_lossy()]);
    assert!(ok, "{err}");
    let running = wait_for(Duration::from_secs(600), || {
        let (_, phase, _) =
            lab.kubectl(&["get", "pod", "leaving", "-o", "jsonpath={.status.phase}"]);
        (phase == "Running").then_some(())
    });
    let (_, pod, _) = lab.kubectl(&["describe", "pod", "leaving"]);
    assert!(running.is_some(), "the Pod never ran on vm1:\n{pod}");

    // Where the installs put partitions: the wipe must leave nothing there.
    let img = lab.disk(1);
    let parts = lab_disk::partitions(&img).expect("vm1's disk has no table");
    let names: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
    assert!(
        names.contains(&"data") && names.contains(&"root"),
        "{names:?}"
    );
    let starts: Vec<u64> = parts.iter().map(|p| p.start).collect();
    let installs = lab.console(1).matches("metalherd-install: done").count();

    // The wipe finds the disk by its device name.
    let tuned = crate::tuned(lab);
    crate::hints::apply_hints(
        lab,
        &[
            ("LAB_NODE_IMAGE_VERSION", "12.1"),
            (tuned.0, tuned.1.as_str()),
            crate::hints::BY_NAME,
        ],
    );
    crate::hints::assert_hints(lab, "deviceName", serde_json::json!("/dev/vda"));

    let out = lab.cli_ok(&["delete", "machine", "vm1"]);
    assert!(out.contains("vm1"), "{out}");

    // The drain evicts the Pod; the Node is deleted.
    let evicted = wait_for(Duration::from_secs(600), || {
        let (ok, _, err) = lab.kubectl(&["get", "pod", "leaving"]);
        (!ok && err.contains("NotFound")).then_some(())
    });
    assert!(
        evicted.is_some(),
        "the Pod was not evicted:\n{}",
        lab.metalherd_log()
    );
    assert!(
        lab.evictions("leaving").iter().any(|c| *c < 300),
        "the Pod left without an eviction: {:?}",
        lab.evictions("leaving")
    );

    // The wiper boots, clears the disk and calls home; then the server is
    // off, its address released, the Machine gone.
    let gone = wait_for(Duration::from_secs(1200), || {
        lab.machine("vm1").is_none().then_some(())
    });
    let console = lab.console(1);
    assert!(
        gone.is_some(),
        "vm1 still exists: {:?}\nconsole:\n{}\n{}",
        lab.machine("vm1"),
        crate::common::lab::tail(&console, 6000),
        lab.metalherd_log()
    );
    let (ok, _, err) = lab.kubectl(&["get", "node", "vm1"]);
    assert!(
        !ok && err.contains("NotFound"),
        "the Node outlived its Machine: {err}"
    );
    // The script's last console line may not make it out: metalherd
    // powers the server off as soon as the `wiped` call-home (sent once
    // the disk is cleared and synced) arrives.
    assert!(
        console.contains("metalherd-wipe: wiping /dev/vda"),
        "the wipe script did not start on /dev/vda"
    );
    assert_eq!(
        console.matches("metalherd-install: done").count(),
        installs,
        "the retirement installed again"
    );
    let log = lab.metalherd_log();
    assert!(
        log.lines()
            .any(|l| l.contains("/callhome/wiped") && l.contains("call-home recorded")),
        "metalherd did not record the wiped call-home:\n{log}"
    );
    let off = wait_for(Duration::from_secs(60), || {
        (!lab.vm_running(1)).then_some(())
    });
    assert!(off.is_some(), "vm1 still runs after retirement");
    // vm1's lease is released; the other server keeps its own.
    let released = wait_for(Duration::from_secs(30), || {
        lab.metric("metalherd_dhcp_leases_bound")
            .filter(|v| *v < bound)
    });
    assert!(
        released.is_some(),
        "vm1's lease still bound after retirement:\n{}",
        lab.metrics()
    );
    assert!(log.contains("lease released for a retired machine"));

    // The VM is off: its disk is what the wiper left. No partition table
    // (primary, backup, protective MBR) and no filesystem signature where
    // the partitions were, `data` included.
    assert_eq!(
        lab_disk::partitions(&img),
        None,
        "a partition table is left"
    );
    let left = lab_disk::leftovers(&img, &starts);
    assert!(left.is_empty(), "the wipe left {left:?}");

    let ev = lab.cli_ok(&["get", "events", "-o", "json"]);
    assert!(ev.contains("Deprovision"), "{ev}");
}
