//! Benchmark, not a test: N Machines declared at once against
//! an in-process fleet of simulated BMCs and servers. Each simulated
//! server, when its BMC powers it on, walks the boot path at protocol level
//! against metalherd's boot HTTP endpoints (iPXE script for its MAC, the
//! Ignition URL from it, `installed` and `booted` call-homes). The Machine
//! controller runs as `serve` runs it (store feed, runner, boot-storm
//! slots) on the embedded store. Reports wall time to all Ready,
//! reconciles per second and the process's peak RSS.
//!
//! `METALHERD_BENCH_MACHINES` (default 500) and `METALHERD_BENCH_LIMITS`
//! (default `50,500`) choose the runs. `METALHERD_BENCH_ROLL=MAX_UNAVAILABLE`
//! instead declares the Machines unclassed and a MachineSet that claims
//! them all, then rolls a class change through it (see [`rollout`]);
//! `METALHERD_BENCH_REIMAGE_S` is how long each simulated install takes.
//! `METALHERD_BENCH_STORE=kubernetes` runs the store in Kubernetes mode
//! against a stand-in API server, `kube-apiserver` against a real
//! kube-apiserver and etcd (see [`kube`]). Run with:
//! `cargo run --example bench_controller` (BENCHMARKS.md has the runs).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod kube;
mod rollout;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use metalherd::api::{Inventory, Machine, NicInfo, PowerState};
use metalherd::bmc::{Bmc, BmcConnector, BmcError, BootDevice, FirmwareMode, PowerAction};
use metalherd::cluster::DrainOptions;
use metalherd::controller::feed::{feed, own_key};
use metalherd::controller::machine::{Limits, MachineReconciler};
use metalherd::controller::runner::{Runner, RunnerConfig, RunnerMetrics};
use metalherd::controller::storm::BootSlots;
use metalherd::directory::{BootRecorder, Directory};
use metalherd::http::boot::config::BootConfig;
use metalherd::http::boot::{self, BootDeps, BootMetrics, BootState};
use metalherd::store::embedded::EmbeddedStore;
use metalherd::store::{ListOptions, Store, TypedStore};
use tokio_util::sync::CancellationToken;

/// One simulated server: its power state and whether it has booted.
struct Server {
    mac: String,
    /// Its reserved address (a loopback address of its own, so the boot
    /// path's per-machine address checks hold).
    ip: std::net::Ipv4Addr,
    power: Mutex<PowerState>,
}

struct Fleet {
    servers: HashMap<String, Arc<Server>>,
    boot_url: String,
    dhcp: common::sim_boot::DhcpSim,
    tftp: SocketAddr,
    xid: AtomicU32,
    walks: AtomicUsize,
    /// Milliseconds spent, over all walks: power-on through DHCP, TFTP
    /// and iPXE's DHCP to a script naming the Ignition URL, then each later
    /// step; and script fetches.
    ms: [AtomicU64; 4],
    script_fetches: AtomicUsize,
    /// How long the installer takes (between its Ignition and `installed`).
    reimage: Duration,
}

struct SimBmc {
    server: Arc<Server>,
    fleet: Arc<Fleet>,
}

#[async_trait]
impl Bmc for SimBmc {
    async fn power_state(&self) -> Result<PowerState, BmcError> {
        Ok(*self.server.power.lock().unwrap())
    }
    async fn power(&self, action: PowerAction) -> Result<(), BmcError> {
        let was = {
            let mut p = self.server.power.lock().unwrap();
            std::mem::replace(&mut *p, action.target())
        };
        if action.target() == PowerState::On
            && (was != PowerState::On || action == PowerAction::Cycle)
        {
            tokio::spawn(walk(self.fleet.clone(), self.server.clone()));
        }
        Ok(())
    }
    async fn set_boot_once(&self, _: BootDevice, _: FirmwareMode) -> Result<(), BmcError> {
        Ok(())
    }
    async fn inventory(&self) -> Result<Inventory, BmcError> {
        Ok(Inventory {
            nics: vec![NicInfo {
                mac: self.server.mac.clone(),
                ..Default::default()
            }],
            ..Default::default()
        })
    }
}

struct Connector(Arc<Fleet>);

#[async_trait]
impl BmcConnector for Connector {
    async fn connect(&self, m: &Machine) -> Result<Box<dyn Bmc>, BmcError> {
        let name = m.metadata.name.clone().unwrap_or_default();
        let server = self
            .0
            .servers
            .get(&name)
            .cloned()
            .ok_or_else(|| BmcError::Config(format!("no simulated server {name}")))?;
        Ok(Box::new(SimBmc {
            server,
            fleet: self.0.clone(),
        }))
    }
}

async fn until_ok(c: &reqwest::Client, post: bool, url: &str) -> String {
    loop {
        let req = if post { c.post(url) } else { c.get(url) };
        if let Ok(r) = req.send().await
            && r.status() == 200
            && let Ok(t) = r.text().await
        {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Network boot, install, reboot, call home.
async fn walk(fleet: Arc<Fleet>, s: Arc<Server>) {
    fleet.walks.fetch_add(1, Ordering::Relaxed);
    // The server's own source address, as the boot path checks it. Plain
    // HTTP, as firmware boots: no trust store to load (loading the
    // system's on every boot cost the bench's process more CPU than
    // metalherd's own boot endpoints).
    let client = reqwest::Client::builder()
        .tls_certs_only([])
        .local_address(std::net::IpAddr::V4(s.ip))
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    let c = &client;
    let hy = s.mac.replace(':', "-");
    let base = &fleet.boot_url;
    let mut t = Instant::now();
    let mut lap = |i: usize| {
        let ms = u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX);
        fleet.ms[i].fetch_add(ms, Ordering::Relaxed);
        t = Instant::now();
    };
    // Firmware DHCP, TFTP of the boot file it names, iPXE's DHCP. Retried
    // like firmware does until the boot directory knows the machine's boot.
    let mac: [u8; 6] = s.mac.parse::<metalherd::api::MacAddr>().unwrap().octets();
    let mut tries = 0;
    let file = loop {
        let xid = fleet.xid.fetch_add(1, Ordering::Relaxed);
        match fleet.dhcp.exchange(mac, xid, false) {
            Ok(a) => break a.file,
            Err(e) => {
                tries += 1;
                assert!(tries < 600, "{}: DHCP: {e}", s.mac);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    common::sim_boot::tftp_get(s.ip, fleet.tftp, &file)
        .await
        .unwrap();
    let xid = fleet.xid.fetch_add(1, Ordering::Relaxed);
    fleet.dhcp.exchange(mac, xid, true).unwrap();
    let ign = loop {
        fleet.script_fetches.fetch_add(1, Ordering::Relaxed);
        let script = until_ok(c, false, &format!("{base}/boot.ipxe?mac={hy}&arch=x86_64")).await;
        if let Some(u) = script
            .split_whitespace()
            .find_map(|w| w.strip_prefix("ignition.config.url="))
        {
            break u.to_string();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    lap(0);
    let token = ign.split("token=").nth(1).unwrap_or_default().to_string();
    until_ok(c, false, &ign).await;
    lap(1);
    tokio::time::sleep(fleet.reimage).await;
    let home = |w: &str| format!("{base}/callhome/{w}?mac={hy}&token={token}");
    until_ok(c, true, &home("installed")).await;
    lap(2);
    until_ok(c, true, &home("booted")).await;
    lap(3);
}

/// What the watches have seen.
#[derive(Default)]
struct Tracker {
    phases: HashMap<String, String>,
    holding: std::collections::HashSet<String>,
    peak_holding: usize,
    errors: Vec<(String, String)>,
    writes: HashMap<&'static str, u64>,
}

impl Tracker {
    fn saw(&mut self, o: &serde_json::Value) {
        let name = o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let phase = o.pointer("/status/phase").and_then(|v| v.as_str());
        if phase == Some("Error") {
            let e = &o["status"]["lastError"];
            self.errors
                .push((name.clone(), format!("{}: {}", e["reason"], e["message"])));
        }
        if let Some(p) = phase {
            self.phases.insert(name.clone(), p.to_string());
        }
        let boot = o.pointer("/status/boot");
        let open = boot.is_some_and(|b| {
            b.is_object() && b.get("completedAt").is_none_or(serde_json::Value::is_null)
        });
        if open {
            self.holding.insert(name);
            self.peak_holding = self.peak_holding.max(self.holding.len());
        } else {
            self.holding.remove(&name);
        }
    }
}

/// The top-level status/metadata fields that differ (for tracing writes).
fn diff(a: &serde_json::Value, b: &serde_json::Value) -> String {
    let mut out = vec![];
    for part in ["metadata", "spec", "status"] {
        let (x, y) = (&a[part], &b[part]);
        if let Some(yo) = y.as_object() {
            for (k, v) in yo {
                if k == "resourceVersion" || k == "managedFields" {
                    continue;
                }
                if x.get(k) != Some(v) {
                    out.push(format!("{part}.{k}"));
                }
            }
        }
    }
    let phase = b.pointer("/status/phase").cloned().unwrap_or_default();
    format!("{phase} {}", out.join(","))
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

async fn run(n: usize, limit: usize, roll: Option<usize>) {
    let dir = tempfile::tempdir().unwrap();
    // metalherd's store, and the benchmark's own for its creates and
    // watches (the same but on kube-apiserver, where it is the admin's).
    let (store, bench, api): (Arc<dyn Store>, Arc<dyn Store>, _) = match kube::start().await {
        Some((s, b, api)) => (s, b, Some(api)),
        None => {
            let s = Arc::new(EmbeddedStore::open(&dir.path().join("s.redb")).unwrap());
            (s.clone(), s, None)
        }
    };
    let cancel = CancellationToken::new();
    // Boot HTTP, as serve starts it.
    let assets = dir.path().join("assets");
    std::fs::create_dir_all(&assets).unwrap();
    std::fs::write(dir.path().join("k"), b"kernel").unwrap();
    std::fs::write(dir.path().join("i"), b"initrd").unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let settings = BootConfig {
        listen: Some(addr.to_string()),
        assets_dir: Some(assets),
        wait_seconds: Some(1),
        // Every simulated server keeps a connection open: above the
        // default cap of a real boot network.
        max_connections: Some(16_384),
        ..Default::default()
    }
    .settings(&dir.path().join("data"))
    .unwrap();
    let directory = Directory::new();
    let recorder = BootRecorder::spawn(store.clone(), cancel.clone());
    tokio::spawn(directory.clone().run(store.clone(), cancel.clone()));
    let state = Arc::new(
        BootState::new(
            settings,
            BootDeps {
                store: store.clone(),
                directory: directory.clone(),
                recorder: recorder.clone(),
                ignition: Arc::new(boot::ignition::MinimalIgnition),
                leases: None,
                metrics: BootMetrics::default(),
            },
        )
        .unwrap(),
    );
    tokio::spawn(boot::serve(listener, state, cancel.clone()));

    let class = common::bootlab::class(
        "workers",
        common::bootlab::file_artifact(&dir.path().join("k")),
        common::bootlab::file_artifact(&dir.path().join("i")),
        &[],
    );
    bench.create_obj(&class).await.unwrap();
    let mut servers = HashMap::new();
    let mut machines = Vec::new();
    for i in 0..n {
        let name = format!("m{i:05}");
        let mac = format!(
            "52:54:01:{:02x}:{:02x}:{:02x}",
            i >> 16,
            (i >> 8) & 0xff,
            i & 0xff
        );
        let ip = std::net::Ipv4Addr::new(127, 1, ((i + 1) >> 8) as u8, ((i + 1) & 0xff) as u8);
        let mut m = common::bootlab::machine(&name, &mac, &format!("{ip}/8"), "workers");
        // Only BMC details and the class: the MAC is learned.
        m.spec.boot_mac_address = None;
        if roll.is_some() {
            // The set claims it and sets the class.
            m.spec.class_ref = None;
            m.metadata.labels = Some([("pool".to_string(), "bench".to_string())].into());
        }
        machines.push(m);
        servers.insert(
            name,
            Arc::new(Server {
                mac,
                ip,
                power: Mutex::new(PowerState::Off),
            }),
        );
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    // TFTP as serve starts it, serving a small boot file from memory.
    let boot_file = metalherd::files::MemorySource::new();
    boot_file.insert("ipxe.efi", vec![0x5a_u8; 4000]);
    let tftp = metalherd::tftp::TftpSettings::try_from(&metalherd::tftp::TftpConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        root: dir.path().to_path_buf(),
        // Every simulated server boots from loopback: one address for all.
        max_transfers_per_client: metalherd::tftp::TftpConfig::default().max_transfers,
        ..Default::default()
    })
    .unwrap();
    let tftp = metalherd::tftp::bind(&tftp).unwrap();
    let tftp_addr = tftp.local_addr();
    tokio::spawn(tftp.serve(
        Arc::new(boot_file),
        // As serve does: a finished transfer is a boot-history step.
        Arc::new(metalherd::tftp::BootTimeline {
            directory: directory.clone(),
            recorder: recorder.clone(),
        }),
        metalherd::tftp::TftpMetrics::default(),
        cancel.clone(),
    ));
    let fleet = Arc::new(Fleet {
        servers,
        boot_url: format!("http://{addr}"),
        dhcp: common::sim_boot::DhcpSim::new(
            "127.0.0.0/8",
            &format!("http://{addr}"),
            directory.clone(),
            recorder.clone(),
        ),
        tftp: tftp_addr,
        xid: AtomicU32::new(1),
        walks: AtomicUsize::new(0),
        ms: Default::default(),
        script_fetches: AtomicUsize::new(0),
        reimage: Duration::from_secs_f64(
            std::env::var("METALHERD_BENCH_REIMAGE_S")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0),
        ),
    });
    // Waiting for a boot slot keeps the default (slow) safety-net look:
    // freed slots wake their waiters.
    let limits = Limits {
        poll: Duration::from_secs(1),
        bmc_retry: Duration::from_secs(1),
        ..Limits::default()
    };
    let slots = BootSlots::new(limit);
    let reconciler = MachineReconciler {
        store: store.clone(),
        connector: Arc::new(Connector(fleet.clone())),
        cluster: None,
        slots: slots.clone(),
        limits,
        drain: DrainOptions::default(),
        releaser: None,
        firmware: None,
    };
    let metrics = RunnerMetrics::default();
    let runner = Runner::new(
        Arc::new(reconciler),
        RunnerConfig {
            concurrency: 32,
            resync: limits.resync,
            ..RunnerConfig::default()
        },
    )
    .with_metrics(metrics.clone());
    let queue = runner.handle();
    slots.set_waker(queue.clone());

    // Follow the run from watches opened before anything runs (cheap, and
    // exact: every committed state is seen, in order): phases, open boots
    // (their peak), machines in Error with their lastError, and the
    // store's writes by kind (for one machine, what each write changed).
    let track = Arc::new(Mutex::new(Tracker::default()));
    for kind in [metalherd::api::Kind::Machine, metalherd::api::Kind::Event] {
        let mut w = bench
            .watch(kind, &ListOptions::default(), None)
            .await
            .unwrap();
        let track = track.clone();
        let trace = std::env::var("METALHERD_BENCH_TRACE").ok();
        tokio::spawn(async move {
            use futures::StreamExt;
            let mut last = serde_json::Value::Null;
            while let Some(Ok(ev)) = w.next().await {
                let o = ev.object();
                let mut t = track.lock().unwrap();
                *t.writes.entry(kind.as_str()).or_default() += 1;
                if kind != metalherd::api::Kind::Machine {
                    continue;
                }
                t.saw(o);
                if trace.as_deref() == o.pointer("/metadata/name").and_then(|v| v.as_str()) {
                    println!("TRACE {} {}", ev.type_str(), diff(&last, o));
                    last = o.clone();
                }
            }
        });
    }

    let t0 = Instant::now();
    for m in &machines {
        bench.create_obj(m).await.unwrap();
    }
    let declared = t0.elapsed();
    tokio::spawn(feed(
        store.clone(),
        metalherd::api::Kind::Machine,
        ListOptions::default(),
        own_key(),
        queue,
        Duration::from_secs(1),
        cancel.clone(),
    ));
    tokio::spawn(runner.run(cancel.clone()));
    let mut set_tasks = tokio::task::JoinSet::new();
    if let Some(max_unavailable) = roll {
        rollout::declare_set(&store, n, max_unavailable, &mut set_tasks, cancel.clone()).await;
    }
    let deadline = Duration::from_secs(
        std::env::var("METALHERD_BENCH_DEADLINE_S")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1800),
    );
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let t = track.lock().unwrap();
        assert!(
            t.errors.is_empty(),
            "machines went to Error: {:?}",
            t.errors
        );
        let ready = t.phases.values().filter(|p| *p == "Ready").count();
        if ready == n {
            break;
        }
        assert!(
            t0.elapsed() < deadline,
            "deadline: {ready} of {n} Ready after {:?}",
            t0.elapsed()
        );
    }
    let wall = t0.elapsed();
    if let Some(max_unavailable) = roll {
        let walks = || fleet.walks.load(Ordering::Relaxed);
        rollout::roll(&store, n, max_unavailable, fleet.reimage, walks).await;
        cancel.cancel();
        return;
    }
    cancel.cancel();
    if let Some(api) = &api {
        api.report(n);
    }
    // The embedded backend's resourceVersion counts its writes (the
    // stand-in's, in Kubernetes mode; kube-apiserver's audit log counts).
    let writes: u64 = match api.as_ref().and_then(kube::Api::writes) {
        Some(w) => w,
        None => bench
            .list(metalherd::api::Kind::Machine, &ListOptions::default())
            .await
            .unwrap()
            .resource_version
            .parse()
            .unwrap(),
    };
    let (peak_booting, writes_by_kind) = {
        let t = track.lock().unwrap();
        (t.peak_holding, t.writes.clone())
    };
    println!(
        "BENCH writes by kind: {writes_by_kind:?} boot_steps_dropped={}",
        recorder.dropped()
    );
    let avg = |i: usize| fleet.ms[i].load(Ordering::Relaxed) / n as u64;
    println!(
        "BENCH walk mean ms: to_ignition_url={} ignition={} installed={} booted={} script_fetches={}",
        avg(0),
        avg(1),
        avg(2),
        avg(3),
        fleet.script_fetches.load(Ordering::Relaxed)
    );
    let file_mib = std::fs::metadata(dir.path().join("s.redb"))
        .map(|m| m.len() / (1 << 20))
        .unwrap_or(0);
    let reconciles = metrics.count("machine", "ok") + metrics.count("machine", "error");
    println!(
        "BENCH machines={n} limit={limit} declare={:.1}s wall_to_all_ready={:.1}s reconciles={reconciles} \
         reconciles_per_s={:.0} walks={} peak_open_boots={peak_booting} peak_rss_mib={} \
         store_writes={writes} writes_per_machine={:.1} store_file_mib={file_mib}",
        declared.as_secs_f64(),
        wall.as_secs_f64(),
        reconciles as f64 / wall.as_secs_f64(),
        fleet.walks.load(Ordering::Relaxed),
        peak_rss_kib() / 1024,
        writes as f64 / n as f64,
    );
    assert!(
        peak_booting <= limit.max(1),
        "limit {limit} overshot: {peak_booting}"
    );
    assert_eq!(
        fleet.walks.load(Ordering::Relaxed),
        n,
        "one boot per machine"
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::var("METALHERD_BENCH_MACHINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let limits = std::env::var("METALHERD_BENCH_LIMITS").unwrap_or_else(|_| "50,500".into());
    let roll = std::env::var("METALHERD_BENCH_ROLL")
        .ok()
        .and_then(|v| v.parse().ok());
    for l in limits.split(',').filter_map(|s| s.trim().parse().ok()) {
        run(n, l, roll).await;
    }
}
