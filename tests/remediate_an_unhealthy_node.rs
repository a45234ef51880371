//! Story: a MachineSet remediates its unhealthy machines, on the simulated
//! rack (tests/common/sim_rack.rs: in-process Redfish BMCs and servers that
//! walk the boot path against a real `metalherd serve`). A server whose
//! health probe fails is found by the set's probe; its BMC is asked for
//! the power cycle, and the server then boots its disk, or, asked for a
//! reimage, walks the network boot again. The same story on a lab VM with
//! a real kubelet (a suspended VM whose Node goes NotReady) is part of
//! tests/provision_reimage_and_retire_a_server.rs.
//!
//! - `remediate_an_unhealthy_node_on_the_simulated_rack`: a set of 4 with
//!   `spec.remediation` (power cycle once, then reimage once, `maxUnhealthy:
//!   1`):
//!   - a server that stops answering is power-cycled through its BMC (its
//!     history shows `PowerCycled`), boots its disk and recovers without a
//!     reinstall;
//!   - one whose installed OS is broken on disk stays unhealthy after the
//!     power cycle and is reimaged with its pinned revision (one more
//!     network boot), then recovers;
//!   - with two of four unhealthy, more than `maxUnhealthy: 1`, no BMC is
//!     asked for anything and `RemediationAllowed=False` names both; when
//!     one recovers on its own, the other is remediated.
//! - `remediation_and_a_rollout_in_flight`: a server under remediation is
//!   left out of the batch a class change starts, the batch's servers are
//!   never remediated while they reinstall, and the rollout completes on
//!   every server, the remediated one included, once it recovered.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::rack::tail;
use common::sim_rack::{Story, story};
use serde_json::{Value, json};

fn policy(max_unhealthy: i64) -> Value {
    json!({"remediation": {"unhealthySeconds": 2, "recoverySeconds": 8,
        "powerCycles": 1, "reimages": 1, "maxUnhealthy": max_unhealthy}})
}

/// Poll `f` every 200 ms until it gives a value, or panic with `what` and
/// the server's log after `limit`.
async fn until<T, F, Fut>(s: &Story, limit: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if start.elapsed() > limit {
            let set = s.set().await;
            panic!(
                "{what}: not within {limit:?}\nset status: {:#}\n{}",
                set["status"],
                tail(&s.api.log(), 40)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn machine(s: &Story, name: &str) -> Value {
    s.machines()
        .await
        .into_iter()
        .find(|m| m["metadata"]["name"] == name)
        .unwrap_or(Value::Null)
}

/// The steps of a machine's boot history.
async fn history(s: &Story, name: &str) -> Vec<String> {
    machine(s, name).await["status"]["bootHistory"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["step"].as_str().map(str::to_string))
        .collect()
}

async fn remediations(s: &Story) -> Vec<Value> {
    s.set().await["status"]["remediations"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn condition(s: &Story, type_: &str) -> Value {
    s.set().await["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or(Value::Null)
}

async fn rolled_out(s: &Story, timeout: &str) {
    let (ok, out, err) = s
        .cli(&[
            "rollout",
            "status",
            "machineset",
            "workers",
            "--timeout",
            timeout,
        ])
        .await;
    assert!(ok, "rollout: {out}{err}\n{}", tail(&s.api.log(), 40));
}

/// Wait until `name` is remediated and recovered (its record gone).
async fn recovered(s: &Story, name: &str) {
    until(
        s,
        Duration::from_secs(60),
        &format!("{name} recovers"),
        || async {
            let r = remediations(s).await;
            (!r.iter().any(|x| x["machine"] == name)).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remediate_an_unhealthy_node_on_the_simulated_rack() {
    let s = story("rm", 21, &[("lab", "1.0", &["console=ttyS0"])]).await;
    s.apply_set_with("lab", 4, 120, policy(1)).await;
    rolled_out(&s, "60s").await;
    s.all_on(1).await;
    assert_eq!(s.rack.boots(), [1, 1, 1, 1]);
    let rack = &s.rack.machines;

    // 1. rm1 stops answering: power-cycled, boots its disk, recovers.
    let ons = rack[0].bmc.counters().power_ons;
    rack[0].health.store(500, Ordering::SeqCst);
    until(&s, Duration::from_secs(30), "rm1 power-cycled", || async {
        (rack[0].bmc.counters().power_ons > ons).then_some(())
    })
    .await;
    recovered(&s, "rm1").await;
    let h = history(&s, "rm1").await;
    assert_eq!(rack[0].disk_boots.load(Ordering::SeqCst), 1);
    assert_eq!(
        s.rack.boots()[0],
        1,
        "no reinstall: {h:?}\n{:#}\n{}",
        s.set().await["status"],
        tail(&s.api.log(), 60)
    );
    assert!(h.contains(&"PowerCycled".to_string()), "{h:?}");
    assert!(!h.contains(&"ReimageRequested".to_string()), "{h:?}");
    let m = machine(&s, "rm1").await;
    let asked = m["metadata"]["annotations"]["metalherd.dev/power-cycle"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        asked.starts_with("MachineSet workers: PowerCycle 1 of 1 at ") && asked.contains("500"),
        "{asked}"
    );

    // 2. rm2's OS is broken on disk: the power cycle does not help, the
    // reimage (its pinned revision, 1) does.
    rack[1].disk_fault.store(true, Ordering::SeqCst);
    rack[1].health.store(500, Ordering::SeqCst);
    until(&s, Duration::from_secs(60), "rm2 reimaged", || async {
        (s.rack.boots()[1] == 2).then_some(())
    })
    .await;
    recovered(&s, "rm2").await;
    assert_eq!(rack[1].disk_boots.load(Ordering::SeqCst), 1, "cycled first");
    let h = history(&s, "rm2").await;
    let cycled = h.iter().position(|x| x == "PowerCycled");
    let reimaged = h.iter().position(|x| x == "ReimageRequested");
    assert!(
        cycled.is_some() && reimaged.is_some() && cycled < reimaged,
        "{h:?}"
    );
    s.all_on(1).await;

    // 3. Two of four unhealthy, maxUnhealthy 1: nobody is touched.
    let before: Vec<u32> = rack.iter().map(|m| m.bmc.counters().resets).collect();
    rack[2].health.store(500, Ordering::SeqCst);
    rack[3].health.store(500, Ordering::SeqCst);
    let c = until(&s, Duration::from_secs(30), "breaker opens", || async {
        let c = condition(&s, "RemediationAllowed").await;
        (c["status"] == "False").then_some(c)
    })
    .await;
    assert_eq!(c["reason"], "TooManyUnhealthy");
    let msg = c["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("2 of 4 machines unhealthy (rm3, rm4), more than maxUnhealthy 1"),
        "{msg}"
    );
    // Longer than unhealthySeconds and recoverySeconds together.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let after: Vec<u32> = rack.iter().map(|m| m.bmc.counters().resets).collect();
    assert_eq!(before, after, "no BMC was asked for anything");
    assert!(
        s.metric("metalherd_machineset_remediations_total{outcome=\"held\"}")
            .await
            >= 1.0
    );

    // rm3 recovers on its own: rm4 is remediated.
    rack[2].health.store(200, Ordering::SeqCst);
    until(&s, Duration::from_secs(30), "rm4 power-cycled", || async {
        (rack[3].bmc.counters().resets > before[3]).then_some(())
    })
    .await;
    recovered(&s, "rm4").await;
    assert_eq!(rack[2].bmc.counters().resets, before[2], "rm3 untouched");
    let c = condition(&s, "RemediationAllowed").await;
    assert_eq!(c["status"], "True", "{c}");
    let count = |o: &'static str| {
        let s = &s;
        async move {
            s.metric(&format!(
                "metalherd_machineset_remediations_total{{outcome=\"{o}\"}}"
            ))
            .await
        }
    };
    assert_eq!(count("power_cycled").await, 3.0);
    assert_eq!(count("reimaged").await, 1.0);
    assert_eq!(count("recovered").await, 3.0);

    // Deleting the set leaves its machines as they are: unclaimed, still
    // Ready on what they run, not reimaged for their revision's new name.
    let boots = s.rack.boots();
    let (ok, out, err) = s.cli(&["delete", "machineset", "workers"]).await;
    assert!(ok, "{out}{err}");
    until(&s, Duration::from_secs(30), "machines released", || async {
        let ms = s.machines().await;
        ms.iter()
            .all(|m| m["metadata"]["labels"]["metalherd.dev/machineset"].is_null())
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    for m in s.machines().await {
        assert_eq!(m["status"]["phase"], "Ready", "{:#}", m["status"]);
        let up = m["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "UpToDate")
            .cloned()
            .unwrap_or_default();
        assert_eq!(up["status"], "True", "{up}");
    }
    assert_eq!(s.rack.boots(), boots, "no reimage");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remediation_and_a_rollout_in_flight() {
    let s = story(
        "rr",
        22,
        &[
            ("lab-a", "1.0", &["console=ttyS0"]),
            ("lab-b", "2.0", &["console=ttyS0"]),
        ],
    )
    .await;
    s.apply_set_with("lab-a", 4, 120, policy(2)).await;
    rolled_out(&s, "60s").await;
    let rack = &s.rack.machines;

    // rr1 is broken on disk: power-cycled, and still unhealthy.
    rack[0].disk_fault.store(true, Ordering::SeqCst);
    rack[0].health.store(500, Ordering::SeqCst);
    until(&s, Duration::from_secs(30), "rr1 power-cycled", || async {
        (rack[0].disk_boots.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    // The class changes while the power cycle has its recovery time: the
    // first batch leaves rr1 out, and its servers are held reinstalling.
    rack[1].hold_install.store(true, Ordering::SeqCst);
    rack[2].hold_install.store(true, Ordering::SeqCst);
    s.apply_set_with("lab-b", 4, 120, policy(2)).await;
    let batch = until(&s, Duration::from_secs(30), "batch 1", || async {
        let b = s.set().await["status"]["currentBatch"].clone();
        (b["revision"] == 2).then_some(b)
    })
    .await;
    let members: Vec<&str> = batch["machines"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert_eq!(members, ["rr2", "rr3"], "{batch}");
    // rr1 is reimaged by its remediation meanwhile (revision 1, pinned).
    until(&s, Duration::from_secs(60), "rr1 reimaged", || async {
        (s.rack.boots()[0] == 2).then_some(())
    })
    .await;
    let rr1 = machine(&s, "rr1").await;
    assert_eq!(
        rr1["metadata"]["labels"]["metalherd.dev/machineset-revision"],
        "1"
    );
    // Held mid-install, rr2 and rr3 answer 503 and are no remediation's.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for m in ["rr2", "rr3"] {
        let h = history(&s, m).await;
        assert!(!h.contains(&"PowerCycled".to_string()), "{m}: {h:?}");
        assert!(!h.contains(&"ReimageRequested".to_string()), "{m}: {h:?}");
    }
    rack[1].hold_install.store(false, Ordering::SeqCst);
    rack[2].hold_install.store(false, Ordering::SeqCst);
    recovered(&s, "rr1").await;
    rolled_out(&s, "2m").await;
    s.all_on(2).await;
    // rr1: installed, reimaged by remediation, then rolled to revision 2.
    assert_eq!(s.rack.boots(), [3, 2, 2, 2]);
}
