//! Store and API benchmark (not a test): create, get, list and watch with
//! N Machines (default 10,000), latency p50/p99 and throughput, directly on
//! the embedded store and over the REST API of a running `metalherd serve`,
//! plus the same HTTP client against nginx serving one Machine's JSON as a
//! peer. Run through `scripts/bench-store`, which starts the server and
//! nginx and prints the figures for BENCHMARKS.md.
//!
//! Environment: BENCH_N, BENCH_DIR (scratch dir), BENCH_API (URL),
//! BENCH_TOKEN, BENCH_PID (server PID, for RSS), BENCH_PEER (nginx URL).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use metalherd::api::Kind;
use metalherd::cli::client::ApiClient;
use metalherd::store::embedded::EmbeddedStore;
use metalherd::store::{ListOptions, Store};
use serde_json::{Value, json};

fn machine(i: usize) -> Value {
    json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": format!("m{i:05}"), "namespace": "default",
                     "labels": {"rack": format!("r{}", i % 40), "role": "worker"}},
        "spec": {
            // Loopback port 9 (nothing listens): the machine controller in
            // `serve` may try these BMCs, and must reach nothing off-box.
            "bmc": {"address": format!("redfish+https://127.0.0.1:9/redfish/v1/Systems/{i}"),
                    "credentialsSecretRef": {"name": format!("m{i:05}-bmc")}},
            "bootMACAddress": format!("52:54:00:00:{:02x}:{:02x}", i / 256, i % 256),
            "network": {"address": format!("10.2.{}.{}/16", i / 250, i % 250 + 1), "gateway": "10.2.255.254"},
            "classRef": {"name": "flatcar"}, "online": true
        }
    })
}

struct Lat(Vec<Duration>);

impl Lat {
    fn pct(&mut self, p: f64) -> f64 {
        self.0.sort();
        let i = ((self.0.len() as f64 - 1.0) * p).round() as usize;
        self.0.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    }
}

fn row(what: &str, n: usize, total: Duration, lat: Option<&mut Lat>) {
    let rate = n as f64 / total.as_secs_f64();
    match lat {
        Some(l) => println!(
            "| {what} | {n} | {:.2} s | {rate:.0}/s | {:.3} ms | {:.3} ms |",
            total.as_secs_f64(),
            l.pct(0.5),
            l.pct(0.99)
        ),
        None => println!(
            "| {what} | {n} | {:.2} s | {rate:.0}/s | | |",
            total.as_secs_f64()
        ),
    }
}

fn rss_kib(pid: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn bench_store(n: usize, dir: &str) {
    let path = std::path::Path::new(dir).join("direct.redb");
    let _ = std::fs::remove_file(&path);
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&path).unwrap());
    println!("\n### Embedded store, in process\n");
    println!(
        "| operation | count | total | throughput | p50 | p99 |\n| --- | --- | --- | --- | --- | --- |"
    );
    let from = store
        .list(Kind::Machine, &ListOptions::default())
        .await
        .unwrap()
        .resource_version;
    let mut lat = Lat(Vec::with_capacity(n));
    let t = Instant::now();
    for i in 0..n {
        let s = Instant::now();
        store.create(Kind::Machine, machine(i)).await.unwrap();
        lat.0.push(s.elapsed());
    }
    row(
        "create (1 fsync'd transaction each)",
        n,
        t.elapsed(),
        Some(&mut lat),
    );
    let mut lat = Lat(Vec::with_capacity(n));
    let t = Instant::now();
    for i in 0..n {
        let s = Instant::now();
        store
            .get(Kind::Machine, "default", &format!("m{:05}", (i * 7919) % n))
            .await
            .unwrap();
        lat.0.push(s.elapsed());
    }
    row("get", n, t.elapsed(), Some(&mut lat));
    let mut lat = Lat(Vec::new());
    let t = Instant::now();
    for _ in 0..10 {
        let s = Instant::now();
        let l = store
            .list(Kind::Machine, &ListOptions::default())
            .await
            .unwrap();
        assert_eq!(l.items.len(), n);
        lat.0.push(s.elapsed());
    }
    row(&format!("list all {n}"), 10, t.elapsed(), Some(&mut lat));
    let t = Instant::now();
    let mut w = store
        .watch(Kind::Machine, &ListOptions::default(), Some(&from))
        .await
        .unwrap();
    for _ in 0..n {
        w.next().await.unwrap().unwrap();
    }
    row(
        "watch: replay every create from a version",
        n,
        t.elapsed(),
        None,
    );
}

async fn bench_api(n: usize, url: &str, token: &str, pid: &str, peer: Option<&str>) {
    let c = ApiClient::new(url, Some(token.to_string()), "/nonexistent".into(), true).unwrap();
    println!("\n### REST API of `metalherd serve` (loopback HTTP/1.1, one client)\n");
    println!("RSS of the server at start: {} MiB\n", rss_kib(pid) / 1024);
    println!(
        "| operation | count | total | throughput | p50 | p99 |\n| --- | --- | --- | --- | --- | --- |"
    );
    let from =
        c.list(Kind::Machine, Some("default"), None).await.unwrap()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
    // A watcher running while the creates happen: it must see all of them.
    let mut live = c
        .watch(Kind::Machine, Some("default"), None, Some(&from))
        .await
        .unwrap();
    let watcher = tokio::spawn(async move {
        let mut k = 0;
        while k < n {
            match tokio::time::timeout(Duration::from_secs(120), live.next()).await {
                Ok(Some(Ok(_))) => k += 1,
                _ => break,
            }
        }
        k
    });
    let mut lat = Lat(Vec::with_capacity(n));
    let t = Instant::now();
    for i in 0..n {
        let s = Instant::now();
        c.create(Kind::Machine, &machine(i)).await.unwrap();
        lat.0.push(s.elapsed());
    }
    row("create (POST, validated)", n, t.elapsed(), Some(&mut lat));
    let t = Instant::now();
    let seen = watcher.await.unwrap();
    println!(
        "| live watch saw every create | {seen} | +{:.3} s after the last | | | |",
        t.elapsed().as_secs_f64()
    );
    let rss_after_create = rss_kib(pid);
    let mut lat = Lat(Vec::with_capacity(n));
    let t = Instant::now();
    for i in 0..n {
        let s = Instant::now();
        c.get(Kind::Machine, "default", &format!("m{:05}", (i * 7919) % n))
            .await
            .unwrap();
        lat.0.push(s.elapsed());
    }
    row("get", n, t.elapsed(), Some(&mut lat));
    // 8 concurrent getters.
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..8 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let mut l = Vec::new();
            for i in (w..n).step_by(8) {
                let s = Instant::now();
                c.get(Kind::Machine, "default", &format!("m{:05}", i))
                    .await
                    .unwrap();
                l.push(s.elapsed());
            }
            l
        }));
    }
    let mut lat = Lat(Vec::new());
    for tk in tasks {
        lat.0.extend(tk.await.unwrap());
    }
    row("get, 8 concurrent clients", n, t.elapsed(), Some(&mut lat));
    let mut lat = Lat(Vec::new());
    let t = Instant::now();
    for _ in 0..10 {
        let s = Instant::now();
        let l = c.list(Kind::Machine, Some("default"), None).await.unwrap();
        assert_eq!(l["items"].as_array().unwrap().len(), n);
        lat.0.push(s.elapsed());
    }
    row(&format!("list all {n}"), 10, t.elapsed(), Some(&mut lat));
    let mut lat = Lat(Vec::new());
    let t = Instant::now();
    for r in 0..40 {
        let s = Instant::now();
        let l = c
            .list(Kind::Machine, Some("default"), Some(&format!("rack=r{r}")))
            .await
            .unwrap();
        assert_eq!(l["items"].as_array().unwrap().len(), n / 40);
        lat.0.push(s.elapsed());
    }
    row(
        &format!("list with labelSelector ({} match)", n / 40),
        40,
        t.elapsed(),
        Some(&mut lat),
    );
    let t = Instant::now();
    let mut w = c
        .watch(Kind::Machine, Some("default"), None, Some(&from))
        .await
        .unwrap();
    for _ in 0..n {
        w.next().await.unwrap().unwrap();
    }
    row(
        "watch: replay every create from a version",
        n,
        t.elapsed(),
        None,
    );
    let rss_end = rss_kib(pid);
    println!(
        "\nRSS of the server with {n} Machines: {} MiB after the creates, {} MiB after lists and watches\n",
        rss_after_create / 1024,
        rss_end / 1024
    );
    let db = std::fs::metadata(
        std::path::Path::new(&std::env::var("BENCH_DATA").unwrap_or_default())
            .join("metalherd.redb"),
    )
    .map(|m| m.len() / (1024 * 1024))
    .unwrap_or(0);
    println!("Store file size: {db} MiB\n");

    if let Some(peer) = peer {
        // The same HTTP client against nginx serving one Machine's JSON.
        let http = reqwest::Client::new();
        let body = c.get(Kind::Machine, "default", "m00000").await.unwrap();
        let _ = body;
        let mut lat = Lat(Vec::with_capacity(n));
        let t = Instant::now();
        for _ in 0..n {
            let s = Instant::now();
            let r = http.get(peer).send().await.unwrap();
            let _: Value = r.json().await.unwrap();
            lat.0.push(s.elapsed());
        }
        let peer_total = t.elapsed();
        let (p50, p99) = (lat.pct(0.5), lat.pct(0.99));
        println!("### Peer: nginx serving the same Machine JSON, same client\n");
        println!(
            "| operation | count | total | throughput | p50 | p99 |\n| --- | --- | --- | --- | --- | --- |"
        );
        println!(
            "| nginx GET static JSON | {n} | {:.2} s | {:.0}/s | {p50:.3} ms | {p99:.3} ms |",
            peer_total.as_secs_f64(),
            n as f64 / peer_total.as_secs_f64()
        );
        println!("PEER_GET_P50_MS={p50:.4}");
    }
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let n: usize = std::env::var("BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let dir = std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp".into());
    bench_store(n, &dir).await;
    if let (Ok(url), Ok(token), Ok(pid)) = (
        std::env::var("BENCH_API"),
        std::env::var("BENCH_TOKEN"),
        std::env::var("BENCH_PID"),
    ) {
        let peer = std::env::var("BENCH_PEER").ok();
        bench_api(n, &url, &token, &pid, peer.as_deref()).await;
    }
}
