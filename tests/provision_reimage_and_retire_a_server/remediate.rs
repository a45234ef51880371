//! Story: remediate an unhealthy node, a real one. The set `lab-nodes` is
//! deleted (its servers stay Ready, unclaimed); a MachineSet with
//! `spec.remediation` adopts both Ready servers as they are (no reinstall). The
//! VM is then suspended through libvirt: its kubelet stops posting, the
//! cluster's node controller marks the Node NotReady, the Machine's
//! `NodeReady` turns False, and once that has lasted `unhealthySeconds`
//! the set asks for a power cycle. The Machine controller power-cycles the
//! server through its Redfish BMC (sushy-tools' libvirt driver: the
//! suspended domain is destroyed and started), the server boots its disk,
//! the kubelet rejoins, and the set records the recovery. No install ran:
//! the same boot record and revision, a new node boot id. Deleting the set
//! leaves the servers provisioned, unclaimed, for the next story.
//!
//! The escalation to a reimage, the `maxUnhealthy` breaker and a rollout in
//! flight are tests/remediate_an_unhealthy_node.rs, on the simulated rack.

use std::time::Duration;

use crate::common::lab::Lab;
use crate::common::lab_nodes::NODE_READY_TIMEOUT;
use crate::common::proc::wait_for;
use serde_json::{Value, json};

fn node_boot_id(lab: &Lab) -> String {
    let (ok, out, err) = lab.kubectl(&[
        "get",
        "node",
        "vm1",
        "-o",
        "jsonpath={.status.nodeInfo.bootID}",
    ]);
    assert!(ok, "kubectl get node vm1: {err}");
    out
}

fn set(lab: &Lab) -> Value {
    let o = lab.cli(&["get", "machineset", "healers", "-o", "json"]);
    serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)
}

fn history(m: &Value) -> Vec<String> {
    m["status"]["bootHistory"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["step"].as_str().map(str::to_string))
        .collect()
}

pub fn remediate_an_unhealthy_node(lab: &Lab) {
    let before = lab.machine("vm1").unwrap();
    assert_eq!(before["status"]["phase"], "Ready", "{before}");
    let class = before["spec"]["classRef"]["name"].clone();
    let boot = before["status"]["boot"]["id"].clone();
    let revision = before["status"]["provisionedRevision"].clone();
    let node_boot = node_boot_id(lab);

    // The rollout's set lets its servers go, as they are.
    delete_set(lab, crate::roll::SET);

    // A set adopts the Ready servers: its template is what they run.
    let doc = json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": "healers", "namespace": "default"},
        "spec": {
            "replicas": crate::roll::NODES,
            "selector": {"matchLabels": {"rack": "lab"}},
            "template": {"classRef": {"name": class}},
            "remediation": {"unhealthyWhen": ["NodeNotReady"], "unhealthySeconds": 10,
                "recoverySeconds": 900, "powerCycles": 1, "reimages": 0, "maxUnhealthy": 1}
        }
    });
    let path = lab.run.join("healers.json");
    std::fs::write(&path, doc.to_string()).unwrap();
    lab.cli_ok(&["apply", "-f", path.to_str().unwrap()]);
    let claimed = wait_for(Duration::from_secs(60), || {
        let m: Vec<Value> = (1..=crate::roll::NODES)
            .map(|i| lab.machine(&format!("vm{i}")))
            .collect::<Option<_>>()?;
        m.iter()
            .all(|m| m["metadata"]["labels"]["metalherd.dev/machineset"] == "healers")
            .then_some(m)
    });
    let claimed = claimed.unwrap_or_else(|| panic!("not adopted: {:#}", set(lab)["status"]));
    assert_eq!(
        claimed[0]["status"]["boot"]["id"], boot,
        "adopted without a boot"
    );
    assert_eq!(claimed[1]["status"]["phase"], "Ready", "{}", claimed[1]);
    let resets = lab.reset_calls();

    // The server stops answering.
    lab.virsh(&["suspend", &format!("{}-vm1", lab.ns)]);
    eprintln!("lab: vm1 suspended ({} s)", lab.since());
    let not_ready = wait_for(Duration::from_secs(300), || {
        let m = lab.machine("vm1")?;
        let c = m["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "NodeReady")?
            .clone();
        (c["status"] == "False").then_some(())
    });
    assert!(not_ready.is_some(), "NodeReady never turned False");
    eprintln!("lab: vm1 NodeReady=False ({} s)", lab.since());

    // The set asks for the power cycle; the BMC carries it out.
    let cycled = wait_for(Duration::from_secs(180), || {
        (lab.reset_calls() > resets).then_some(())
    });
    assert!(
        cycled.is_some(),
        "no power cycle: {:#}\n{}",
        set(lab)["status"],
        lab.metalherd_log()
    );
    eprintln!("lab: vm1 power-cycled ({} s)", lab.since());
    assert!(lab.vm_running(1), "vm1 not running after the power cycle");

    // It boots its disk and the Node comes back: the set records the
    // recovery and drops its record.
    let recovered = wait_for(NODE_READY_TIMEOUT, || {
        let s = set(lab);
        let healed = s["status"]["remediations"]
            .as_array()
            .is_none_or(Vec::is_empty);
        (healed && node_boot_id(lab) != node_boot).then_some(())
    });
    assert!(
        recovered.is_some(),
        "vm1 did not recover: {:#}",
        set(lab)["status"]
    );
    eprintln!("lab: vm1 recovered ({} s)", lab.since());
    let after = lab.machine("vm1").unwrap();
    assert_eq!(after["status"]["phase"], "Ready", "{after}");
    assert_eq!(after["status"]["boot"]["id"], boot, "no install ran");
    // Claimed, it records its set revision's name for what it installed.
    let pinned = set(lab)["status"]["revisions"][0]["hash"].clone();
    assert_eq!(after["status"]["provisionedRevision"], pinned, "{after}");
    assert_ne!(revision, Value::Null);
    let h = history(&after);
    assert!(h.contains(&"PowerCycled".to_string()), "{h:?}");
    assert!(!h.contains(&"ReimageRequested".to_string()), "{h:?}");
    let asked = after["metadata"]["annotations"]["metalherd.dev/power-cycle"]
        .as_str()
        .unwrap_or_default();
    assert!(
        asked.starts_with("MachineSet healers: PowerCycle 1 of 1 at "),
        "{asked}"
    );
    let ev = lab.cli_ok(&["describe", "machineset", "healers"]);
    for reason in ["RemediationPowerCycle", "RemediationSucceeded"] {
        assert!(ev.contains(reason), "no {reason} event:\n{ev}");
    }
    assert!(
        lab.metric("metalherd_machineset_remediations_total{outcome=\"recovered\"}")
            .is_some_and(|v| v >= 1.0),
        "{}",
        lab.metrics()
    );

    // Deleting the set leaves vm1 provisioned and unclaimed.
    delete_set(lab, "healers");
}

/// Delete MachineSet `name`: every server it held ends unclaimed and Ready.
fn delete_set(lab: &Lab, name: &str) {
    lab.cli_ok(&["delete", "machineset", name]);
    for i in 1..=crate::roll::NODES {
        let vm = format!("vm{i}");
        let released = wait_for(Duration::from_secs(60), || {
            let m = lab.machine(&vm)?;
            m["metadata"]["labels"]["metalherd.dev/machineset"]
                .is_null()
                .then_some(m)
        });
        let m = released.unwrap_or_else(|| panic!("{vm} still claimed by {name}"));
        assert_eq!(m["status"]["phase"], "Ready", "{m}");
    }
}
