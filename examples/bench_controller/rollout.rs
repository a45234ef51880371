//! The MachineSet mode of the controller benchmark: every Machine is
//! claimed by one set (`maxUnavailable` from `METALHERD_BENCH_ROLL`, no
//! health probe, so a batch's gate is each machine Ready on the new
//! revision), provisioned, and then the set's class gets a new image
//! version: a new revision, rolled in place batch by batch. Reports the
//! rollout's wall time against the ideal (batches x the simulated install
//! time), store writes per reimaged machine and the process's peak RSS.

use std::sync::Arc;
use std::time::{Duration, Instant};

use metalherd::api::{MachineClass, MachineSet};
use metalherd::controller::machine_set::start::start_machine_set_controller;
use metalherd::controller::runner::RunnerMetrics;
use metalherd::store::{ListOptions, Store, TypedStore};
use serde_json::json;
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
            break st.completed_batches.len();
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
    assert_eq!(reimaged, n, "each machine reimaged exactly once");
}
