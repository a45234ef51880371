//! A simulated rack for stories a VM adds nothing to: N in-process Redfish
//! BMCs (tests/common/redfish_server.rs, one per server, each with its own
//! MAC) and, per server, a simulated machine. Whenever its BMC starts it
//! (power on, or a power cycle) the machine walks the boot path at protocol
//! level against metalherd's boot HTTP endpoints, from its own loopback
//! address as the boot path checks it: the iPXE script for its MAC, the
//! Ignition URL the script names, then the `installed` and `booted`
//! call-homes. The installed "OS" serves a health endpoint on its address
//! that answers the status named by a `health=NNN` kernel argument of the
//! script it booted (200 when there is none), as the lab's test OS takes
//! its answer from the config metalherd served. Started without a network
//! boot override (none, `Hdd`, or a `Once` override an earlier boot
//! consumed), the machine boots its disk:
//! the installed OS answers again, unless `disk_fault` is set (a fault a
//! reboot does not cure; the next install clears it).

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::rack::{controller_config, put_secret, wait_phase};
use super::redfish_server::{RedfishServer, ServerOptions};
use super::server::{Server, text};

/// The API path of Machines in the default namespace.
pub const MACHINES: &str = "/apis/metalherd.dev/v1alpha1/namespaces/default/machines";

/// One simulated server.
pub struct SimMachine {
    pub name: String,
    pub mac: String,
    pub ip: Ipv4Addr,
    pub bmc: RedfishServer,
    /// Network boots walked to the end (install and reimage alike).
    pub boots: AtomicUsize,
    /// What the health endpoint answers now.
    pub health: AtomicU16,
    /// While set, the "installer" waits before it calls home `installed`
    /// (after its Ignition fetch): a provisioning held in flight.
    pub hold_install: AtomicBool,
    /// What the installed OS answers (0: nothing installed yet).
    pub installed: AtomicU16,
    /// The installed OS is broken on disk: a disk boot comes up answering
    /// 500; an install clears it.
    pub disk_fault: AtomicBool,
    /// Boots from the disk (power-ons without a network boot override).
    pub disk_boots: AtomicUsize,
    /// The Ignition config the last network boot fetched.
    pub ignition: std::sync::Mutex<String>,
}

pub struct SimRack {
    pub machines: Vec<Arc<SimMachine>>,
    /// Port of every machine's health endpoint (`http://ADDRESS:PORT/healthz`).
    pub health_port: u16,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for SimRack {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl SimRack {
    /// `n` servers named `{prefix}1..`, at `127.0.{subnet}.11..`, booting
    /// from the boot HTTP server at `boot_url`. Must run on a tokio runtime.
    pub async fn start(prefix: &str, n: u8, subnet: u8, boot_url: &str) -> SimRack {
        Self::start_with(prefix, n, subnet, boot_url, |_| None).await
    }

    /// As [`SimRack::start`], server `i` (1-based) reporting the
    /// manufacturer and memory (GiB) `hardware(i)` names, if any.
    pub async fn start_with(
        prefix: &str,
        n: u8,
        subnet: u8,
        boot_url: &str,
        hardware: fn(u8) -> Option<(&'static str, u64)>,
    ) -> SimRack {
        // reqwest is built without a default TLS provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let stop = Arc::new(AtomicBool::new(false));
        let health_port = super::free_port();
        let mut machines = Vec::new();
        let mut tasks = Vec::new();
        for i in 1..=n {
            let mac = format!("52:54:00:{subnet:02x}:00:{i:02x}");
            let mut opts = ServerOptions {
                task_polls: 0,
                mac: mac.to_uppercase(),
                ..Default::default()
            };
            if let Some((vendor, gib)) = hardware(i) {
                opts.manufacturer = vendor.to_string();
                opts.memory_gib = gib;
            }
            let bmc = RedfishServer::start(opts).await;
            let m = Arc::new(SimMachine {
                name: format!("{prefix}{i}"),
                mac,
                ip: Ipv4Addr::new(127, 0, subnet, 10 + i),
                bmc,
                boots: AtomicUsize::new(0),
                health: AtomicU16::new(200),
                hold_install: AtomicBool::new(false),
                installed: AtomicU16::new(0),
                disk_fault: AtomicBool::new(false),
                disk_boots: AtomicUsize::new(0),
                ignition: std::sync::Mutex::new(String::new()),
            });
            let listener = tokio::net::TcpListener::bind((m.ip, health_port))
                .await
                .expect("bind health endpoint");
            tasks.push(tokio::spawn(health(m.clone(), listener)));
            tasks.push(tokio::spawn(run(
                m.clone(),
                boot_url.to_string(),
                stop.clone(),
            )));
            machines.push(m);
        }
        SimRack {
            machines,
            health_port,
            stop,
            tasks,
        }
    }

    /// A Machine manifest for server `i` (0-based) with `labels`.
    pub fn manifest(&self, i: usize, secret: &str, labels: serde_json::Value) -> serde_json::Value {
        let m = &self.machines[i];
        serde_json::json!({
            "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
            "metadata": {"name": m.name, "namespace": "default", "labels": labels},
            "spec": {
                "bmc": {"address": format!("redfish+http://127.0.0.1:{}/redfish/v1/Systems/1", m.bmc.port),
                        "credentialsSecretRef": {"name": secret}},
                "bootMACAddress": m.mac,
                "network": {"address": format!("{}/8", m.ip), "hostname": m.name},
            }
        })
    }

    /// Boots walked per server, in order.
    pub fn boots(&self) -> Vec<usize> {
        self.machines
            .iter()
            .map(|m| m.boots.load(Ordering::SeqCst))
            .collect()
    }
}

/// The BMC credentials every simulated server takes.
pub fn bmc_credentials() -> (String, String) {
    let o = ServerOptions::default();
    (o.username, o.password)
}

async fn run(m: Arc<SimMachine>, boot_url: String, stop: Arc<AtomicBool>) {
    let mut seen = 0;
    while !stop.load(Ordering::SeqCst) {
        let ons = m.bmc.counters().power_ons;
        if ons > seen {
            seen = ons;
            if m.bmc.take_boot_target() == "Pxe" {
                walk(&m, &boot_url, &stop).await;
            } else {
                disk_boot(&m);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn until_ok(c: &reqwest::Client, post: bool, url: &str, stop: &AtomicBool) -> String {
    while !stop.load(Ordering::SeqCst) {
        let req = if post { c.post(url) } else { c.get(url) };
        if let Ok(r) = req.send().await
            && r.status() == 200
            && let Ok(t) = r.text().await
        {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    String::new()
}

/// A boot from the disk: the installed OS comes up (broken while
/// `disk_fault` is set); with nothing installed, nothing answers anew.
fn disk_boot(m: &SimMachine) {
    let installed = m.installed.load(Ordering::SeqCst);
    if installed == 0 {
        return;
    }
    let answer = if m.disk_fault.load(Ordering::SeqCst) {
        500
    } else {
        installed
    };
    m.health.store(answer, Ordering::SeqCst);
    m.disk_boots.fetch_add(1, Ordering::SeqCst);
}

/// One network boot: script, Ignition, installed, reboot from disk, booted.
async fn walk(m: &SimMachine, base: &str, stop: &AtomicBool) {
    // Plain HTTP, as firmware boots: no system trust store to load.
    let c = reqwest::Client::builder()
        .tls_certs_only([])
        .local_address(std::net::IpAddr::V4(m.ip))
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let hy = m.mac.replace(':', "-");
    // While the machine's boot is not in the boot directory yet, the
    // script has no Ignition URL: firmware retries, so do we.
    let (script, ign) = loop {
        let script = until_ok(
            &c,
            false,
            &format!("{base}/boot.ipxe?mac={hy}&arch=x86_64&platform=efi"),
            stop,
        )
        .await;
        if let Some(u) = script
            .split_whitespace()
            .find_map(|w| w.strip_prefix("ignition.config.url="))
        {
            break (script.clone(), u.to_string());
        }
        if stop.load(Ordering::SeqCst) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let token = ign
        .split("token=")
        .nth(1)
        .unwrap_or_default()
        .split('&')
        .next()
        .unwrap_or_default()
        .to_string();
    let config = until_ok(&c, false, &ign, stop).await;
    *m.ignition.lock().expect("lock") = config;
    // Out of service from here until the new OS is up.
    m.health.store(503, Ordering::SeqCst);
    while m.hold_install.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let home = |what: &str| format!("{base}/callhome/{what}?mac={hy}&token={token}");
    until_ok(&c, true, &home("installed"), stop).await;
    let answer = script
        .split_whitespace()
        .find_map(|w| w.strip_prefix("health="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    m.health.store(answer, Ordering::SeqCst);
    m.installed.store(answer, Ordering::SeqCst);
    m.disk_fault.store(false, Ordering::SeqCst);
    until_ok(&c, true, &home("booted"), stop).await;
    m.boots.fetch_add(1, Ordering::SeqCst);
}

/// The installed OS's health endpoint: any request gets the current answer.
async fn health(m: Arc<SimMachine>, listener: tokio::net::TcpListener) {
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            return;
        };
        let code = m.health.load(Ordering::SeqCst);
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            let _ = sock.read(&mut buf).await;
            let reply =
                format!("HTTP/1.1 {code} S\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            let _ = sock.write_all(reply.as_bytes()).await;
        });
    }
}

pub const SETS: &str = "/apis/metalherd.dev/v1alpha1/namespaces/default/machinesets";

/// A running `metalherd serve` with a simulated rack of four servers, and
/// a MachineSet story's steps (CLI runs, the set, its machines).
pub struct Story {
    pub api: Arc<Server>,
    pub rack: SimRack,
    pub dir: tempfile::TempDir,
    /// metalherd's boot HTTP, as the servers reach it.
    pub boot_url: String,
}

/// Start the rack and `metalherd serve`, declare the classes (`extra`:
/// `(name, image version, kernel args)`) and the Machines, and wait until
/// every Machine is Available.
pub async fn story(prefix: &str, subnet: u8, classes: &[(&str, &str, &[&str])]) -> Story {
    story_with(prefix, subnet, classes, |_| None).await
}

/// As [`story`], with the servers' hardware as [`SimRack::start_with`] takes it.
pub async fn story_with(
    prefix: &str,
    subnet: u8,
    classes: &[(&str, &str, &[&str])],
    hardware: fn(u8) -> Option<(&'static str, u64)>,
) -> Story {
    story_declared(prefix, subnet, classes, hardware, |_, _| "Available").await
}

/// As [`story_with`], each server's Machine manifest first changed by
/// `declare` (server index, manifest), which names the phase to wait for.
pub async fn story_declared(
    prefix: &str,
    subnet: u8,
    classes: &[(&str, &str, &[&str])],
    hardware: fn(u8) -> Option<(&'static str, u64)>,
    declare: fn(usize, &mut Value) -> &'static str,
) -> Story {
    let dir = tempfile::tempdir().unwrap();
    for f in ["vmlinuz", "initrd"] {
        std::fs::write(dir.path().join(f), f.as_bytes()).unwrap();
    }
    std::fs::create_dir_all(dir.path().join("assets")).unwrap();
    let boot_port = super::free_port();
    let boot_url = format!("http://127.0.0.1:{boot_port}");
    let rack = SimRack::start_with(prefix, 4, subnet, &boot_url, hardware).await;
    let config = controller_config(
        "",
        &format!(
            "boot:\n  listen: 127.0.0.1:{boot_port}\n  assetsDir: {}\n  waitSeconds: 1\n",
            dir.path().join("assets").display()
        ),
    );
    let api = tokio::task::spawn_blocking(move || Server::start_with_config(Some(&config)))
        .await
        .unwrap();
    let api = Arc::new(api);
    let mut docs = Vec::new();
    for (name, version, args) in classes {
        let mut c = super::bootlab::class(
            name,
            super::bootlab::file_artifact(&dir.path().join("vmlinuz")),
            super::bootlab::file_artifact(&dir.path().join("initrd")),
            args,
        );
        c.spec.image.version = version.to_string();
        let mut c = serde_json::to_value(&c).unwrap();
        c["apiVersion"] = json!("metalherd.dev/v1alpha1");
        c["kind"] = json!("MachineClass");
        docs.push(c);
    }
    let (user, pw) = bmc_credentials();
    let a = api.clone();
    let (manifests, phases): (Vec<Value>, Vec<&str>) = (0..rack.machines.len())
        .map(|i| {
            let mut m = rack.manifest(i, "bmc", json!({"role": "worker"}));
            let phase = declare(i, &mut m);
            (m, phase)
        })
        .unzip();
    tokio::task::spawn_blocking(move || {
        put_secret(&a, "bmc", &user, &pw);
        let join = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "join", "namespace": "default"},
            "stringData": {"token": "abcdef.0123456789abcdef"}});
        let (code, body) = a.req("POST", "/api/v1/namespaces/default/secrets", Some(&join));
        assert!(code < 300, "join secret: {code} {body}");
        for c in &docs {
            let (code, body) = a.req(
                "POST",
                "/apis/metalherd.dev/v1alpha1/namespaces/default/machineclasses",
                Some(c),
            );
            assert!(code < 300, "class: {code} {body}");
        }
        for m in &manifests {
            let (code, body) = a.req(
                "POST",
                "/apis/metalherd.dev/v1alpha1/namespaces/default/machines",
                Some(m),
            );
            assert!(code < 300, "machine: {code} {body}");
        }
        for (m, phase) in manifests.iter().zip(phases) {
            let name = m["metadata"]["name"].as_str().unwrap();
            wait_phase(&a, name, phase, Duration::from_secs(60));
        }
    })
    .await
    .unwrap();
    Story {
        api,
        rack,
        dir,
        boot_url,
    }
}

impl Story {
    /// GET the object at API `path`, change it with `f`, PUT it back.
    pub async fn edit(&self, path: String, f: impl FnOnce(&mut Value) + Send + 'static) {
        let api = self.api.clone();
        tokio::task::spawn_blocking(move || {
            let (code, mut v) = api.req("GET", &path, None);
            assert_eq!(code, 200, "{path}: {v}");
            f(&mut v);
            let (code, body) = api.req("PUT", &path, Some(&v));
            assert!(code < 300, "{path}: {code} {body}");
        })
        .await
        .unwrap()
    }

    /// The Machine `name` as the API serves it.
    pub async fn machine(&self, name: &str) -> Value {
        let api = self.api.clone();
        let path = format!("{MACHINES}/{name}");
        tokio::task::spawn_blocking(move || api.req("GET", &path, None).1)
            .await
            .unwrap()
    }

    /// The Machine `name` once `f` holds for it (90 s at most; the panic
    /// says `what` was awaited, with its status and the server's log).
    pub async fn until(&self, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let start = std::time::Instant::now();
        loop {
            let m = self.machine(name).await;
            if f(&m) {
                return m;
            }
            if start.elapsed() > Duration::from_secs(90) {
                panic!(
                    "{name}: {what} not within 90 s\n{:#}\n{}",
                    m["status"],
                    super::rack::tail(&self.api.log(), 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `metalherd ARGS`: (success, stdout, stderr).
    pub async fn cli(&self, args: &[&str]) -> (bool, String, String) {
        let api = self.api.clone();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = api.cli(&a);
            let (out, err) = text(&o);
            eprintln!("$ metalherd {}\n{out}{err}", a.join(" "));
            (o.status.success(), out, err)
        })
        .await
        .unwrap()
    }

    /// `metalherd apply` of the set `workers` with this class and replicas.
    pub async fn apply_set(&self, class: &str, replicas: i32, deadline: u32) {
        self.apply_set_with(class, replicas, deadline, json!({}))
            .await
    }

    /// As [`Story::apply_set`], with `extra` merged into the set's spec.
    pub async fn apply_set_with(&self, class: &str, replicas: i32, deadline: u32, extra: Value) {
        let mut set = json!({
            "apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineSet",
            "metadata": {"name": "workers", "namespace": "default"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"role": "worker"}},
                "template": {"labels": {"pool": "workers"}, "classRef": {"name": class}},
                "updateStrategy": {
                    "type": "InPlace", "maxUnavailable": 2,
                    "progressDeadlineSeconds": deadline, "autoRollback": true,
                    "healthCheck": {"nodeReadySeconds": 1, "httpProbe": {
                        "url": format!("http://{{{{address}}}}:{}/healthz", self.rack.health_port),
                        "expectedStatus": 200}}
                }
            }
        });
        if let (Some(spec), Some(e)) = (set["spec"].as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                spec.insert(k.clone(), v.clone());
            }
        }
        let path = self.dir.path().join("workers.json");
        std::fs::write(&path, set.to_string()).unwrap();
        let (ok, out, err) = self.cli(&["apply", "-f", path.to_str().unwrap()]).await;
        assert!(ok, "apply: {out}{err}");
    }

    /// The class `name` edited in place: its image version set to `version`.
    pub async fn edit_class(&self, name: &str, version: &str) {
        let api = self.api.clone();
        let path = format!("/apis/metalherd.dev/v1alpha1/namespaces/default/machineclasses/{name}");
        let version = version.to_string();
        tokio::task::spawn_blocking(move || {
            let (code, mut c) = api.req("GET", &path, None);
            assert_eq!(code, 200, "class: {c}");
            c["spec"]["image"]["version"] = json!(version);
            let (code, body) = api.req("PUT", &path, Some(&c));
            assert!(code < 300, "class edit: {code} {body}");
        })
        .await
        .unwrap()
    }

    /// The value of one sample line of `/metrics` (0 when absent).
    pub async fn metric(&self, sample: &str) -> f64 {
        let api = self.api.clone();
        let sample = format!("{sample} ");
        tokio::task::spawn_blocking(move || {
            let out = api
                .curl()
                .args(["-s", "-H", &format!("Authorization: Bearer {}", api.token)])
                .arg(format!("{}/metrics", api.url))
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .find_map(|l| l.strip_prefix(&sample))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0.0)
        })
        .await
        .unwrap()
    }

    pub async fn set(&self) -> Value {
        let api = self.api.clone();
        tokio::task::spawn_blocking(move || api.req("GET", &format!("{SETS}/workers"), None).1)
            .await
            .unwrap()
    }

    pub async fn machines(&self) -> Vec<Value> {
        let api = self.api.clone();
        tokio::task::spawn_blocking(move || {
            let (_, l) = api.req(
                "GET",
                "/apis/metalherd.dev/v1alpha1/namespaces/default/machines",
                None,
            );
            l["items"].as_array().cloned().unwrap_or_default()
        })
        .await
        .unwrap()
    }

    /// Every machine pinned to `rev` and installed with it.
    pub async fn all_on(&self, rev: i64) {
        let set = self.set().await;
        let hash = set["status"]["revisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["revision"] == rev)
            .map(|r| r["hash"].clone())
            .unwrap();
        for m in self.machines().await {
            let name = &m["metadata"]["name"];
            assert_eq!(
                m["metadata"]["labels"]["metalherd.dev/machineset-revision"],
                rev.to_string(),
                "{name}"
            );
            assert_eq!(m["status"]["provisionedRevision"], hash, "{name}");
            assert_eq!(m["status"]["phase"], "Ready", "{name}");
        }
    }
}
