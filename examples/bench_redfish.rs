//! Benchmark, not a test: power-state polls per second and
//! client memory with 1,000 concurrent Redfish sessions against 1,000
//! simulated BMCs (the axum Redfish test server, one listener per BMC) in a
//! separate process on loopback. The peer measured in the same run is a
//! bare reqwest GET of the same resource with the same session token (no
//! JSON decoding, no driver), so the figures are ratios against it.
//!
//! `cargo run --release --example bench_redfish`. The BMCs run in a child
//! process: this same binary, started with `METALHERD_BENCH_SERVE` set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::redfish_server::{RedfishServer, ServerOptions};
use metalherd::bmc::redfish::logic::RetryPolicy;
use metalherd::bmc::redfish::{RedfishBmc, TlsMode};
use metalherd::bmc::{Bmc, Credentials, PowerState, Timing};

const SERVE_ENV: &str = "METALHERD_BENCH_SERVE";

fn n_bmcs() -> usize {
    std::env::var("METALHERD_BENCH_BMCS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
}

fn seconds() -> u64 {
    std::env::var("METALHERD_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10)
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    match std::env::var(SERVE_ENV) {
        Ok(ports_file) => serve_bmcs(&ports_file),
        Err(_) => bench_redfish_sessions(),
    }
}

/// The server side: run only as a child of the benchmark (env var set).
fn serve_bmcs(ports_file: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut servers = Vec::new();
        for _ in 0..n_bmcs() {
            servers.push(
                RedfishServer::start(ServerOptions {
                    power: "On",
                    ..Default::default()
                })
                .await,
            );
        }
        let ports: Vec<String> = servers.iter().map(|s| s.port.to_string()).collect();
        let tmp = format!("{ports_file}.tmp");
        std::fs::write(&tmp, ports.join("\n")).unwrap();
        std::fs::rename(&tmp, ports_file).unwrap();
        // Serve until the parent closes our stdin.
        tokio::task::spawn_blocking(|| {
            let mut b = String::new();
            let _ = std::io::stdin().read_line(&mut b);
        })
        .await
        .unwrap();
        drop(servers);
    });
}

fn bench_redfish_sessions() {
    let n = n_bmcs();
    let dir = tempfile::tempdir().unwrap();
    let ports_file = dir.path().join("ports");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(SERVE_ENV, &ports_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let ports: Vec<u16> = common::proc::wait_for(Duration::from_secs(120), || {
        std::fs::read_to_string(&ports_file).ok()
    })
    .expect("server process did not start")
    .lines()
    .map(|l| l.parse().unwrap())
    .collect();
    assert_eq!(ports.len(), n);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pw = ServerOptions::default().password;
    let secs = seconds();
    rt.block_on(async move {
        let rss0 = rss_kib();
        let timing = Timing {
            request_timeout: Duration::from_secs(30),
            ..Timing::default()
        };
        let bmcs: Vec<Arc<RedfishBmc>> = ports
            .iter()
            .map(|p| {
                Arc::new(
                    RedfishBmc::with_retry(
                        url::Url::parse(&format!("http://127.0.0.1:{p}")).unwrap(),
                        Some("/redfish/v1/Systems/1".into()),
                        Credentials::new("root", pw.as_str()),
                        &TlsMode::SystemRoots,
                        timing,
                        RetryPolicy::default(),
                    )
                    .unwrap(),
                )
            })
            .collect();
        // Open all sessions concurrently.
        let t0 = Instant::now();
        let opened = futures::future::join_all(bmcs.iter().map(|b| b.power_state())).await;
        let login_time = t0.elapsed();
        assert!(opened.iter().all(|r| matches!(r, Ok(PowerState::On))));
        for b in &bmcs {
            assert!(b.uses_session().await);
        }
        let rss1 = rss_kib();

        // Driver: every session polls power state for `secs` seconds.
        let polls = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let t0 = Instant::now();
        let tasks: Vec<_> = bmcs
            .iter()
            .map(|b| {
                let (b, polls, stop) = (b.clone(), polls.clone(), stop.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        b.power_state().await.unwrap();
                        polls.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(secs)).await;
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
        let driver_rate = polls.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64();
        let rss2 = rss_kib();

        // Peer: a bare GET with a token, one shared client, same concurrency.
        let client = reqwest::Client::new();
        let mut tokens = Vec::new();
        for p in &ports {
            let r = client
                .post(format!(
                    "http://127.0.0.1:{p}/redfish/v1/SessionService/Sessions"
                ))
                .json(&serde_json::json!({"UserName": "root", "Password": pw}))
                .send()
                .await
                .unwrap();
            let tok = r.headers()["x-auth-token"].to_str().unwrap().to_string();
            tokens.push((*p, tok));
        }
        let polls = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let t0 = Instant::now();
        let tasks: Vec<_> = tokens
            .into_iter()
            .map(|(p, tok)| {
                let (client, polls, stop) = (client.clone(), polls.clone(), stop.clone());
                tokio::spawn(async move {
                    let url = format!("http://127.0.0.1:{p}/redfish/v1/Systems/1");
                    while !stop.load(Ordering::Relaxed) {
                        let r = client
                            .get(&url)
                            .header("X-Auth-Token", &tok)
                            .send()
                            .await
                            .unwrap();
                        assert!(r.status().is_success());
                        r.bytes().await.unwrap();
                        polls.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(secs)).await;
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
        let peer_rate = polls.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64();

        // Log every session out.
        let t0 = Instant::now();
        futures::future::join_all(bmcs.iter().map(|b| b.close())).await;
        let logout_time = t0.elapsed();

        println!("BMCs/sessions: {n}");
        println!("sessions opened concurrently in {login_time:?}; closed in {logout_time:?}");
        println!(
            "client RSS: before {} MiB, {n} sessions open {} MiB (+{:.1} KiB/session), after polling {} MiB",
            rss0 / 1024,
            rss1 / 1024,
            (rss1 - rss0) as f64 / n as f64,
            rss2 / 1024
        );
        println!("driver power_state polls/s: {driver_rate:.0}");
        println!("peer (bare GET, shared client) polls/s: {peer_rate:.0}");
        println!("ratio driver/peer: {:.2}", driver_rate / peer_rate);
    });
    drop(child.stdin.take());
    let _ = child.wait();
}
