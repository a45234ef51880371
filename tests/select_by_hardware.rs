//! Story: select machines by hardware. The Machine controller labels each
//! Machine with facts from its BMC's inventory (`metalherd.dev/vendor`,
//! `model`, `cpus`, `memory-gib`, `disks`), so a MachineSet's selector
//! claims by hardware. On the simulated rack (tests/common/sim_rack.rs)
//! two servers report `Dell Inc.` with 512 GiB and two `Supermicro` with
//! 64 GiB. A set selecting `metalherd.dev/vendor=Dell` for 4 replicas
//! claims only the two Dells and says the pool is short although two other
//! servers stand Available; a second set selecting
//! `metalherd.dev/memory-gib=64` claims the other two. Each set's machines
//! are installed; no machine is in both.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::sim_rack::{SETS, story_with};
use serde_json::{Value, json};

fn hardware(i: u8) -> Option<(&'static str, u64)> {
    Some(if i <= 2 {
        ("Dell Inc.", 512)
    } else {
        ("Supermicro", 64)
    })
}

fn set(name: &str, replicas: i32, key: &str, value: &str) -> Value {
    json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {key: value}},
            "template": {"classRef": {"name": "flatcar-a"}},
            "updateStrategy": {"type": "InPlace", "maxUnavailable": 2,
                               "progressDeadlineSeconds": 120}
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn select_machines_by_hardware() {
    let s = story_with(
        "h",
        11,
        &[("flatcar-a", "4230.2.3", &["console=ttyS0"])],
        hardware,
    )
    .await;

    // Every Machine carries its hardware facts.
    for m in s.machines().await {
        let name = m["metadata"]["name"].as_str().unwrap();
        let l = &m["metadata"]["labels"];
        let dell = name == "h1" || name == "h2";
        assert_eq!(
            l["metalherd.dev/vendor"],
            if dell { "Dell" } else { "Supermicro" },
            "{name}: {l:#}"
        );
        assert_eq!(
            l["metalherd.dev/memory-gib"],
            if dell { "512" } else { "64" },
            "{name}: {l:#}"
        );
        assert_eq!(l["metalherd.dev/model"], "Sim-1", "{name}: {l:#}");
        assert_eq!(l["metalherd.dev/cpus"], "2", "{name}: {l:#}");
        assert_eq!(l["metalherd.dev/disks"], "1", "{name}: {l:#}");
        assert_eq!(l["role"], "worker", "the user's label stays: {l:#}");
    }

    let api = s.api.clone();
    let create = |v: Value| {
        let api = api.clone();
        tokio::task::spawn_blocking(move || {
            let (code, body) = api.req("POST", SETS, Some(&v));
            assert!(code < 300, "{code} {body}");
        })
    };
    let get = |name: &'static str| {
        let api = api.clone();
        tokio::task::spawn_blocking(move || api.req("GET", &format!("{SETS}/{name}"), None).1)
    };
    let pool = |set: &Value| -> Option<String> {
        set["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "PoolSufficient")
            .map(|c| format!("{} {}", c["status"], c["message"]))
    };

    // Dells only: two of four, while the two others stand Available.
    create(set("dells", 4, "metalherd.dev/vendor", "Dell"))
        .await
        .unwrap();
    let mut dells = Value::Null;
    for _ in 0..600 {
        dells = get("dells").await.unwrap();
        if dells["status"]["readyReplicas"] == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(dells["status"]["readyReplicas"], 2, "{dells:#}");
    assert_eq!(
        pool(&dells).as_deref(),
        Some("\"False\" \"wanted 4, claimable 2\""),
        "{dells:#}"
    );
    for m in s.machines().await {
        let name = m["metadata"]["name"].as_str().unwrap();
        if name == "h3" || name == "h4" {
            assert_eq!(m["status"]["phase"], "Available", "{name}");
            assert!(
                m["metadata"]["labels"]["metalherd.dev/machineset"].is_null(),
                "{name} claimed by a set that selects Dells: {m:#}"
            );
        }
    }

    // 64 GiB: the other two.
    create(set("small", 2, "metalherd.dev/memory-gib", "64"))
        .await
        .unwrap();
    let (ok, out, err) = s
        .cli(&[
            "rollout",
            "status",
            "machineset",
            "small",
            "--timeout",
            "3m",
        ])
        .await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("revision 1 on 2 machines"), "{out}");
    let claims: Vec<(String, String)> = s
        .machines()
        .await
        .iter()
        .map(|m| {
            (
                m["metadata"]["name"].as_str().unwrap().to_string(),
                m["metadata"]["labels"]["metalherd.dev/machineset"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("h1", "dells"),
        ("h2", "dells"),
        ("h3", "small"),
        ("h4", "small"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(claims, want);
    assert_eq!(s.rack.boots(), [1, 1, 1, 1], "each installed once");
    let dells = get("dells").await.unwrap();
    assert_eq!(dells["status"]["readyReplicas"], 2, "{dells:#}");
}
