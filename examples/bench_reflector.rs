//! kube-rs against metalherd (not a test): how long a `kube::runtime`
//! reflector of Machines takes from start to its initial list being in the
//! reflector's store (`InitDone`), and the wall time of each of `RUNS`
//! starts. Run through `scripts/bench-kubectl`, which starts `metalherd
//! serve` with N Machines and hands over the kubeconfig.
//!
//! Environment: KUBECONFIG (from `metalherd kubeconfig`), BENCH_N (the
//! Machines expected), RUNS (default 3).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{reflector, watcher};
use metalherd::api::Machine;

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let path = std::env::var("KUBECONFIG").expect("KUBECONFIG");
    let want: usize = std::env::var("BENCH_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    let kc = Kubeconfig::read_from(&path).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    let mut times = Vec::new();
    for _ in 0..runs {
        let client = kube::Client::try_from(config.clone()).expect("client");
        let api: Api<Machine> = Api::all(client);
        let (reader, writer) = reflector::store();
        let start = Instant::now();
        let mut stream = reflector(writer, watcher(api, watcher::Config::default())).boxed();
        let deadline = start + Duration::from_secs(120);
        loop {
            let ev = tokio::time::timeout_at(deadline.into(), stream.next())
                .await
                .expect("initial list within 120 s")
                .expect("watch stream ended")
                .expect("watch error");
            if matches!(ev, watcher::Event::InitDone) {
                break;
            }
        }
        let took = start.elapsed();
        assert_eq!(reader.state().len(), want, "Machines in the reflector");
        times.push(took.as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    println!("{:.2} {:.2}", times[0], times[times.len() / 2]);
}
