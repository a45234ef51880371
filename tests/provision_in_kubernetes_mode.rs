//! Story: provision a server with metalherd in Kubernetes mode, on the
//! simulated rack (tests/common/sim_rack.rs: an in-process Redfish BMC and
//! a server that walks the boot path at protocol level; no VM).
//!
//! An API server holds the objects, and `metalherd serve --store kubernetes
//! --kubeconfig FILE` runs the controllers and the boot services against
//! it, keeping no object of its own. A Machine created with `kubectl apply`
//! goes to Ready: the controller powers the server on through its BMC, the
//! server fetches its iPXE script and Ignition from the Kubernetes-mode
//! process and calls home, and every step lands in the API server's copy
//! of the Machine. The story runs twice, on the same code:
//! - against a real kube-apiserver and etcd (tests/common/control_plane.rs,
//!   deploy/crds/ installed), metalherd with a token of its own, its writes
//!   counted from kube-apiserver's audit log and held to the budget: at
//!   most 10 Machine writes by metalherd and 3 Event writes;
//! - against the stand-in API server (a second `metalherd serve`, the
//!   embedded store, its controller off).
//!
//! On both, watches count the writes to the Machine and its Events and
//! print what each Machine write changed (BENCHMARKS.md, "Writes per
//! provisioned Machine in Kubernetes mode").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::Api;
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
    let cp = tokio::task::spawn_blocking(common::control_plane::shared)
        .await
        .unwrap();
    let admin = cp.admin_kubeconfig();
    let kmode = cp.metalherd_kubeconfig();
    let audit_from = cp.audit().len();
    let (m, name, machine_writes, event_writes) = story("kmode", cp.clone(), admin, kmode).await;
    // What kube-apiserver itself recorded: metalherd's writes (its own
    // user) to the Machine, and to Events, after the story began.
    let audit = cp.audit();
    let writes = |resource: &str| {
        audit[audit_from..]
            .iter()
            .filter(|e| {
                e["user"]["username"] == common::control_plane::METALHERD_USER
                    && e["objectRef"]["resource"] == resource
                    && ["create", "update", "patch"].contains(&e["verb"].as_str().unwrap_or(""))
                    && (resource != "machines" || e["objectRef"]["name"] == name.as_str())
                    && e["responseStatus"]["code"]
                        .as_u64()
                        .is_some_and(|c| c < 300)
            })
            .count()
    };
    let (audit_machine, audit_event) = (writes("machines"), writes("events"));
    let requests = audit[audit_from..]
        .iter()
        .filter(|e| e["user"]["username"] == common::control_plane::METALHERD_USER)
        .count();
    eprintln!(
        "kube-apiserver's audit log: metalherd's Machine writes {audit_machine}, Event writes \
         {audit_event}, requests {requests} (watches: Machine {machine_writes} with the create, \
         Event {event_writes})"
    );
    assert!(
        audit_machine <= 10 && audit_event <= 3,
        "metalherd's writes in kube-apiserver's audit log: Machine {audit_machine}, Event {audit_event}"
    );
    assert!(
        audit_machine >= 1 && audit_event >= 1,
        "no writes by metalherd audited"
    );
    assert_eq!(m["status"]["phase"], "Ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provision_in_kubernetes_mode_on_the_stand_in() {
    // The stand-in API server: objects only.
    let api = Arc::new(tokio::task::spawn_blocking(Server::start).await.unwrap());
    let kc = api.kubeconfig_file();
    let (m, _, machine_writes, event_writes) = story("kstand", api, kc.clone(), kc).await;
    // The budget: at most 10 Machine writes by metalherd (the
    // user's create is the first one counted) and 3 Events.
    assert!(
        machine_writes <= 11 && event_writes <= 3,
        "Machine writes {machine_writes} (with the create), Events {event_writes}"
    );
    assert_eq!(m["status"]["phase"], "Ready");
}

/// The story against `api`: the user's objects declared with `admin`
/// (kubectl for the Machine), metalherd in Kubernetes mode with
/// `kmode_kc`. Returns the Ready Machine, its name, and the Machine writes
/// (with the create) and Event writes the watches saw.
async fn story<A: Api + Send + Sync + 'static>(
    rack_name: &str,
    api: Arc<A>,
    admin: PathBuf,
    kmode_kc: PathBuf,
) -> (serde_json::Value, String, usize, usize) {
    let dir = common::rack::boot_files();
    let boot_port = common::free_port();
    let boot_url = format!("http://127.0.0.1:{boot_port}");
    let rack = SimRack::start(rack_name, 1, 61, &boot_url).await;

    // metalherd in Kubernetes mode: controllers and boot services.
    let config = controller_config(
        "",
        &format!(
            "boot:\n  listen: 127.0.0.1:{boot_port}\n  assetsDir: {}\n  waitSeconds: 1\n",
            dir.path().join("assets").display()
        ),
    );
    let kc_arg = kmode_kc.to_str().unwrap().to_string();
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

    // What the user declares: the BMC and join Secrets, a class, and (with
    // kubectl) the Machine.
    let class = common::rack::flatcar_class(dir.path());
    let mut machine = rack.manifest(0, "bmc", json!({"role": "worker"}));
    machine["spec"]["classRef"] = json!({"name": "flatcar"});
    let manifest = dir.path().join("machine.json");
    std::fs::write(&manifest, machine.to_string()).unwrap();
    let name = rack.machines[0].name.clone();
    // Every write to the Machine and to its Events, as watches see them
    // (each write is one change).
    let writes = count_writes(&admin, &name).await;

    let api2 = api.clone();
    let admin2 = admin.clone();
    tokio::task::spawn_blocking(move || {
        let (user, pw) = bmc_credentials();
        put_secret(&*api2, "bmc", &user, &pw);
        common::rack::put_join_secret(&*api2);
        let (code, body) = api2.req(
            "POST",
            "/apis/metalherd.dev/v1alpha1/namespaces/default/machineclasses",
            Some(&class),
        );
        assert!(code < 300, "class: {code} {body}");
        let (ok, out, err) = kubectl(&admin2, &["apply", "-f", manifest.to_str().unwrap()]);
        assert!(ok, "kubectl apply: {out}{err}");
    })
    .await
    .unwrap();

    let api2 = api.clone();
    let wait_name = name.clone();
    let (kmode, m) = tokio::task::spawn_blocking(move || {
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_phase(&*api2, &wait_name, "Ready", Duration::from_secs(120))
        }));
        match got {
            Ok(m) => (kmode, m),
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
    // The controller's Events went to the API server too (core/v1).
    let api2 = api.clone();
    let ev_name = name.clone();
    let evs = tokio::task::spawn_blocking(move || events(&*api2, &ev_name))
        .await
        .unwrap();
    assert!(
        !evs.is_empty(),
        "no Events about the Machine in the API server"
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
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        kubectl(
            &admin,
            &["get", "machine", &name, "-o", "jsonpath={.status.phase}"],
        )
    })
    .await
    .unwrap();
    assert!(ok, "kubectl get: {err}");
    assert_eq!(out, "Ready");
    drop(kmode);
    let name = rack.machines[0].name.clone();
    (m, name, machine_writes, event_writes)
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
