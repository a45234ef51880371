//! Story: bring servers that already run under management, on the
//! simulated rack (tests/common/sim_rack.rs: in-process Redfish BMCs and
//! servers that walk the boot path against a real `metalherd serve`).
//!
//! Three of four servers are declared with `spec.externallyProvisioned`
//! and a class: metalherd registers them (inventory, power state) and
//! records their class's revision as installed, and they are Ready without
//! a single BMC power action or network boot. A MachineSet over the pool
//! claims the two that run its template's class without reinstalling
//! them, installs the fourth (the only boot), and names, per machine, why
//! it cannot claim the third (another class). A class change then rolls
//! the adopted servers like any others: each is reimaged once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::sim_rack::story_declared;
use serde_json::{Value, json};

fn declare(i: usize, m: &mut Value) -> &'static str {
    let class = match i {
        0 | 1 => "flatcar-a",
        2 => "flatcar-b",
        _ => return "Available",
    };
    m["spec"]["externallyProvisioned"] = json!(true);
    m["spec"]["classRef"] = json!({"name": class});
    "Ready"
}

fn condition<'a>(obj: &'a Value, type_: &str) -> &'a Value {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopt_running_servers_on_the_simulated_rack() {
    let s = story_declared(
        "ad",
        63,
        &[
            ("flatcar-a", "4230.2.3", &["console=ttyS0"]),
            ("flatcar-b", "4230.2.3", &["console=ttyS1"]),
        ],
        |_| None,
        declare,
    )
    .await;
    // Adopted: Ready, the revision recorded, nothing done to the server.
    let machines = s.machines().await;
    for m in &machines[..3] {
        let name = m["metadata"]["name"].as_str().unwrap();
        assert_eq!(m["status"]["phase"], "Ready", "{name}: {m:#}");
        assert!(m["status"]["provisionedRevision"].is_string(), "{name}");
        let p = condition(m, "Provisioned");
        assert_eq!(p["reason"], "ExternallyProvisioned", "{name}: {p}");
        assert_eq!(condition(m, "UpToDate")["status"], "True", "{name}");
        assert!(m["status"]["inventory"].is_object(), "{name}: registered");
    }
    assert_eq!(s.rack.boots(), [0, 0, 0, 0]);
    for sim in &s.rack.machines[..3] {
        assert_eq!(sim.bmc.counters().resets, 0, "{}: a power action", sim.name);
    }

    // A set of three over the pool: the two that run its class are
    // claimed as they are, the fourth is installed.
    s.apply_set("flatcar-a", 3, 120).await;
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
    assert_eq!(s.rack.boots(), [0, 0, 0, 1], "adopted without a reinstall");
    for sim in &s.rack.machines[..3] {
        assert_eq!(sim.bmc.counters().resets, 0, "{}: a power action", sim.name);
    }
    let claimed: Vec<String> = s
        .machines()
        .await
        .iter()
        .filter(|m| m["metadata"]["labels"]["metalherd.dev/machineset"] == "workers")
        .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(claimed, ["ad1", "ad2", "ad4"]);

    // One more than the pool has: the set says why it cannot take ad3.
    let (ok, out, err) = s
        .cli(&["scale", "machineset", "workers", "--replicas", "4"])
        .await;
    assert!(ok, "{out}{err}");
    let mut message = Value::Null;
    for _ in 0..300 {
        message = condition(&s.set().await, "PoolSufficient")["message"].clone();
        if message
            .as_str()
            .is_some_and(|m| m.contains("not claimable"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        message,
        "wanted 4, claimable 3; not claimable: ad3: has spec.classRef flatcar-b, the template names flatcar-a"
    );
    let (ok, out, err) = s
        .cli(&["scale", "machineset", "workers", "--replicas", "3"])
        .await;
    assert!(ok, "{out}{err}");

    // The next class change rolls the adopted servers like the others.
    s.edit_class("flatcar-a", "4230.2.4").await;
    let (ok, out, err) = s.cli(&status).await;
    assert!(ok, "{out}{err}");
    assert_eq!(s.rack.boots(), [1, 1, 0, 2], "each reimaged once");
    assert_eq!(
        s.rack.machines[2].bmc.counters().resets,
        0,
        "ad3 is no set's"
    );
}
