//! Story: provision a server in Kubernetes mode on the virtual rack, and a
//! boot after a leader failover reaches the new leader.
//!
//! The lab's rack (tests/common/lab.rs: a UEFI QEMU VM on the rack's
//! bridge, sushy-tools' libvirt driver as its BMC) with a real
//! kube-apiserver and etcd in the rack's namespace, the CRDs installed
//! (deploy/lab/lib.sh's `lab_kube_up`, as `deploy/lab/up --kubernetes`
//! starts them); the lab's standalone `metalherd serve` is stopped. Two
//! replicas run `serve --store kubernetes` against kube-apiserver on the
//! rack's network, each with its own address on the bridge (10.89.0.1 and
//! 10.89.0.2), as two nodes with hostNetwork would: the boot services answer
//! on the leader's own address (README, "Replicas and leader election").
//!
//! The first replica takes the Lease and is then killed with SIGKILL; the
//! second takes over. The Machine is applied with kubectl after that: the
//! VM's firmware and iPXE get the new leader's DHCP answers, fetch their
//! script, kernel, initrd and Ignition config from its address, the
//! installed OS calls home there, and the Machine goes to Ready in
//! kube-apiserver; every power action the emulator counts came from the new
//! leader. metalherd's writes to the Machine and its Events are counted
//! from kube-apiserver's audit log and printed (BENCHMARKS.md).
//! Runs QEMU: take /tmp/metalherd-lab.lock around `cargo test`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::lab::{LAB_LOCK, Lab};
use common::proc::{ChildGuard, wait_for};
use common::writes::from_kubectl_watch;
use serde_json::Value;

const LEADING: &str = "leading: starting the boot services and controllers";

/// A replica in Kubernetes mode in the rack's namespace: its own data
/// directory, API port and config file.
fn replica(lab: &Lab, name: &str, config: &Path, port: u16) -> ChildGuard {
    let kubeconfig = lab.run.join("kube/admin.kubeconfig").display().to_string();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &lab.ns])
        .arg(common::metalherd_bin())
        .arg("--data-dir")
        .arg(lab.run.join(format!("data-{name}")))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--config")
        .arg(config)
        .args(common::rack::replica_args(&kubeconfig))
        .env("METALHERD_LOG", "info");
    ChildGuard::spawn(
        &format!("metalherd replica {name}"),
        &mut cmd,
        &lab.run.join(format!("replica-{name}.log")),
    )
}

fn log(lab: &Lab, name: &str) -> String {
    std::fs::read_to_string(lab.run.join(format!("replica-{name}.log"))).unwrap_or_default()
}

fn holder(lab: &Lab) -> Option<String> {
    let (ok, out, _) = lab.kubectl(&["get", "lease", "metalherd", "-o", "json"]);
    let lease: Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
    lease["spec"]["holderIdentity"]
        .as_str()
        .filter(|h| !h.is_empty())
        .map(str::to_string)
}

fn machine(lab: &Lab, name: &str) -> Option<Value> {
    let (ok, out, _) = lab.kubectl(&["get", "machine", name, "-o", "json"]);
    serde_json::from_str(&out).ok().filter(|_| ok)
}

/// The lab's config with every address of the boot services moved from
/// 10.89.0.1 to `addr` (the pool 10.89.0.100-150 stays).
fn config_on(lab_config: &str, addr: &str) -> String {
    lab_config
        .replace("10.89.0.1:", &format!("{addr}:"))
        .replace("10.89.0.1\n", &format!("{addr}\n"))
        .replace("10.89.0.1]", &format!("{addr}]"))
}

#[test]
fn provision_in_kubernetes_mode() {
    let _guard = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut lab = Lab::up(1);
    let run = lab.run.clone();

    // The rack's config (boot services on 10.89.0.1) is replica a's;
    // replica b's is the same on 10.89.0.2, a second address on the bridge.
    let lab_config = std::fs::read_to_string(run.join("config.yaml")).unwrap();
    let (config_a, config_b) = (run.join("replica-a.yaml"), run.join("replica-b.yaml"));
    std::fs::write(&config_a, &lab_config).unwrap();
    let on_b = config_on(&lab_config, "10.89.0.2");
    assert!(
        on_b.contains("serverAddress: 10.89.0.2\n") && on_b.contains("10.89.0.100"),
        "{on_b}"
    );
    std::fs::write(&config_b, on_b).unwrap();
    let ip = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.ns,
            "ip",
            "addr",
            "add",
            "10.89.0.2/24",
        ])
        .args(["dev", "br0"])
        .status()
        .unwrap();
    assert!(ip.success());

    // The objects live in kube-apiserver; the lab's standalone server
    // stops.
    lab.kill_metalherd();
    let started = Instant::now();
    lab.kube_up();
    eprintln!(
        "lab: etcd and kube-apiserver {} ready with the CRDs in {:?}",
        common::control_plane::KUBE_VERSION,
        started.elapsed()
    );

    let mut a = replica(&lab, "a", &config_a, common::free_port());
    wait_for(Duration::from_secs(60), || {
        log(&lab, "a").contains(LEADING).then_some(())
    })
    .unwrap_or_else(|| panic!("replica a did not lead:\n{}", log(&lab, "a")));
    let first = holder(&lab).expect("a Lease holder");
    let b_port = common::free_port();
    let mut b = replica(&lab, "b", &config_b, b_port);
    // b answers its API (a standby serves the API and /healthz) and does
    // not lead.
    let ca = run.join("data-b/ca.crt");
    wait_for(Duration::from_secs(60), || {
        Command::new("ip")
            .args(["netns", "exec", &lab.ns, "curl", "-fs", "--cacert"])
            .arg(&ca)
            .arg(format!("https://127.0.0.1:{b_port}/healthz"))
            .output()
            .ok()
            .filter(|o| o.status.success())
    })
    .unwrap_or_else(|| panic!("replica b did not come up:\n{}", log(&lab, "b")));
    assert!(!log(&lab, "b").contains(LEADING), "{}", log(&lab, "b"));

    // The leader dies; the standby takes the Lease and starts the boot
    // services on its own address.
    a.kill9();
    let killed = Instant::now();
    let second = wait_for(Duration::from_secs(60), || {
        holder(&lab).filter(|h| *h != first)
    })
    .unwrap_or_else(|| panic!("replica b did not take over:\n{}", log(&lab, "b")));
    assert!(second.ends_with(&format!("-{}", b.pid())), "{second}");
    wait_for(Duration::from_secs(60), || {
        let l = log(&lab, "b");
        (l.contains(LEADING) && l.contains("dhcp server bound")).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "replica b did not start its boot services:\n{}",
            log(&lab, "b")
        )
    });
    eprintln!(
        "lab: replica b leads {:?} after the SIGKILL",
        killed.elapsed()
    );

    // The user applies the join Secret, the classes, the BMC Secret and the
    // Machine with kubectl, as to a cluster.
    lab.write_manifests(&[]);
    let kubectl = |args: &[&str]| lab.kubectl(args);
    // kubectl watches count the writes to the Machine and its Events.
    let watch = |kind: &str| {
        let kubectl = common::control_plane::kube_bin("kubectl");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &lab.ns, "sh", "-c"])
            .arg(format!(
                "exec {} get {kind} --watch --output-watch-events -o json 2>>{}",
                kubectl.display(),
                run.join(format!("watch-{kind}.err")).display()
            ))
            .env("KUBECONFIG", run.join("kube/admin.kubeconfig"))
            .env("HOME", &run);
        ChildGuard::spawn(
            &format!("kubectl watch {kind}"),
            &mut cmd,
            &run.join(format!("watch-{kind}.json")),
        )
    };
    let mut watches = [watch("machines"), watch("events")];
    for f in ["class.yaml", "machines.yaml"] {
        let (ok, out, err) = kubectl(&["apply", "-f", &run.join(f).to_string_lossy()]);
        assert!(ok, "kubectl apply -f {f}: {out}{err}");
    }

    let mut seen: Vec<String> = Vec::new();
    let ready = wait_for(Duration::from_secs(600), || {
        let p = machine(&lab, "vm1")
            .and_then(|m| m["status"]["phase"].as_str().map(str::to_string))
            .unwrap_or_default();
        if seen.last() != Some(&p) {
            seen.push(p.clone());
        }
        (p == "Ready").then_some(())
    });
    if ready.is_none() {
        panic!(
            "vm1 not Ready through the new leader (phases {seen:?}); its log (tail):\n{}",
            tail(&log(&lab, "b"), 6000)
        );
    }
    eprintln!("lab: phases {seen:?}");
    // The Ready write is the Machine's last; give the watches a moment.
    std::thread::sleep(Duration::from_secs(2));
    for w in &mut watches {
        w.kill9();
    }
    let read =
        |kind: &str| std::fs::read_to_string(run.join(format!("watch-{kind}.json"))).unwrap();
    let writes = from_kubectl_watch(&read("machines"), "/metadata/name", "vm1");
    let events = from_kubectl_watch(&read("events"), "/involvedObject/name", "vm1");
    eprintln!(
        "lab: writes through the API for vm1 (a real network boot): Machine {} (with the create), Event {}",
        writes.len(),
        events.len()
    );
    for (i, l) in writes.iter().enumerate() {
        eprintln!("  Machine write {}: {l}", i + 1);
    }
    assert!(
        !writes.is_empty() && !events.is_empty(),
        "the kubectl watches saw nothing"
    );
    // What kube-apiserver's audit log says metalherd (every client but
    // kubectl) wrote.
    let audit: Vec<Value> = std::fs::read_to_string(run.join("kube/audit.log"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    // metalherd and kubectl use the lab's admin token; the cluster's own
    // controllers (kube-controller-manager) write as other users.
    let by_metalherd = |e: &&Value| {
        e["user"]["username"] == "lab-admin"
            && !e["userAgent"].as_str().unwrap_or("").starts_with("kubectl")
            && ["create", "update", "patch"].contains(&e["verb"].as_str().unwrap_or(""))
            && e["responseStatus"]["code"]
                .as_u64()
                .is_some_and(|c| c < 300)
    };
    let machine_writes = audit
        .iter()
        .filter(by_metalherd)
        .filter(|e| e["objectRef"]["resource"] == "machines" && e["objectRef"]["name"] == "vm1")
        .count();
    let event_writes = audit
        .iter()
        .filter(by_metalherd)
        .filter(|e| e["objectRef"]["resource"] == "events")
        .count();
    eprintln!(
        "lab: kube-apiserver's audit log: metalherd's writes for vm1 (a real network boot): Machine {machine_writes}, Event {event_writes}"
    );
    assert!(
        machine_writes >= 1 && event_writes >= 1,
        "no writes by metalherd audited"
    );

    // Everything the VM fetched came from the new leader's address.
    let console = lab.console(1);
    assert!(
        console.contains("10.89.0.2"),
        "the VM's console names the new leader's address:\n{}",
        tail(&console, 4000)
    );
    assert!(
        !console.contains("http://10.89.0.1:"),
        "the VM fetched from the dead leader:\n{}",
        tail(&console, 4000)
    );
    let m = machine(&lab, "vm1").unwrap();
    assert_eq!(m["status"]["phase"], "Ready");
    let (ok, out, err) = kubectl(&["get", "machine", "vm1", "-o", "jsonpath={.status.phase}"]);
    assert!(ok, "kubectl get: {err}");
    assert_eq!(out, "Ready");
    // Every power action the emulator received came from the new leader;
    // the dead one never acted on the Machine.
    let by_b = log(&lab, "b").matches("redfish reset").count();
    assert!(by_b >= 1, "{}", log(&lab, "b"));
    assert_eq!(lab.reset_calls(), by_b, "power actions at the emulator");
    assert!(
        !log(&lab, "a").contains("redfish reset"),
        "{}",
        log(&lab, "a")
    );
    b.kill9();
}

fn tail(s: &str, n: usize) -> &str {
    let mut i = s.len().saturating_sub(n);
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}
