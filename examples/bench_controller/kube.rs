//! `METALHERD_BENCH_STORE`: where the controllers' store lives.
//!
//! - `kubernetes`: the same run with the store in Kubernetes mode against
//!   a stand-in API server (a separate `metalherd serve`, its controller
//!   off, as the Kubernetes-mode tests use it). Every store call is then an
//!   HTTP call to that process: the report adds its requests by method and
//!   status code (from its `/metrics`), per Machine, and the peak memory of
//!   both processes.
//! - `kube-apiserver`: the store in Kubernetes mode against a real
//!   kube-apiserver and etcd (tests/common/control_plane.rs, the CRDs
//!   installed). The benchmark declares its class and Machines and follows
//!   them through the admin's kubeconfig; metalherd (the controller, the
//!   boot path, the directory and the boot recorder) uses its own token, so
//!   kube-apiserver's audit log tells its requests from the benchmark's.
//!   The report counts them from that log, per Machine, by verb (status
//!   writes apart) and resource, with their status codes and latencies,
//!   and adds the peak memory and CPU time of this process (where
//!   metalherd's controllers run), kube-apiserver and etcd.
//!
//! Anything else (or nothing) is the embedded store.

use std::collections::BTreeMap;
use std::io::{BufRead, Seek};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use metalherd::store::{Store, StoreConfig};
use serde_json::Value;

use crate::common::control_plane::{ControlPlane, METALHERD_USER, Options};
use crate::common::server::Server;

/// The API server a Kubernetes-mode run talks to.
pub enum Api {
    StandIn(Box<StandIn>),
    Real(Box<Real>),
}

/// For a Kubernetes-mode run (`None` for the embedded store): metalherd's
/// store, the benchmark's own (the same one on the stand-in), and the API
/// server.
pub async fn start() -> Option<(Arc<dyn Store>, Arc<dyn Store>, Api)> {
    // As `serve` does on a remote store: the controllers and boot services
    // read by name from the cache the watches keep.
    let cached = |s: Arc<dyn Store>| -> Arc<dyn Store> {
        Arc::new(metalherd::store::cache::CachingStore::new(
            s,
            tokio_util::sync::CancellationToken::new(),
        ))
    };
    match std::env::var("METALHERD_BENCH_STORE").ok().as_deref() {
        Some("kubernetes") => {
            let (store, api) = StandIn::start().await;
            Some((cached(store.clone()), store, Api::StandIn(Box::new(api))))
        }
        Some("kube-apiserver") => {
            let (store, bench, api) = Real::start().await;
            Some((cached(store), bench, Api::Real(Box::new(api))))
        }
        _ => None,
    }
}

impl Api {
    /// Print what the API server saw of the run, per Machine.
    pub fn report(&self, machines: usize) {
        match self {
            Api::StandIn(s) => s.report(machines),
            Api::Real(r) => r.report(machines),
        }
    }

    /// The run's successful writes (all kinds, metalherd's and the
    /// benchmark's), when the API server's resourceVersion does not count
    /// them (etcd's revision also counts kube-apiserver's own writes).
    pub fn writes(&self) -> Option<u64> {
        match self {
            Api::StandIn(_) => None,
            Api::Real(r) => Some(
                r.audit()
                    .iter()
                    .filter(|e| e.user != User::System && e.is_write() && e.code < 300)
                    .count() as u64,
            ),
        }
    }
}

pub struct StandIn {
    api: Server,
    /// The requests counted before the run.
    before: BTreeMap<String, u64>,
}

impl StandIn {
    /// Start the stand-in and open a Kubernetes-mode store on it.
    async fn start() -> (Arc<dyn Store>, StandIn) {
        let api = tokio::task::spawn_blocking(Server::start).await.unwrap();
        let kc = api.kubeconfig_file();
        let store = metalherd::store::open(&StoreConfig::Kubernetes {
            kubeconfig: Some(kc),
            namespace: None,
        })
        .await
        .unwrap();
        let mut s = StandIn {
            api,
            before: BTreeMap::new(),
        };
        s.before = s.requests();
        (store, s)
    }

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

    /// Print the requests made during the run, in all and per Machine.
    fn report(&self, machines: usize) {
        let after = self.requests();
        let mut total = 0;
        let mut parts = Vec::new();
        for (k, v) in &after {
            let d = v - self.before.get(k).copied().unwrap_or(0);
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
            proc_status(self.api.guard.pid(), "VmHWM:") / 1024
        );
    }
}

/// etcd and kube-apiserver, the CRDs installed.
pub struct Real {
    cp: ControlPlane,
    /// Where the run's part of the audit log starts (after the control
    /// plane's start, the CRDs and both stores' start-up checks).
    audit_from: u64,
}

/// Who made a request.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum User {
    Metalherd,
    /// The benchmark itself (the admin's token).
    Bench,
    /// kube-apiserver's own loopback client and other `system:` users.
    System,
}

/// One request from the audit log.
struct Request {
    user: User,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, ...
    verb: String,
    /// `machines`, `machineclasses`, `secrets`, `events`, ...
    /// (`-` for a non-resource URL); `/status` appended for the status
    /// subresource.
    resource: String,
    code: u16,
    /// From receipt to the response's completion (to its start for a
    /// watch), microseconds.
    micros: i64,
}

impl Request {
    fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

impl Real {
    async fn start() -> (Arc<dyn Store>, Arc<dyn Store>, Real) {
        let cp = tokio::task::spawn_blocking(|| {
            let cp = ControlPlane::start(Options::default());
            cp.install_crds();
            cp
        })
        .await
        .unwrap();
        let open = |kubeconfig: PathBuf| async move {
            metalherd::store::open(&StoreConfig::Kubernetes {
                kubeconfig: Some(kubeconfig),
                namespace: None,
            })
            .await
            .unwrap()
        };
        let store = open(cp.metalherd_kubeconfig()).await;
        let bench = open(cp.admin_kubeconfig()).await;
        let audit_from = std::fs::metadata(cp.dir.path().join("audit.log"))
            .map(|m| m.len())
            .unwrap_or(0);
        (store, bench, Real { cp, audit_from })
    }

    /// The audit log's files, oldest first: kube-apiserver rotates
    /// `audit.log` at 100 MB (its default), keeping the older parts beside
    /// it as `audit-TIMESTAMP.log`.
    fn audit_files(&self) -> Vec<PathBuf> {
        let mut rotated: Vec<PathBuf> = std::fs::read_dir(self.cp.dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("audit-") && n.ends_with(".log"))
            })
            .collect();
        rotated.sort();
        rotated.push(self.cp.dir.path().join("audit.log"));
        rotated
    }

    /// The run's requests, one per request: a watch is logged when its
    /// response starts and again when it ends, other requests when they
    /// complete (or panic).
    fn audit(&self) -> Vec<Request> {
        let mut out = Vec::new();
        for (i, path) in self.audit_files().iter().enumerate() {
            let mut f = std::fs::File::open(path).unwrap();
            // The run's part starts in the oldest file (`audit.log` when
            // the run began).
            if i == 0 {
                f.seek(std::io::SeekFrom::Start(self.audit_from)).unwrap();
            }
            Real::parse(std::io::BufReader::new(f), &mut out);
        }
        out
    }

    fn parse(log: impl BufRead, out: &mut Vec<Request>) {
        for line in log.lines() {
            let Ok(e) = serde_json::from_str::<Value>(&line.unwrap()) else {
                continue;
            };
            let s = |p: &str| e.pointer(p).and_then(Value::as_str).unwrap_or_default();
            let verb = s("/verb");
            let counted = match s("/stage") {
                "ResponseStarted" => verb == "watch",
                "ResponseComplete" => verb != "watch",
                "Panic" => true,
                _ => false,
            };
            if !counted {
                continue;
            }
            let name = s("/user/username");
            let user = if name == METALHERD_USER {
                User::Metalherd
            } else if name.starts_with("system:") {
                User::System
            } else {
                User::Bench
            };
            let mut resource = match s("/objectRef/resource") {
                "" => "-".to_string(),
                r => r.to_string(),
            };
            if let sub @ ("status" | "scale") = s("/objectRef/subresource") {
                resource = format!("{resource}/{sub}");
            }
            let at = |p: &str| s(p).parse::<jiff::Timestamp>().ok();
            let micros = match (at("/requestReceivedTimestamp"), at("/stageTimestamp")) {
                (Some(a), Some(b)) => b.as_microsecond() - a.as_microsecond(),
                _ => 0,
            };
            out.push(Request {
                user,
                verb: verb.to_string(),
                resource,
                code: e
                    .pointer("/responseStatus/code")
                    .and_then(Value::as_u64)
                    .and_then(|c| u16::try_from(c).ok())
                    .unwrap_or(0),
                micros,
            });
        }
    }

    /// kube-apiserver's and etcd's PIDs: the processes whose command line
    /// names the control plane's directory.
    fn pids(&self) -> BTreeMap<&'static str, u32> {
        let dir = self.cp.dir.path().display().to_string();
        let mut out = BTreeMap::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|p| p.parse().ok()) else {
                continue;
            };
            let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
                continue;
            };
            let cmd = String::from_utf8_lossy(&cmd);
            if !cmd.contains(&dir) {
                continue;
            }
            let argv0 = cmd.split('\0').next().unwrap_or_default();
            for name in ["kube-apiserver", "etcd"] {
                if Path::new(argv0).file_name().and_then(|n| n.to_str()) == Some(name) {
                    out.insert(name, pid);
                }
            }
        }
        out
    }

    fn report(&self, machines: usize) {
        // Memory and CPU first, before reading the audit log costs any.
        let mut usage = vec![("bench", std::process::id())];
        usage.extend(self.pids());
        let usage: Vec<String> = usage
            .iter()
            .map(|(name, pid)| {
                format!(
                    "{name}: peak_rss_mib={} cpu_s={:.1}",
                    proc_status(*pid, "VmHWM:") / 1024,
                    cpu_seconds(*pid)
                )
            })
            .collect();
        let audit = self.audit();
        let per = |n: usize| n as f64 / machines as f64;
        for (user, who) in [(User::Metalherd, "metalherd"), (User::Bench, "benchmark")] {
            let mine: Vec<&Request> = audit.iter().filter(|r| r.user == user).collect();
            let mut by_verb: BTreeMap<String, usize> = BTreeMap::new();
            let mut detail: BTreeMap<(String, String, u16), usize> = BTreeMap::new();
            for r in &mine {
                let verb = match r.resource.rsplit_once('/') {
                    Some((_, sub)) => format!("{}/{sub}", r.verb),
                    None => r.verb.clone(),
                };
                *by_verb.entry(verb).or_default() += 1;
                *detail
                    .entry((r.verb.clone(), r.resource.clone(), r.code))
                    .or_default() += 1;
            }
            let verbs: Vec<String> = by_verb
                .iter()
                .map(|(v, n)| format!("{v}={:.2}", per(*n)))
                .collect();
            let detail: Vec<String> = detail
                .iter()
                .map(|((v, res, code), n)| format!("{v} {res} {code}: {n} ({:.2})", per(*n)))
                .collect();
            println!(
                "BENCH kube-apiserver {who} requests={} ({:.1}/machine) per machine: {}",
                mine.len(),
                per(mine.len()),
                verbs.join(" ")
            );
            println!(
                "BENCH kube-apiserver {who} by verb, resource, code (total, per machine): {}",
                detail.join("; ")
            );
            let writes = |res: &str| {
                mine.iter()
                    .filter(|r| {
                        r.is_write() && r.code < 300 && r.resource.split('/').next() == Some(res)
                    })
                    .count()
            };
            let conflicts = mine.iter().filter(|r| r.code == 409).count();
            println!(
                "BENCH kube-apiserver {who} writes per machine: machines={:.2} events={:.2} \
                 other={:.2} conflicts(409)={:.2} not_found(404)={:.2}",
                per(writes("machines")),
                per(writes("events")),
                per(mine.iter().filter(|r| r.is_write() && r.code < 300).count()
                    - writes("machines")
                    - writes("events")),
                per(conflicts),
                per(mine.iter().filter(|r| r.code == 404).count()),
            );
            let mut lat: Vec<i64> = mine
                .iter()
                .filter(|r| r.verb != "watch")
                .map(|r| r.micros)
                .collect();
            lat.sort_unstable();
            if !lat.is_empty() {
                let q = |f: f64| lat[((lat.len() - 1) as f64 * f) as usize] as f64 / 1000.0;
                println!(
                    "BENCH kube-apiserver {who} latency ms (not watches, n={}): mean={:.2} p50={:.2} p90={:.2} p99={:.2} max={:.2}",
                    lat.len(),
                    lat.iter().sum::<i64>() as f64 / lat.len() as f64 / 1000.0,
                    q(0.5),
                    q(0.9),
                    q(0.99),
                    q(1.0)
                );
            }
        }
        println!("BENCH processes: {}", usage.join("; "));
    }
}

/// A `/proc/PID/status` field in kB (0 when unreadable).
fn proc_status(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// User and system CPU time of a process so far (at 100 ticks a second,
/// Linux's USER_HZ).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) in parentheses:
    // state is the 3rd field, utime the 14th, stime the 15th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    (f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)) as f64 / 100.0
}
