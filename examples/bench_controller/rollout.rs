//! The MachineSet mode of the controller benchmark: every Machine is
//! claimed by one set (`maxUnavailable` from `METALHERD_BENCH_ROLL`, no
//! health probe, so a batch's gate is each machine Ready on the new
//! revision), provisioned, and then the set's class gets a new image
//! version: a new revision, rolled in place batch by batch. Reports the
//! rollout's wall time against the ideal (batches x the simulated install
//! time), store writes per reimaged machine and the process's peak RSS.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use metalherd::api::machine_set::REVISION_LABEL;
use metalherd::api::{Kind, MachineClass, MachineSet};
use metalherd::controller::machine_set::start::start_machine_set_controller;
use metalherd::controller::runner::RunnerMetrics;
use metalherd::store::{ListOptions, Store, TypedStore};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Start the MachineSet controller and declare the set over all `n`.
pub async fn declare_set(
    store: &Arc<dyn Store>,
    n: usize,
    max_unavailable: usize,
    tasks: &mut tokio::task::JoinSet<()>,
    cancel: CancellationToken,
) {
    start_machine_set_controller(
        store.clone(),
        false,
        RunnerMetrics::default(),
        tasks,
        cancel,
    );
    let set: MachineSet = serde_json::from_value(json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": "bench", "namespace": "default"},
        "spec": {
            "replicas": n,
            "selector": {"matchLabels": {"pool": "bench"}},
            "template": {"classRef": {"name": "workers"}},
            "updateStrategy": {"type": "InPlace", "maxUnavailable": max_unavailable,
                               "progressDeadlineSeconds": 3600}
        }
    }))
    .unwrap();
    store.create_obj(&set).await.unwrap();
}

async fn writes(store: &Arc<dyn Store>) -> u64 {
    store
        .list(metalherd::api::Kind::Machine, &ListOptions::default())
        .await
        .unwrap()
        .resource_version
        .parse()
        .unwrap()
}

/// Roll a new image version of the class through the set and report.
pub async fn roll(
    store: &Arc<dyn Store>,
    n: usize,
    max_unavailable: usize,
    reimage: Duration,
    walks: impl Fn() -> usize,
) {
    // Provisioned: wait until the set has settled on revision 1.
    loop {
        let s: MachineSet = store.get_obj("default", "bench").await.unwrap();
        let st = s.status.unwrap_or_default();
        if st.updated_replicas == n as i32 && st.current_batch.is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (w0, walks0) = (writes(store).await, walks());
    let t0 = Instant::now();
    let profile = Arc::new(Mutex::new(Profile::default()));
    for kind in [Kind::Machine, Kind::MachineSet, Kind::Event] {
        follow(store, kind, profile.clone(), t0).await;
    }
    let mut class: MachineClass = store.get_obj("default", "workers").await.unwrap();
    class.spec.image.version = format!("{}-next", class.spec.image.version);
    store.update_obj(&class).await.unwrap();
    let batches = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let s: MachineSet = store.get_obj("default", "bench").await.unwrap();
        let st = s.status.unwrap_or_default();
        let state = st.rollout_state.map(|r| r.as_str()).unwrap_or_default();
        assert!(
            state != "Failed" && state != "RolledBack",
            "rollout {state}: {:?}",
            st.last_failure
        );
        if st.update_revision == Some(2)
            && st.current_revision == Some(2)
            && st.updated_replicas == n as i32
            && st.current_batch.is_none()
        {
            break st.completed_batches.last().map_or(0, |b| b.number);
        }
    };
    let wall = t0.elapsed();
    let writes = writes(store).await - w0;
    let reimaged = walks() - walks0;
    let ideal = reimage * n.div_ceil(max_unavailable) as u32;
    println!(
        "BENCH rollout machines={n} max_unavailable={max_unavailable} batches={batches} \
         reimage_s={:.1} wall={:.1}s ideal={:.1}s overhead={} per_batch_overhead={:.2}s reimaged={reimaged} \
         store_writes={writes} writes_per_reimaged={:.1} peak_rss_mib={}",
        reimage.as_secs_f64(),
        wall.as_secs_f64(),
        ideal.as_secs_f64(),
        if ideal.is_zero() {
            "n/a".to_string()
        } else {
            format!(
                "{:.1}%",
                (wall.as_secs_f64() / ideal.as_secs_f64() - 1.0) * 100.0
            )
        },
        wall.saturating_sub(ideal).as_secs_f64() / batches.max(1) as f64,
        writes as f64 / reimaged.max(1) as f64,
        super::peak_rss_kib() / 1024,
    );
    profile.lock().unwrap().report();
    assert_eq!(reimaged, n, "each machine reimaged exactly once");
}

/// Where a rollout's time and writes go, from store watches opened before
/// the class change: writes and bytes by kind, and per reimaged machine
/// the mean time from its pin to each step (phase Reimaging, boot minted,
/// power-on marker, install done, Ready), plus each batch's span.
#[derive(Default)]
pub struct Profile {
    writes: BTreeMap<&'static str, (u64, u64)>,
    /// Per machine: when each step was first seen (seconds since t0).
    steps: HashMap<String, [Option<f64>; STEPS.len()]>,
    /// Batch number -> (start, end) seconds since t0.
    batches: BTreeMap<i64, (f64, Option<f64>)>,
    /// Batch number -> its machines.
    members: BTreeMap<i64, Vec<String>>,
}

const STEPS: [&str; 6] = [
    "pinned",
    "reimaging",
    "minted",
    "powered_on",
    "installed",
    "ready",
];

impl Profile {
    fn machine(&mut self, o: &Value, at: f64) {
        let name = o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let pinned = o["metadata"]["labels"][REVISION_LABEL].as_str() == Some("2");
        let st = &o["status"];
        let boot = &st["boot"];
        let reimage = boot["purpose"].as_str() == Some("reimage");
        let seen = [
            pinned,
            pinned && st["phase"].as_str() == Some("Reimaging"),
            pinned && reimage,
            pinned && reimage && st["progress"]["powerCycledFor"] == boot["id"],
            pinned && reimage && !boot["completedAt"].is_null(),
            pinned && reimage && st["phase"].as_str() == Some("Ready"),
        ];
        let e = self.steps.entry(name).or_default();
        for (i, s) in seen.iter().enumerate() {
            if *s && e[i].is_none() {
                e[i] = Some(at);
            }
        }
    }

    fn set(&mut self, o: &Value, at: f64) {
        if let Some(n) = o["status"]["currentBatch"]["number"].as_i64() {
            self.batches.entry(n).or_insert((at, None));
            self.members.entry(n).or_insert_with(|| {
                o["status"]["currentBatch"]["machines"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|m| m["name"].as_str().map(str::to_string))
                    .collect()
            });
        }
        for (n, b) in self.batches.iter_mut() {
            let open = o["status"]["currentBatch"]["number"].as_i64() == Some(*n);
            if !open && b.1.is_none() {
                b.1 = Some(at);
            }
        }
    }

    pub fn report(&self) {
        println!("BENCH rollout writes by kind (count, MiB): {:?}", {
            let m: BTreeMap<_, _> = self
                .writes
                .iter()
                .map(|(k, (c, b))| (*k, (*c, format!("{:.1}", *b as f64 / 1048576.0))))
                .collect();
            m
        });
        let mut line = String::from("BENCH rollout s from pin (mean p50/p90/max):");
        for (i, s) in STEPS.iter().enumerate().skip(1) {
            let mut v: Vec<f64> = self
                .steps
                .values()
                .filter_map(|e| Some(e[i]? - e[0]?))
                .collect();
            v.sort_by(f64::total_cmp);
            let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
            let q = |f: f64| {
                v.get(((v.len() as f64 - 1.0) * f) as usize)
                    .copied()
                    .unwrap_or(0.0)
            };
            line += &format!(" {s}={mean:.2} {:.2}/{:.2}/{:.2}", q(0.5), q(0.9), q(1.0));
        }
        println!("{line}");
        // Per batch: start to its first pin, the slowest member's steps
        // (s after batch start), and batch end after its last Ready.
        let mut line = String::from(
            "BENCH rollout per batch (to first pin; slowest member's steps; close after last Ready):",
        );
        for (n, (start, end)) in &self.batches {
            let ms: Vec<&[Option<f64>; STEPS.len()]> = self
                .members
                .get(n)
                .into_iter()
                .flatten()
                .filter_map(|m| self.steps.get(m))
                .collect();
            let first_pin = ms.iter().filter_map(|e| e[0]).fold(f64::MAX, f64::min);
            let slowest = ms.iter().max_by(|a, b| {
                a[5].unwrap_or(f64::MAX)
                    .total_cmp(&b[5].unwrap_or(f64::MAX))
            });
            let steps = slowest.map_or(String::new(), |e| {
                e.iter()
                    .map(|t| t.map_or("-".into(), |t| format!("{:.2}", t - start)))
                    .collect::<Vec<_>>()
                    .join(",")
            });
            let last_ready = slowest.and_then(|e| e[5]).unwrap_or(*start);
            line += &format!(
                " {n}:{:.2};{steps};{:.2}",
                first_pin - start,
                end.unwrap_or(*start) - last_ready
            );
        }
        println!("{line}");
        let mut prev_end = 0.0;
        let mut line = String::from("BENCH rollout batches (start+duration, gap before):");
        for (n, (s, e)) in &self.batches {
            let e = e.unwrap_or(*s);
            line += &format!(" {n}:{s:.1}+{:.1}/{:.1}", e - s, s - prev_end);
            prev_end = e;
        }
        println!("{line}");
    }
}

/// Follow `kind` from now on into `p`.
pub async fn follow(store: &Arc<dyn Store>, kind: Kind, p: Arc<Mutex<Profile>>, t0: Instant) {
    // From the version listed now: only later writes are seen.
    let rv = store
        .list(kind, &ListOptions::default())
        .await
        .unwrap()
        .resource_version;
    let mut w = store
        .watch(kind, &ListOptions::default(), Some(&rv))
        .await
        .unwrap();
    tokio::spawn(async move {
        while let Some(Ok(ev)) = w.next().await {
            let o = ev.object();
            let at = t0.elapsed().as_secs_f64();
            let mut p = p.lock().unwrap();
            let bytes = serde_json::to_vec(o).map(|v| v.len() as u64).unwrap_or(0);
            let e = p.writes.entry(kind.as_str()).or_default();
            e.0 += 1;
            e.1 += bytes;
            match kind {
                Kind::Machine => p.machine(o, at),
                Kind::MachineSet => p.set(o, at),
                _ => {}
            }
        }
    });
}
