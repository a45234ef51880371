//! Stories: adopt running servers, roll a MachineSet, roll back a bad
//! revision, and remediate an unhealthy node, on the virtual rack (tests/common/lab.rs: four UEFI QEMU
//! VMs in a namespace, their Redfish BMCs from sushy-tools' libvirt driver,
//! `metalherd serve` on the rack's bridge). A VM boot costs about a minute
//! of software emulation, so one rack is provisioned once and the stories
//! run on it, in order, in one test. Everything a user does goes through the CLI: `apply`,
//! `rollout status`, `rollout history`. The simulated-rack versions (and
//! scale, restart and race stories) are tests/roll_a_machineset.rs.
//!
//! The set `workers` claims the four VMs (a pool declared without a class,
//! two of them adopted) with class `lab`, maxUnavailable 2, and a health gate: each installed
//! VM's test OS serves `http://ADDRESS/cgi-bin/healthz` (busybox httpd),
//! answering the status a `health=NNN` argument names among the installed
//! kernel arguments (the class's `kernelArgs`, from the Ignition config
//! metalherd served for that install), else 200.
//!
//! - `roll_a_machineset`: the class's image version changes (revision 2).
//!   `rollout status` follows it to completion in two batches of two; the
//!   watch streams of the Machines and the set never show more than two
//!   out of service (not Ready, or in the batch in flight and not through
//!   its gate); each VM's boot history gains exactly one install and its
//!   disk's ROOT carries the new version.
//! - `rollback_a_bad_revision`: the template moves to class `lab-bad`, whose
//!   kernel arguments make the installed OS answer 500 (revision 3), with a
//!   progress deadline as long as the good two-batch rollout took. The first
//!   batch is reinstalled, answers 500 and never passes its gate: `rollout
//!   status` exits non-zero naming the probe's answer, the batch is
//!   reinstalled with revision 2 (`RolledBack`, its endpoint answering 200
//!   again), revision 3 is marked bad, and the other two VMs were never
//!   touched (no boot, no install, the same ROOT).
//!
//! - `adopt_running_servers` (adopt.rs), first: vm3 and vm4 are declared
//!   as externally provisioned and started from their disks by hand; the
//!   set claims them as they are (no BMC action, no boot) and installs
//!   only vm1 and vm2. The roll then reinstalls all four.
//! - `remediate_an_unhealthy_node` (remediate.rs): a remediation policy on
//!   the health probe; a server broken on disk and silent is power-cycled,
//!   still answers 500-something, and is reimaged; two silent at once,
//!   more than `maxUnhealthy: 1`, are left alone and the set says why.
//!
//! The same roll on real nodes, a kubelet upgrade whose gate waits for the
//! Node Ready in the lab's kubeadm-made cluster, runs on the real-node rack
//! of tests/provision_reimage_and_retire_a_server.rs (its roll.rs), where
//! it is the reimage story's rollout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "roll_a_machineset_on_vms/adopt.rs"]
mod adopt;
mod common;
#[path = "roll_a_machineset_on_vms/remediate.rs"]
mod remediate;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::lab::{LAB_LOCK, Lab};
use common::lab_disk;
use common::out_of_service::{LabWatch, log_tail, new_installs, passed_batches, rollout_status_of};
use serde_json::{Value, json};

const VMS: usize = 4;

#[test]
fn roll_a_machineset_and_rollback_a_bad_revision() {
    let _guard = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let t = Instant::now();
    let lab = Lab::up(VMS);
    adopt::declare(&lab);
    eprintln!(
        "lab: vm3 and vm4 adopted and running after {:?}",
        t.elapsed()
    );
    // The set claims the pool, installs revision 1 on vm1 and vm2 and
    // takes vm3 and vm4 as they are.
    apply_set(&lab, "lab", 1800);
    let (ok, out, err) = rollout_status(&lab, "30m");
    assert!(ok, "first rollout: {out}{err}\n{}", log_tail(&lab));
    assert!(
        out.contains(&format!(
            "successfully rolled out: revision 1 on {VMS} machines"
        )),
        "{out}"
    );
    adopt::adopted_as_they_are(&lab);
    eprintln!(
        "lab: rack up and revision 1 installed after {:?}",
        t.elapsed()
    );

    let s = Instant::now();
    let roll = roll_a_machineset(&lab);
    eprintln!("lab: roll_a_machineset took {:?}", s.elapsed());
    let s = Instant::now();
    rollback_a_bad_revision(&lab, roll);
    eprintln!("lab: rollback_a_bad_revision took {:?}", s.elapsed());
    let s = Instant::now();
    remediate::remediate_an_unhealthy_node(&lab);
    eprintln!("lab: remediate_an_unhealthy_node took {:?}", s.elapsed());
    eprintln!("lab: the three stories on one rack took {:?}", t.elapsed());
}

/// Returns how long the rollout took.
fn roll_a_machineset(lab: &Lab) -> Duration {
    let before = history(lab);
    let mut watch = LabWatch::start(lab);
    // A new image version in the class the set's template names.
    let mut class = get(lab, "machineclass", "lab");
    class["spec"]["image"]["version"] = json!("4230.2.4");
    apply(lab, "class-lab", &object(&class));
    let start = Instant::now();
    // The set's generation does not move with its class: `rollout status`,
    // started at once, follows the revision the edited class makes.
    let (ok, out, err) = rollout_status(lab, "30m");
    let took = start.elapsed();
    assert!(ok, "rollout: {out}{err}\n{}", log_tail(lab));
    assert!(
        out.contains(&format!(
            "successfully rolled out: revision 2 on {VMS} machines"
        )),
        "{out}"
    );
    let batches = passed_batches(&out, 2);
    assert_eq!(batches.len(), 2, "two batches: {out}");
    assert!(batches.values().all(|b| b.len() == 2), "{batches:?}");
    let mut all: Vec<&String> = batches.values().flatten().collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), VMS, "each machine in one batch: {batches:?}");

    // Each VM installed exactly once, with the new version on its disk.
    let after = history(lab);
    for i in 1..=VMS {
        let name = format!("vm{i}");
        let new = new_installs(&before[&name], &after[&name]);
        assert_eq!(new, 1, "{name} installed {new} times: {:#}", after[&name]);
        let m = lab.machine(&name).unwrap();
        assert_eq!(m["status"]["phase"], "Ready", "{m:#}");
        assert_eq!(
            m["metadata"]["labels"]["metalherd.dev/machineset-revision"], "2",
            "{name}"
        );
        assert_eq!(root_stamp(lab, i).1, "version=4230.2.4", "{name}");
    }

    // Never more than two out of service, seen from the watch streams.
    assert!(watch.still_open(), "a watch stream ended early");
    {
        let o = watch.seen.lock().unwrap();
        assert!(o.events > 0, "no watch events");
        assert!(
            o.peak <= 2,
            "{} out of service at once: {:?}",
            o.peak,
            o.peak_at
        );
        assert_eq!(o.peak, 2, "the batches ran two at a time");
    }

    let out = lab.cli_ok(&["rollout", "history", "machineset", "workers"]);
    eprintln!("$ metalherd rollout history machineset workers\n{out}");
    let row = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some("2"))
        .unwrap_or_else(|| panic!("no revision 2: {out}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1..5], ["lab", "flatcar", "4230.2.4", "4"], "{out}");
    assert!(row.ends_with("current"), "{out}");
    took
}

fn rollback_a_bad_revision(lab: &Lab, good_rollout: Duration) {
    let before = history(lab);
    let stamps: Vec<(String, String)> = (1..=VMS).map(|i| root_stamp(lab, i)).collect();
    let boots: Vec<Value> = (1..=VMS)
        .map(|i| lab.machine(&format!("vm{i}")).unwrap()["status"]["boot"].clone())
        .collect();

    // A class whose installed OS answers its health probe with 500.
    let mut bad = get(lab, "machineclass", "lab");
    bad["metadata"]["name"] = json!("lab-bad");
    bad["spec"]["image"]["version"] = json!("4230.2.5");
    bad["spec"]["kernelArgs"] = json!(["health=500"]);
    apply(lab, "class-lab-bad", &object(&bad));
    // Short, yet long enough for a batch to reinstall and answer: as long
    // as the whole good rollout (two batches) took on this rack.
    let deadline = good_rollout.as_secs().max(120) as u32;
    apply_set(lab, "lab-bad", deadline);
    let (ok, out, err) = rollout_status(lab, "30m");
    assert!(!ok, "a failed rollout exits non-zero: {out}{err}");
    assert!(err.contains("failed"), "{err}");
    assert!(err.contains("answered 500, want 200"), "{err}");
    let started = out
        .lines()
        .find_map(|l| l.strip_prefix("batch 1 of revision 3 started: "))
        .unwrap_or_else(|| panic!("no first batch: {out}"));
    let batch: Vec<String> = started.split(", ").map(str::to_string).collect();
    assert_eq!(batch.len(), 2, "{out}");
    assert!(
        !out.contains("batch 2 of revision 3 started"),
        "halted after the first batch: {out}"
    );

    // The failed batch is reinstalled with revision 2.
    let mut set = Value::Null;
    let until = Instant::now() + Duration::from_secs(1800);
    while Instant::now() < until {
        set = get(lab, "machineset", "workers");
        if set["status"]["rolloutState"] == "RolledBack" {
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    assert_eq!(
        set["status"]["rolloutState"],
        "RolledBack",
        "{set:#}\n{}",
        log_tail(lab)
    );
    let f = &set["status"]["lastFailure"];
    assert_eq!(f["reason"], "ProgressDeadlineExceeded", "{f}");
    let mut failed: Vec<String> = serde_json::from_value(f["machines"].clone()).unwrap();
    failed.sort();
    let mut want = batch.clone();
    want.sort();
    assert_eq!(failed, want, "{f}");
    let rev3 = set["status"]["revisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["revision"] == 3)
        .unwrap_or_else(|| panic!("no revision 3: {set:#}"));
    assert_eq!(rev3["bad"], true, "{set:#}");

    let after = history(lab);
    for i in 1..=VMS {
        let name = format!("vm{i}");
        let m = lab.machine(&name).unwrap();
        assert_eq!(m["status"]["phase"], "Ready", "{m:#}");
        assert_eq!(
            m["metadata"]["labels"]["metalherd.dev/machineset-revision"], "2",
            "{name}"
        );
        let new = new_installs(&before[&name], &after[&name]);
        let console = lab.console(i);
        if batch.contains(&name) {
            // Installed with the bad revision, which answered 500, then
            // with revision 2 again, which answers 200.
            assert_eq!(new, 2, "{name}: {:#}", after[&name]);
            assert_eq!(root_stamp(lab, i).1, "version=4230.2.4", "{name}");
            let answers: Vec<&str> = console
                .lines()
                .filter_map(|l| l.split("node: health endpoint answers ").nth(1))
                .collect();
            assert!(
                answers.len() >= 2
                    && answers[answers.len() - 2]
                        .starts_with("500 (installed kernel args: health=500)")
                    && answers[answers.len() - 1].starts_with("200"),
                "{name}: {answers:?}"
            );
            assert_eq!(probe(lab, i), "200", "{name} after the rollback");
        } else {
            // Never touched: no install, no new boot, the same ROOT.
            assert_eq!(new, 0, "{name}: {:#}", after[&name]);
            assert_eq!(root_stamp(lab, i), stamps[i - 1], "{name}");
            assert_eq!(m["status"]["boot"], boots[i - 1], "{name}");
            assert_eq!(after[&name], before[&name], "{name}'s boot history moved");
        }
    }

    let out = lab.cli_ok(&["rollout", "history", "machineset", "workers"]);
    eprintln!("$ metalherd rollout history machineset workers\n{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("3 ") && l.contains("bad")),
        "{out}"
    );
    // Asked again, the rollout still reports its failure.
    let (ok, _, err) = rollout_status(lab, "30s");
    assert!(!ok);
    assert!(err.contains("rolled back to revision 2"), "{err}");
}

/// `metalherd apply` of the set `workers` (every VM of the rack) with this
/// class and progress deadline.
fn apply_set(lab: &Lab, class: &str, deadline: u32) {
    apply_set_with(lab, class, deadline, None);
}

/// [`apply_set`] with a remediation policy.
fn apply_set_with(lab: &Lab, class: &str, deadline: u32, remediation: Option<Value>) {
    let mut set = json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": "workers", "namespace": "default"},
        "spec": {
            "replicas": VMS,
            "selector": {"matchLabels": {"rack": "lab"}},
            "template": {"classRef": {"name": class}},
            "updateStrategy": {
                "type": "InPlace", "maxUnavailable": 2,
                "progressDeadlineSeconds": deadline, "autoRollback": true,
                "healthCheck": {"nodeReadySeconds": 5, "httpProbe": {
                    "url": "http://{{address}}:80/cgi-bin/healthz",
                    "expectedStatus": 200}}
            }
        }
    });
    if let Some(r) = remediation {
        set["spec"]["remediation"] = r;
    }
    apply(lab, "workers", &set);
}

fn apply(lab: &Lab, name: &str, doc: &Value) {
    let path = lab.run.join(format!("{name}.json"));
    std::fs::write(&path, doc.to_string()).unwrap();
    lab.cli_ok(&["apply", "-f", path.to_str().unwrap()]);
}

/// `metalherd rollout status machineset workers`: (success, stdout, stderr).
fn rollout_status(lab: &Lab, timeout: &str) -> (bool, String, String) {
    rollout_status_of(lab, "workers", timeout)
}

fn get(lab: &Lab, kind: &str, name: &str) -> Value {
    serde_json::from_str(&lab.cli_ok(&["get", kind, name, "-o", "json"])).unwrap()
}

/// An object to apply: its kind, name and spec.
fn object(o: &Value) -> Value {
    json!({
        "apiVersion": o["apiVersion"], "kind": o["kind"],
        "metadata": {"name": o["metadata"]["name"], "namespace": "default"},
        "spec": o["spec"],
    })
}

/// Every VM's boot history, by Machine name.
fn history(lab: &Lab) -> BTreeMap<String, Value> {
    (1..=VMS)
        .map(|i| {
            let name = format!("vm{i}");
            let m = lab.machine(&name).unwrap();
            (name, m["status"]["bootHistory"].clone())
        })
        .collect()
}

/// The installer's stamp on VM `i`'s ROOT partition: (boot, version).
fn root_stamp(lab: &Lab, i: usize) -> (String, String) {
    let img = lab.disk(i);
    let root = lab_disk::partition(&img, "ROOT").expect("no ROOT partition");
    let line = lab_disk::first_line(&img, root.start);
    let mut w = line.split_whitespace();
    assert_eq!(w.next(), Some("MHROOT"), "{line}");
    let boot = w.next().unwrap_or_default().to_string();
    (boot, w.next().unwrap_or_default().to_string())
}

/// What VM `i`'s health endpoint answers, asked from the rack's namespace.
fn probe(lab: &Lab, i: usize) -> String {
    let o = std::process::Command::new("ip")
        .args(["netns", "exec", &lab.ns, "curl", "-s", "-o", "/dev/null"])
        .args(["-w", "%{http_code}", "--max-time", "10"])
        .arg(format!("http://10.89.0.{}/cgi-bin/healthz", 10 + i))
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}
