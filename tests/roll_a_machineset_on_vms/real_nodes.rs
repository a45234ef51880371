//! Story: roll a kubelet upgrade through a MachineSet of real nodes
//! (tests/common/lab_nodes.rs: two VMs, the Debian node image, the lab's
//! kubeadm-made cluster). The set `lab-nodes` (deploy/lab/lib.sh: in place,
//! one machine at a time, its gate the Node Ready for 30 s and kubelet's
//! `/healthz` on the node's address answering 200) installs both servers
//! with kubelet v1.34.3 (scripts/kubernetes-build-previous). The class then
//! moves to v1.34.4: `rollout status` follows revision 2 through two batches
//! of one, each server is reinstalled once, and the second batch starts
//! only once the first server's Node is back Ready on the new kubelet;
//! `kubectl get nodes` ends with both on v1.34.4.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{log_tail, new_installs, rollout_status_of};
use crate::common::control_plane::{KUBE_VERSION, PREVIOUS_KUBE_VERSION};
use crate::common::lab::{LAB_LOCK, Lab};

const NODES: usize = 2;
const SET: &str = "lab-nodes";

/// What one look at the rack saw: each Machine's phase, and each Node's
/// (Ready, kubelet version).
struct Sample {
    phases: BTreeMap<String, String>,
    nodes: BTreeMap<String, (bool, String)>,
}

fn sample(lab: &Lab) -> Sample {
    let mut phases = BTreeMap::new();
    for i in 1..=NODES {
        let name = format!("vm{i}");
        phases.insert(name.clone(), lab.phase(&name).unwrap_or_default());
    }
    Sample {
        phases,
        nodes: nodes(lab),
    }
}

/// Every Node of the lab's cluster: (Ready, kubelet version) by name.
fn nodes(lab: &Lab) -> BTreeMap<String, (bool, String)> {
    let (ok, out, _) = lab.kubectl(&["get", "nodes", "-o", "json"]);
    if !ok {
        return BTreeMap::new();
    }
    let list: Value = serde_json::from_str(&out).unwrap_or_default();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            let ready = n["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            let version = n["status"]["nodeInfo"]["kubeletVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (
                n["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                (ready, version),
            )
        })
        .collect()
}

/// What kubelet's `/healthz` on VM `i` answers, asked from the rack's
/// namespace (the set's probe).
fn healthz(lab: &Lab, i: usize) -> String {
    let o = std::process::Command::new("ip")
        .args(["netns", "exec", &lab.ns, "curl", "-s", "--max-time", "10"])
        .arg(format!("http://10.89.0.{}:10248/healthz", 10 + i))
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn roll_a_kubelet_upgrade_through_real_nodes() {
    let _guard = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let t = Instant::now();
    let lab = Lab::up_nodes(NODES);
    let old = [
        ("LAB_NODE_SET", "1"),
        ("LAB_NODE_KUBE_VERSION", PREVIOUS_KUBE_VERSION),
    ];
    lab.declare(&old);
    let (ok, out, err) = rollout_status_of(&lab, SET, "40m");
    assert!(ok, "first rollout: {out}{err}\n{}", log_tail(&lab));
    assert!(
        out.contains(&format!(
            "successfully rolled out: revision 1 on {NODES} machines"
        )),
        "{out}"
    );
    eprintln!("lab: two nodes installed after {:?}", t.elapsed());
    let (_, wide, _) = lab.kubectl(&["get", "nodes", "-o", "wide"]);
    eprintln!("lab: kubectl get nodes -o wide\n{wide}");
    let before = nodes(&lab);
    for i in 1..=NODES {
        let name = format!("vm{i}");
        assert_eq!(
            before.get(&name),
            Some(&(true, PREVIOUS_KUBE_VERSION.to_string())),
            "{before:?}"
        );
        // The gate's probe: kubelet itself answers on the node's address.
        assert_eq!(healthz(&lab, i), "ok", "vm{i}'s kubelet /healthz");
    }
    let history_before: BTreeMap<String, Value> = (1..=NODES)
        .map(|i| {
            let name = format!("vm{i}");
            let m = lab.machine(&name).unwrap();
            (name, m["status"]["bootHistory"].clone())
        })
        .collect();

    // The class moves to the pinned release's kubelet and kubeadm:
    // revision 2. `rollout status` follows it while the rack is watched.
    let s = Instant::now();
    lab.write_manifests(&[("LAB_NODE_SET", "1")]);
    lab.cli_ok(&[
        "apply",
        "-f",
        &lab.run.join("class.yaml").display().to_string(),
    ]);
    let (samples, (ok, out, err)) = std::thread::scope(|sc| {
        let rollout = sc.spawn(|| rollout_status_of(&lab, SET, "60m"));
        let mut samples = Vec::new();
        while !rollout.is_finished() {
            samples.push(sample(&lab));
            std::thread::sleep(Duration::from_secs(2));
        }
        (samples, rollout.join().unwrap())
    });
    eprintln!("lab: the kubelet upgrade rolled in {:?}", s.elapsed());
    assert!(ok, "rollout: {out}{err}\n{}", log_tail(&lab));
    assert!(
        out.contains(&format!(
            "successfully rolled out: revision 2 on {NODES} machines"
        )),
        "{out}"
    );
    let batches = crate::common::out_of_service::passed_batches(&out, 2);
    assert_eq!(batches.len(), NODES, "one machine per batch: {out}");
    let order: Vec<String> = batches.values().flatten().cloned().collect();
    assert_eq!(order.len(), NODES, "{batches:?}");

    // One at a time, and the second only after the first is back: at the
    // first look where the second machine was out of service, the first's
    // Node was Ready on the new kubelet.
    let (first, second) = (&order[0], &order[1]);
    for s in &samples {
        let out: Vec<&String> = s
            .phases
            .iter()
            .filter(|(_, p)| p.as_str() != "Ready")
            .map(|(n, _)| n)
            .collect();
        assert!(out.len() < 2, "both machines out of service: {out:?}");
    }
    let at = samples
        .iter()
        .position(|s| s.phases.get(second).is_some_and(|p| p != "Ready"));
    let at = at.unwrap_or_else(|| panic!("{second} was never seen out of service"));
    let n = samples[at].nodes.get(first);
    assert_eq!(
        n,
        Some(&(true, KUBE_VERSION.to_string())),
        "{second} left service before {first}'s Node was Ready on {KUBE_VERSION}"
    );
    assert!(
        samples[..at]
            .iter()
            .any(|s| s.phases.get(first).is_some_and(|p| p != "Ready")),
        "{first} was never seen out of service before {second}"
    );

    // Each server reinstalled once, the same Node name, on the new kubelet.
    let after = nodes(&lab);
    for i in 1..=NODES {
        let name = format!("vm{i}");
        let m = lab.machine(&name).unwrap();
        assert_eq!(m["status"]["phase"], "Ready", "{m:#}");
        assert_eq!(
            m["metadata"]["labels"]["metalherd.dev/machineset-revision"], "2",
            "{m:#}"
        );
        let new = new_installs(&history_before[&name], &m["status"]["bootHistory"]);
        assert_eq!(new, 1, "{name} installed {new} times");
        assert_eq!(
            after.get(&name),
            Some(&(true, KUBE_VERSION.to_string())),
            "{after:?}"
        );
        assert_eq!(healthz(&lab, i), "ok", "{name}'s kubelet /healthz");
    }
    assert_eq!(after.len(), NODES, "{after:?}");
    let (_, wide, _) = lab.kubectl(&["get", "nodes", "-o", "wide"]);
    eprintln!("lab: kubectl get nodes -o wide\n{wide}");
    eprintln!("lab: the real-node roll took {:?}", t.elapsed());
}
