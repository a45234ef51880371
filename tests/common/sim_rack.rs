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
//! its answer from the config metalherd served.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::redfish_server::{RedfishServer, ServerOptions};

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
        // reqwest is built without a default TLS provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let stop = Arc::new(AtomicBool::new(false));
        let health_port = super::free_port();
        let mut machines = Vec::new();
        let mut tasks = Vec::new();
        for i in 1..=n {
            let mac = format!("52:54:00:{subnet:02x}:00:{i:02x}");
            let bmc = RedfishServer::start(ServerOptions {
                task_polls: 0,
                mac: mac.to_uppercase(),
                ..Default::default()
            })
            .await;
            let m = Arc::new(SimMachine {
                name: format!("{prefix}{i}"),
                mac,
                ip: Ipv4Addr::new(127, 0, subnet, 10 + i),
                bmc,
                boots: AtomicUsize::new(0),
                health: AtomicU16::new(200),
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
            walk(&m, &boot_url, &stop).await;
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

/// One network boot: script, Ignition, installed, reboot from disk, booted.
async fn walk(m: &SimMachine, base: &str, stop: &AtomicBool) {
    let c = reqwest::Client::builder()
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
    until_ok(&c, false, &ign, stop).await;
    // Out of service from here until the new OS is up.
    m.health.store(503, Ordering::SeqCst);
    let home = |what: &str| format!("{base}/callhome/{what}?mac={hy}&token={token}");
    until_ok(&c, true, &home("installed"), stop).await;
    let answer = script
        .split_whitespace()
        .find_map(|w| w.strip_prefix("health="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    m.health.store(answer, Ordering::SeqCst);
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
