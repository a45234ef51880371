//! Story: roll a kubelet upgrade through a MachineSet of real nodes. The
//! rack's two servers are the set `lab-nodes` (deploy/lab/lib.sh: in place, one
//! machine at a time, its gate the Node Ready for 30 s and kubelet's
//! `/healthz` on the node's address answering 200), installed with kubelet
//! v1.34.3 (scripts/kubernetes-build-previous). The class then moves to
//! v1.34.4 (with the reimage story's image version, BIOS attribute and
//! firmware): `rollout status` follows revision 2 through two batches of
//! one, each server is reinstalled once, and the second batch starts only
//! once the first server's Node is back Ready on the new kubelet;
//! `kubectl get nodes` ends with both on v1.34.4. The first batch is vm1,
//! the reimage story's server (reimage.rs), checked while the roll goes on.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::control_plane::{KUBE_VERSION, PREVIOUS_KUBE_VERSION};
use crate::common::lab::Lab;
use crate::common::out_of_service::{log_tail, new_installs, passed_batches, rollout_status_of};
use crate::common::proc::ChildGuard;

/// The rack's servers, all members of [`SET`].
pub const NODES: usize = 2;
pub const SET: &str = "lab-nodes";

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

/// The set's first rollout: both servers installed, their Nodes Ready on
/// the previous kubelet, kubelet's `/healthz` answering.
pub fn first_rollout(lab: &Lab) {
    let (ok, out, err) = rollout_status_of(lab, SET, "40m");
    assert!(ok, "first rollout: {out}{err}\n{}", log_tail(lab));
    assert!(
        out.contains(&format!(
            "successfully rolled out: revision 1 on {NODES} machines"
        )),
        "{out}"
    );
    let (_, wide, _) = lab.kubectl(&["get", "nodes", "-o", "wide"]);
    eprintln!("lab: kubectl get nodes -o wide\n{wide}");
    let before = nodes(lab);
    for i in 1..=NODES {
        let name = format!("vm{i}");
        assert_eq!(
            before.get(&name),
            Some(&(true, PREVIOUS_KUBE_VERSION.to_string())),
            "{before:?}"
        );
        // The gate's probe: kubelet itself answers on the node's address.
        assert_eq!(healthz(lab, i), "ok", "vm{i}'s kubelet /healthz");
    }
}

/// Sets the flag when dropped, also when a check panics on the way.
struct Raise<'a>(&'a AtomicBool);

impl Drop for Raise<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The upgrade: the reimage story applies revision 2 and checks vm1 while
/// `rollout status` follows the set and the rack is looked at every 2 s.
pub fn roll_a_kubelet_upgrade(lab: &Lab) {
    let history_before: BTreeMap<String, Value> = (1..=NODES)
        .map(|i| {
            let name = format!("vm{i}");
            let m = lab.machine(&name).unwrap();
            (name, m["status"]["bootHistory"].clone())
        })
        .collect();
    let s = Instant::now();
    let done = AtomicBool::new(false);
    let log = lab.run.join("rollout-2.log");
    let mut rollout: Option<ChildGuard> = None;
    let samples = std::thread::scope(|sc| {
        let raise = Raise(&done);
        let looks = sc.spawn(|| {
            let mut samples = Vec::new();
            while !done.load(Ordering::SeqCst) {
                samples.push(sample(lab));
                std::thread::sleep(Duration::from_secs(2));
            }
            samples
        });
        crate::reimage::reimage_in_place(lab, || {
            let args = ["rollout", "status", "machineset", SET, "--timeout", "60m"];
            let mut c = lab.cli_command(&args);
            rollout = Some(ChildGuard::spawn("rollout status", &mut c, &log));
        });
        let child = rollout.as_mut().and_then(|r| r.child.as_mut());
        let status = child.expect("the reimage applied no change").wait();
        drop(raise);
        (status.unwrap(), looks.join().unwrap())
    });
    let (status, samples) = samples;
    let out = std::fs::read_to_string(&log).unwrap_or_default();
    eprintln!("$ metalherd rollout status machineset {SET}\n{out}");
    eprintln!("lab: the kubelet upgrade rolled in {:?}", s.elapsed());
    assert!(status.success(), "rollout: {out}\n{}", log_tail(lab));
    assert!(
        out.contains(&format!(
            "successfully rolled out: revision 2 on {NODES} machines"
        )),
        "{out}"
    );
    let batches = passed_batches(&out, 2);
    assert_eq!(batches.len(), NODES, "one machine per batch: {out}");
    let order: Vec<String> = batches.values().flatten().cloned().collect();
    assert_eq!(order.len(), NODES, "{batches:?}");
    assert_eq!(order[0], "vm1", "the first batch is the first by name");

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
    let after = nodes(lab);
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
        assert_eq!(healthz(lab, i), "ok", "{name}'s kubelet /healthz");
    }
    assert_eq!(after.len(), NODES, "{after:?}");
    let (_, wide, _) = lab.kubectl(&["get", "nodes", "-o", "wide"]);
    eprintln!("lab: kubectl get nodes -o wide\n{wide}");
}
