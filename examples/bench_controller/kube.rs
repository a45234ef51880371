//! `METALHERD_BENCH_STORE=kubernetes`: the same run with the controllers'
//! store in Kubernetes mode, against a stand-in API server (a separate
//! `metalherd serve`, its controller off, as the Kubernetes-mode tests use
//! it). Every store call is then an HTTP call to that process: the report
//! adds its requests by method and status code (from its `/metrics`), per
//! Machine, and the peak memory of both processes.

use std::collections::BTreeMap;
use std::sync::Arc;

use metalherd::store::{Store, StoreConfig};

use crate::common::server::Server;

/// Whether this run uses the Kubernetes backend.
pub fn wanted() -> bool {
    std::env::var("METALHERD_BENCH_STORE").ok().as_deref() == Some("kubernetes")
}

pub struct StandIn {
    api: Server,
}

/// Start the stand-in and open a Kubernetes-mode store on it.
pub async fn start() -> (Arc<dyn Store>, StandIn) {
    let api = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let kc = api.kubeconfig_file();
    let store = metalherd::store::open(&StoreConfig::Kubernetes {
        kubeconfig: Some(kc),
        namespace: None,
    })
    .await
    .unwrap();
    (store, StandIn { api })
}

impl StandIn {
    /// `metalherd_api_requests_total` by (method, code).
    pub fn requests(&self) -> BTreeMap<String, u64> {
        let out = self
            .api
            .curl()
            .args([
                "-sf",
                "-H",
                &format!("Authorization: Bearer {}", self.api.token),
            ])
            .arg(format!("{}/metrics", self.api.url))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let mut by = BTreeMap::new();
        for l in text
            .lines()
            .filter(|l| l.starts_with("metalherd_api_requests_total{"))
        {
            let (labels, v) = l.rsplit_once(' ').unwrap_or((l, "0"));
            let key = labels
                .trim_start_matches("metalherd_api_requests_total{")
                .trim_end_matches('}')
                .replace('"', "");
            by.insert(key, v.parse().unwrap_or(0));
        }
        by
    }

    /// The stand-in process's peak RSS (MiB).
    pub fn peak_rss_mib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.api.guard.pid()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            / 1024
    }

    /// Print the requests made since `before`, in all and per Machine.
    pub fn report(&self, before: &BTreeMap<String, u64>, machines: usize) {
        let after = self.requests();
        let mut total = 0;
        let mut parts = Vec::new();
        for (k, v) in &after {
            let d = v - before.get(k).copied().unwrap_or(0);
            if d > 0 {
                total += d;
                parts.push(format!(
                    "{k}: {d} ({:.1}/machine)",
                    d as f64 / machines as f64
                ));
            }
        }
        println!(
            "BENCH stand-in API requests={total} ({:.1}/machine) [{}] stand_in_peak_rss_mib={}",
            total as f64 / machines as f64,
            parts.join("; "),
            self.peak_rss_mib()
        );
    }
}
