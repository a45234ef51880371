//! Story: provision a server with metalherd in Kubernetes mode, on the
//! simulated rack (tests/common/sim_rack.rs: an in-process Redfish BMC and
//! a server that walks the boot path at protocol level; no VM).
//!
//! Two `metalherd serve` processes: the stand-in API server (the embedded
//! store, its controller off) holds the objects, as a cluster's
//! kube-apiserver would; a second one runs with `--store kubernetes
//! --kubeconfig FILE` against it and runs the controllers and the boot
//! services, keeping no object of its own. A Machine created with
//! `kubectl apply` in the stand-in goes to Ready: the controller there
//! powers the server on through its BMC, the server fetches its iPXE script
//! and Ignition from the Kubernetes-mode process and calls home, and every
//! step lands in the stand-in's copy of the Machine. The writes to the
//! Machine and its Events are counted by watches on the stand-in, printed
//! with what each Machine write changed (BENCHMARKS.md, "Writes per
//! provisioned Machine in Kubernetes mode"), and held to the budget: at
//! most 10 Machine writes by metalherd and 3 Events.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::rack::{controller_config, events, put_secret, tail, wait_phase};
use common::server::{Server, text};
use common::sim_rack::{SimRack, bmc_credentials};
use common::writes::describe_write;
use serde_json::json;

fn kubectl(kc: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(common::require_tool("kubectl"))
        .env("KUBECONFIG", kc)
        .env("HOME", kc.parent().unwrap())
        .args(args)
        .output()
        .expect("run kubectl");
    let (o, e) = text(&out);
    (out.status.success(), o, e)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provision_in_kubernetes_mode() {
    let dir = common::rack::boot_files();
    let boot_port = common::free_port();
    let boot_url = format!("http://127.0.0.1:{boot_port}");
    let rack = SimRack::start("kmode", 1, 61, &boot_url).await;

    // The stand-in API server: objects only.
    let api = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let kc = api.kubeconfig_file();

    // metalherd in Kubernetes mode: controllers and boot services.
    let config = controller_config(
        "",
        &format!(
            "boot:\n  listen: 127.0.0.1:{boot_port}\n  assetsDir: {}\n  waitSeconds: 1\n",
            dir.path().join("assets").display()
        ),
    );
    let kc_arg = kc.to_str().unwrap().to_string();
    let kmode = tokio::task::spawn_blocking(move || {
        Server::start_with_args(
            Some(&config),
            &["--store", "kubernetes", "--kubeconfig", &kc_arg],
        )
    })
    .await
    .unwrap();
    assert!(
        !kmode.data_dir.join("metalherd.redb").exists(),
        "Kubernetes mode keeps no store file"
    );

    // What the user declares, in the stand-in: the BMC and join Secrets, a
    // class, and (with kubectl) the Machine.
    let class = common::rack::flatcar_class(dir.path());
    let mut machine = rack.manifest(0, "bmc", json!({"role": "worker"}));
    machine["spec"]["classRef"] = json!({"name": "flatcar"});
    let manifest = dir.path().join("machine.json");
    std::fs::write(&manifest, machine.to_string()).unwrap();
    let name = rack.machines[0].name.clone();
    // Every write to the Machine and to its Events, as the stand-in's
    // watches see them (each write is one change): the API calls Kubernetes
    // mode costs per provisioned Machine.
    let writes = count_writes(&kc, &name).await;

    let (api, kmode) = tokio::task::spawn_blocking(move || {
        let (user, pw) = bmc_credentials();
        put_secret(&api, "bmc", &user, &pw);
        common::rack::put_join_secret(&api);
        let (code, body) = api.req(
            "POST",
            "/apis/metalherd.dev/v1alpha1/namespaces/default/machineclasses",
            Some(&class),
        );
        assert!(code < 300, "class: {code} {body}");
        let (ok, out, err) = kubectl(&kc, &["apply", "-f", manifest.to_str().unwrap()]);
        assert!(ok, "kubectl apply: {out}{err}");
        (api, kmode)
    })
    .await
    .unwrap();

    let (api, kmode, m) = tokio::task::spawn_blocking(move || {
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_phase(&api, &name, "Ready", Duration::from_secs(120))
        }));
        match got {
            Ok(m) => (api, kmode, m),
            Err(_) => panic!(
                "not Ready; the Kubernetes-mode process's log tail:\n{}",
                tail(&kmode.log(), 30)
            ),
        }
    })
    .await
    .unwrap();

    assert_eq!(rack.machines[0].boots.load(Ordering::SeqCst), 1);
    let (machine_writes, event_writes, lines) = writes.report();
    eprintln!(
        "writes through the API for one provisioned Machine: Machine {machine_writes}, Event {event_writes}"
    );
    for (i, l) in lines.iter().enumerate() {
        eprintln!("  Machine write {}: {l}", i + 1);
    }
    // The budget: at most 10 Machine writes by metalherd (the
    // user's create is the first one counted) and 3 Events.
    assert!(
        machine_writes <= 11 && event_writes <= 3,
        "Machine writes {machine_writes} (with the create), Events {event_writes}:\n{}",
        lines.join("\n")
    );
    // The controller's Events went to the stand-in too (core/v1).
    let rack_name = rack.machines[0].name.clone();
    let (api, evs) = tokio::task::spawn_blocking(move || {
        let evs = events(&api, &rack_name);
        (api, evs)
    })
    .await
    .unwrap();
    assert!(
        !evs.is_empty(),
        "no Events about the Machine in the stand-in"
    );
    assert_eq!(m["status"]["phase"], "Ready");
    // The boot path's steps were recorded through the Kubernetes store.
    assert!(
        m["status"]["bootHistory"]
            .as_array()
            .is_some_and(|h| !h.is_empty()),
        "{m:#}"
    );
    // kubectl sees it as any cluster user would.
    let kc = api.dir.path().join("kubeconfig");
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        kubectl(
            &kc,
            &["get", "machines", "-o", "jsonpath={.items[0].status.phase}"],
        )
    })
    .await
    .unwrap();
    assert!(ok, "kubectl get: {err}");
    assert_eq!(out, "Ready");
    drop(kmode);
    drop(api);
}

/// Counts of writes seen by watches on the stand-in.
struct Writes {
    machine: Arc<AtomicUsize>,
    event: Arc<AtomicUsize>,
    /// What each Machine write left, in order.
    lines: Arc<std::sync::Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Writes {
    /// (Machine writes, Event writes, what each Machine write left) so
    /// far; stops counting.
    fn report(self) -> (usize, usize, Vec<String>) {
        for t in &self.tasks {
            t.abort();
        }
        let lines = self.lines.lock().unwrap().clone();
        (
            self.machine.load(Ordering::SeqCst),
            self.event.load(Ordering::SeqCst),
            lines,
        )
    }
}

async fn count_writes(kc: &std::path::Path, name: &str) -> Writes {
    use futures::StreamExt;
    use metalherd::api::Kind;
    use metalherd::store::{ListOptions, StoreConfig};
    let store = metalherd::store::open(&StoreConfig::Kubernetes {
        kubeconfig: Some(kc.to_path_buf()),
        namespace: None,
    })
    .await
    .unwrap();
    let mut tasks = Vec::new();
    let mut counters = Vec::new();
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    for (kind, pointer) in [
        (Kind::Machine, "/metadata/name"),
        (Kind::Event, "/involvedObject/name"),
    ] {
        let n = Arc::new(AtomicUsize::new(0));
        counters.push(n.clone());
        let mut w = store
            .watch(kind, &ListOptions::namespace("default"), None)
            .await
            .unwrap();
        let name = name.to_string();
        let lines = lines.clone();
        let mut prev = serde_json::Value::Null;
        tasks.push(tokio::spawn(async move {
            while let Some(Ok(ev)) = w.next().await {
                if ev.object().pointer(pointer).and_then(|v| v.as_str()) == Some(name.as_str()) {
                    n.fetch_add(1, Ordering::SeqCst);
                    if kind == Kind::Machine {
                        let now = ev.object().clone();
                        lines.lock().unwrap().push(describe_write(&prev, &now));
                        prev = now;
                    }
                }
            }
        }));
    }
    Writes {
        machine: counters[0].clone(),
        event: counters[1].clone(),
        lines,
        tasks,
    }
}
