//! Stories: roll a MachineSet, and roll back a bad revision, on the
//! simulated rack (tests/common/sim_rack.rs: in-process Redfish BMCs and
//! servers that walk the boot path against a real `metalherd serve`; no
//! VMs). Everything a user does goes through the CLI: `apply`, `scale`,
//! `rollout status|history|undo`.
//!
//! The same two stories on real VMs are tests/roll_a_machineset_on_vms.rs.
//!
//! - `roll_a_machineset_on_the_simulated_rack`: a set of 4 (maxUnavailable 2) is scaled up from
//!   2, then its template's class changes. `rollout status` follows the
//!   rollout to completion in two batches of two; a watch of the Machines
//!   and the set never sees more than 2 out of service (not Ready, or in
//!   the batch in flight and not through its gate); each server is
//!   reimaged exactly once. `rollout history` shows both revisions, and
//!   `rollout undo` returns every server to revision 1, batch by batch.
//! - `rollback_a_bad_revision_on_the_simulated_rack`: the new revision's OS answers its health
//!   probe with 500. The first batch never passes its gate within the
//!   progress deadline: `rollout status` exits non-zero naming the probe's
//!   answer, the batch is reimaged back to revision 1 (`RolledBack`), the
//!   revision is marked bad, and the other two servers were never touched.
//! - `rollout_status_follows_a_class_edit`: the class the template names
//!   is edited in place (the set's generation does not move) and
//!   `rollout status` starts at once: it follows the new revision to its
//!   end, and exits 0 only when every server runs it.
//! - `a_rollout_resumes_after_sigkill`: `metalherd serve` is killed with
//!   SIGKILL while batch 1 reimages and again as batch 2 is recorded; each
//!   time it starts again on the same data directory, the rollout resumes
//!   from its recorded batch and completes, and no server is reimaged more
//!   than once.
//! - `scale_a_machineset`: `metalherd scale` up claims from the pool and
//!   says when the pool is short; down releases the newest machines, which
//!   are powered off and return to the pool unclaimed, never deleted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::out_of_service::{OutOfService, passed_batches};
use common::rack::*;
use common::server::Server;
use common::sim_rack::story;
use futures::StreamExt;
use serde_json::{Value, json};

async fn watch_out_of_service(api: &Server, seen: Arc<Mutex<OutOfService>>) {
    // The API speaks TLS with the data directory's CA.
    let ca = std::fs::read(api.data_dir.join("ca.crt")).unwrap();
    let c = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .build()
        .unwrap();
    let stream = |plural: &str| {
        let url = format!(
            "{}/apis/metalherd.dev/v1alpha1/namespaces/default/{plural}?watch=true",
            api.url
        );
        c.get(url).bearer_auth(&api.token).send()
    };
    let machines = stream("machines").await.unwrap().bytes_stream();
    let sets = stream("machinesets").await.unwrap().bytes_stream();
    tokio::spawn(async move {
        let mut both = futures::stream::select(machines, sets);
        let mut buf = Vec::new();
        while let Some(Ok(chunk)) = both.next().await {
            // Each chunk is whole lines (one event per write).
            buf.extend_from_slice(&chunk);
            seen.lock().unwrap().observe_lines(&mut buf);
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn roll_a_machineset_on_the_simulated_rack() {
    let s = story(
        "w",
        1,
        &[
            ("flatcar-a", "4230.2.3", &["console=ttyS0"]),
            ("flatcar-b", "4230.2.4", &["console=ttyS0"]),
        ],
    )
    .await;
    // Two first, then scaled to four through /scale.
    s.apply_set("flatcar-a", 2, 120).await;
    let (ok, out, err) = s
        .cli(&["scale", "machineset", "workers", "--replicas", "4"])
        .await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("scaled from 2 to 4 replicas"), "{out}");
    let (ok, out, err) = s
        .cli(&[
            "rollout",
            "status",
            "machineset",
            "workers",
            "--timeout",
            "60s",
        ])
        .await;
    if !ok {
        let m = s.machines().await;
        panic!(
            "first rollout: {out}{err}\nmachine: {:#}\n{}",
            m[0]["status"],
            tail(&s.api.log(), 40)
        );
    }
    assert!(
        out.contains("successfully rolled out: revision 1 on 4 machines"),
        "{out}"
    );
    s.all_on(1).await;
    assert_eq!(s.rack.boots(), [1, 1, 1, 1]);

    // The template's class changes: revision 2, in batches of 2.
    let seen = Arc::new(Mutex::new(OutOfService::default()));
    watch_out_of_service(&s.api, seen.clone()).await;
    s.apply_set("flatcar-b", 4, 120).await;
    let (ok, out, err) = s
        .cli(&[
            "rollout",
            "status",
            "machineset",
            "workers",
            "--timeout",
            "3m",
        ])
        .await;
    assert!(ok, "rollout: {out}{err}\n{}", tail(&s.api.log(), 40));
    assert!(
        out.contains("successfully rolled out: revision 2 on 4 machines"),
        "{out}"
    );
    let batches = passed_batches(&out, 2);
    assert_eq!(batches.len(), 2, "two batches: {out}");
    let all: BTreeSet<&String> = batches.values().flatten().collect();
    assert_eq!(all.len(), 4, "each machine in one batch: {batches:?}");
    assert!(batches.values().all(|b| b.len() == 2), "{batches:?}");
    assert!(out.contains("batch 2 of revision 2 started"), "{out}");
    assert!(
        out.contains("Reimaging (revision 2)"),
        "machine phases: {out}"
    );
    s.all_on(2).await;
    assert_eq!(s.rack.boots(), [2, 2, 2, 2], "each reimaged exactly once");
    {
        let o = seen.lock().unwrap();
        assert!(
            o.peak <= 2,
            "{} out of service at once: {:?}",
            o.peak,
            o.peak_at
        );
        assert_eq!(o.peak, 2, "the batches ran two at a time");
    }

    // History: both revisions, 2 current with every machine.
    let (ok, out, err) = s
        .cli(&["rollout", "history", "machineset", "workers"])
        .await;
    assert!(ok, "{out}{err}");
    let row = |n: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(n))
            .unwrap_or_else(|| panic!("no revision {n}: {out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("1")[1..5],
        ["flatcar-a", "flatcar", "4230.2.3", "0"],
        "{out}"
    );
    assert_eq!(
        row("2")[1..5],
        ["flatcar-b", "flatcar", "4230.2.4", "4"],
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("2 ") && l.ends_with("current")),
        "{out}"
    );

    // Undo: back to revision 1, again two at a time.
    let (ok, out, err) = s.cli(&["rollout", "undo", "machineset", "workers"]).await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("rolled back to revision 1"), "{out}");
    let (ok, out, err) = s
        .cli(&[
            "rollout",
            "status",
            "machineset",
            "workers",
            "--timeout",
            "3m",
        ])
        .await;
    assert!(ok, "undo rollout: {out}{err}\n{}", tail(&s.api.log(), 40));
    assert!(
        out.contains("successfully rolled out: revision 1 on 4 machines"),
        "{out}"
    );
    assert_eq!(passed_batches(&out, 1).len(), 2, "{out}");
    s.all_on(1).await;
    assert_eq!(s.rack.boots(), [3, 3, 3, 3]);
    assert!(seen.lock().unwrap().peak <= 2);
    let (ok, out, _) = s
        .cli(&["rollout", "history", "machineset", "workers"])
        .await;
    assert!(ok);
    assert!(
        out.lines()
            .any(|l| l.starts_with("1 ") && l.ends_with("current")),
        "{out}"
    );
    // Metrics: three or four rollouts complete (the first may also have
    // completed at 2 replicas before the scale), four update batches passed.
    let complete = "metalherd_machineset_rollouts_total{outcome=\"complete\"}";
    let complete = s.metric(complete).await;
    assert!((3.0..=4.0).contains(&complete), "{complete}");
    let passed = "metalherd_machineset_batch_seconds_count{kind=\"update\",outcome=\"passed\"}";
    assert_eq!(s.metric(passed).await, 4.0);
    let out = "metalherd_machineset_machines_out_of_service{machineset=\"default/workers\"}";
    assert_eq!(s.metric(out).await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rollback_a_bad_revision_on_the_simulated_rack() {
    let s = story(
        "b",
        2,
        &[
            ("flatcar-a", "4230.2.3", &["console=ttyS0"]),
            ("flatcar-bad", "4230.2.5", &["console=ttyS0", "health=500"]),
        ],
    )
    .await;
    s.apply_set("flatcar-a", 4, 15).await;
    let (ok, out, err) = s
        .cli(&[
            "rollout",
            "status",
            "machineset",
            "workers",
            "--timeout",
            "3m",
        ])
        .await;
    assert!(ok, "first rollout: {out}{err}\n{}", tail(&s.api.log(), 40));
    assert_eq!(s.rack.boots(), [1, 1, 1, 1]);

    s.apply_set("flatcar-bad", 4, 15).await;
    let (ok, out, err) = s
        .cli(&[
            "rollout",
            "status",
            "machineset",
            "workers",
            "--timeout",
            "3m",
        ])
        .await;
    assert!(!ok, "a failed rollout exits non-zero: {out}{err}");
    assert!(err.contains("failed"), "{err}");
    assert!(err.contains("answered 500, want 200"), "{err}");
    assert!(
        out.contains("batch 1 of revision 2 started: b1, b2"),
        "{out}"
    );

    // The failed batch is reimaged back to revision 1.
    let mut state = Value::Null;
    for _ in 0..240 {
        state = s.set().await;
        if state["status"]["rolloutState"] == "RolledBack" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        state["status"]["rolloutState"],
        "RolledBack",
        "{state:#}\n{}",
        tail(&s.api.log(), 40)
    );
    s.all_on(1).await;
    // b1, b2: install, bad revision, back; b3, b4 never touched.
    assert_eq!(s.rack.boots(), [3, 3, 1, 1]);
    let f = &state["status"]["lastFailure"];
    assert_eq!(f["reason"], "ProgressDeadlineExceeded", "{f}");
    assert_eq!(f["machines"], json!(["b1", "b2"]));
    let bad = state["status"]["revisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["revision"] == 2)
        .unwrap();
    assert_eq!(bad["bad"], true);
    let warned = events(&s.api, "workers")
        .into_iter()
        .any(|(reason, _, msg)| reason == "ProgressDeadlineExceeded" && msg.contains("b1"));
    assert!(warned, "{:?}", events(&s.api, "workers"));

    let (ok, out, _) = s
        .cli(&["rollout", "history", "machineset", "workers"])
        .await;
    assert!(ok);
    assert!(
        out.lines()
            .any(|l| l.starts_with("2 ") && l.contains("bad")),
        "{out}"
    );
    let (ok, out, _) = s.cli(&["describe", "machineset", "workers"]).await;
    assert!(
        ok && out.contains("Last Failure:  ProgressDeadlineExceeded at "),
        "{out}"
    );
    assert!(
        out.contains("(flatcar 4230.2.5)") && out.contains("bad (its rollout failed)"),
        "{out}"
    );
    for (sample, want) in [
        (
            "metalherd_machineset_rollouts_total{outcome=\"failed\"}",
            1.0,
        ),
        (
            "metalherd_machineset_rollouts_total{outcome=\"rolled_back\"}",
            1.0,
        ),
        (
            "metalherd_machineset_batch_seconds_count{kind=\"update\",outcome=\"failed\"}",
            1.0,
        ),
        (
            "metalherd_machineset_batch_seconds_count{kind=\"rollback\",outcome=\"passed\"}",
            1.0,
        ),
    ] {
        assert_eq!(s.metric(sample).await, want, "{sample}");
    }
    // Asked again, the rollout still reports its failure.
    let (ok, _, err) = s
        .cli(&[
            "rollout",
            "status",
            "machineset",
            "workers",
            "--timeout",
            "30s",
        ])
        .await;
    assert!(!ok);
    assert!(err.contains("rolled back to revision 1"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rollout_status_follows_a_class_edit() {
    let s = story("c", 5, &[("flatcar-a", "4230.2.3", &["console=ttyS0"])]).await;
    s.apply_set("flatcar-a", 4, 120).await;
    let status = [
        "rollout",
        "status",
        "machineset",
        "workers",
        "--timeout",
        "3m",
    ];
    let (ok, out, err) = s.cli(&status).await;
    assert!(ok, "first rollout: {out}{err}");
    assert_eq!(s.rack.boots(), [1, 1, 1, 1]);

    // A new version in the class itself, and `rollout status` at once.
    s.edit_class("flatcar-a", "4230.2.4").await;
    let (ok, out, err) = s.cli(&status).await;
    assert!(ok, "rollout: {out}{err}\n{}", tail(&s.api.log(), 40));
    assert!(
        out.contains("successfully rolled out: revision 2 on 4 machines"),
        "{out}"
    );
    // It returned only once every server runs revision 2.
    s.all_on(2).await;
    assert_eq!(s.rack.boots(), [2, 2, 2, 2], "{out}");
    assert_eq!(passed_batches(&out, 2).len(), 2, "{out}");
}

/// Wait until the set's batch in flight is `number` of revision `rev`.
async fn wait_batch(s: &common::sim_rack::Story, rev: i64, number: i64) -> Vec<String> {
    for _ in 0..300 {
        let b = &s.set().await["status"]["currentBatch"];
        if b["revision"] == rev && b["number"] == number {
            return b["machines"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["name"].as_str().unwrap().to_string())
                .collect();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "batch {number} of revision {rev} never started: {:#}",
        s.set().await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollout_resumes_after_sigkill() {
    let mut s = story(
        "k",
        3,
        &[
            ("flatcar-a", "4230.2.3", &["console=ttyS0"]),
            ("flatcar-b", "4230.2.4", &["console=ttyS0"]),
        ],
    )
    .await;
    s.apply_set("flatcar-a", 4, 120).await;
    let status = [
        "rollout",
        "status",
        "machineset",
        "workers",
        "--timeout",
        "3m",
    ];
    let (ok, out, err) = s.cli(&status).await;
    assert!(ok, "first rollout: {out}{err}");
    assert_eq!(s.rack.boots(), [1, 1, 1, 1]);

    s.apply_set("flatcar-b", 4, 120).await;
    // Killed while batch 1 reimages.
    let first = wait_batch(&s, 2, 1).await;
    for _ in 0..300 {
        let reimaging = s
            .machines()
            .await
            .iter()
            .filter(|m| m["status"]["phase"] == "Reimaging")
            .count();
        if reimaging > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let api = Arc::get_mut(&mut s.api).expect("no other handle on the server");
    tokio::task::block_in_place(|| api.kill_and_restart());
    // Killed again as soon as batch 2 is recorded.
    let second = wait_batch(&s, 2, 2).await;
    let api = Arc::get_mut(&mut s.api).expect("no other handle on the server");
    tokio::task::block_in_place(|| api.kill_and_restart());

    let (ok, out, err) = s.cli(&status).await;
    assert!(
        ok,
        "rollout after restarts: {out}{err}\n{}",
        tail(&s.api.log(), 60)
    );
    assert!(
        out.contains("successfully rolled out: revision 2 on 4 machines"),
        "{out}"
    );
    let batches = passed_batches(&out, 2);
    assert_eq!(batches.get(&1), Some(&first), "{out}");
    assert_eq!(batches.get(&2), Some(&second), "{out}");
    s.all_on(2).await;
    assert_eq!(s.rack.boots(), [2, 2, 2, 2], "a server was reimaged twice");
    assert_eq!(s.api.starts, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scale_a_machineset() {
    let s = story("s", 4, &[("flatcar-a", "4230.2.3", &["console=ttyS0"])]).await;
    s.apply_set("flatcar-a", 2, 120).await;
    let status = [
        "rollout",
        "status",
        "machineset",
        "workers",
        "--timeout",
        "3m",
    ];
    let (ok, out, err) = s.cli(&status).await;
    assert!(ok, "{out}{err}");
    assert_eq!(
        s.rack.boots(),
        [1, 1, 0, 0],
        "claimed by name from the pool"
    );

    // Up past the pool: what there is gets claimed, and the set says so.
    let (ok, out, err) = s
        .cli(&["scale", "machineset", "workers", "--replicas", "5"])
        .await;
    assert!(ok, "{out}{err}");
    let mut set = Value::Null;
    for _ in 0..300 {
        set = s.set().await;
        if set["status"]["readyReplicas"] == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(set["status"]["readyReplicas"], 4, "{set:#}");
    let pool = set["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "PoolSufficient")
        .unwrap();
    assert_eq!(pool["status"], "False");
    assert_eq!(pool["message"], "wanted 5, claimable 4");
    let (ok, table, _) = s.cli(&["get", "machinesets"]).await;
    assert!(ok);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    // NAME DESIRED READY UPDATED AVAILABLE STATE AGE
    assert_eq!(row[..5], ["workers", "5", "4", "4", "4"], "{table}");

    // Down to 1: the three newest (by name, created in the same second)
    // are released: deprovisioned, powered off, Available, unclaimed.
    let (ok, out, err) = s
        .cli(&["scale", "machineset", "workers", "--replicas", "1"])
        .await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("scaled from 5 to 1 replicas"), "{out}");
    let mut released = Vec::new();
    for _ in 0..300 {
        released = s
            .machines()
            .await
            .into_iter()
            .filter(|m| {
                m["status"]["phase"] == "Available"
                    && m["metadata"]["labels"]["metalherd.dev/machineset"].is_null()
            })
            .collect();
        if released.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let names: Vec<&str> = released
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["s2", "s3", "s4"], "{released:#?}");
    for m in &released {
        assert!(m["spec"]["classRef"].is_null(), "{m:#}");
        assert_eq!(m["status"]["powerState"], "Off", "{m:#}");
        assert!(m["metadata"]["labels"]["pool"].is_null(), "{m:#}");
    }
    for sim in &s.rack.machines[1..] {
        assert_eq!(sim.bmc.power(), "Off", "{} still on", sim.name);
    }
    let (ok, out, err) = s.cli(&status).await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("revision 1 on 1 machines"), "{out}");
    assert_eq!(s.machines().await.len(), 4, "a machine was deleted");
}
