//! Story: a flaky BMC network. Five servers behind sushy-tools' Redfish
//! emulator are reached through a fault-injecting proxy that fails about
//! 30% of all BMC requests (dropped connections, 500/503 answers, answers
//! slower than the request timeout). Every Machine still converges to
//! Available (powered as `spec.online` asks), and the retries show: BMC
//! warnings are recorded as events, counted, with the failure's reason.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::bmc_proxy::{BmcProxy, Chaos, Fault};
use common::rack::*;
use common::server::Server;
use common::sushy::{FakeSystem, Sushy, SushyOptions};

const MACHINES: u8 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flaky_bmc() {
    let sushy = Sushy::start(SushyOptions {
        systems: (1..=MACHINES).map(FakeSystem::new).collect(),
        ..SushyOptions::default()
    });
    let proxy = BmcProxy::start(sushy.base()).await;
    proxy.set_chaos(Some(Chaos::new(
        30,
        vec![
            Fault::Drop,
            Fault::Status {
                code: 503,
                retry_after: Some(1),
            },
            // Longer than the 3 s request timeout in the test config.
            Fault::Delay(Duration::from_secs(5)),
            Fault::Status {
                code: 500,
                retry_after: None,
            },
        ],
        0x5eed_f1a4,
    )));
    let (user, pw) = sushy.opts.auth.clone().unwrap();
    let systems = sushy.opts.systems.clone();
    let port = proxy.port;
    let outcome = tokio::task::spawn_blocking(move || {
        let api = Server::start_with_config(Some(&controller_config("", "")));
        put_secret(&api, "bmc", &user, &pw);
        for (i, s) in systems.iter().enumerate() {
            let addr = format!(
                "redfish+http://127.0.0.1:{port}/redfish/v1/Systems/{}",
                s.uuid
            );
            put_machine(
                &api,
                &format!("flaky-{i}"),
                serde_json::json!({"bmc": bmc_spec(&addr, "bmc"), "online": i % 2 == 0}),
            );
        }
        let mut done = Vec::new();
        for i in 0..systems.len() {
            let name = format!("flaky-{i}");
            let want = if i % 2 == 0 { "On" } else { "Off" };
            let m = wait_machine(&api, &name, Duration::from_secs(240), "Available", |m| {
                phase(m) == "Available"
                    && m["status"]["powerState"] == want
                    && condition(m, "PowerState").is_some_and(|c| c["reason"] == want)
            });
            done.push(m);
        }
        let evs: Vec<_> = (0..systems.len())
            .flat_map(|i| events(&api, &format!("flaky-{i}")))
            .collect();
        (api, done, evs)
    })
    .await
    .unwrap();
    let (api, machines, evs) = outcome;

    let injected = proxy.chaos_injected();
    let requests = proxy.log().len();
    assert!(injected > 0, "no faults injected in {requests} requests");
    for m in &machines {
        assert!(m["spec"]["bootMACAddress"].is_string(), "{m:#}");
        assert!(m["status"]["inventory"]["nics"].is_array(), "{m:#}");
    }
    // The retries are on record: BMC warnings with the failure's reason and
    // how often it happened.
    let bmc: Vec<_> = evs.iter().filter(|e| e.0.starts_with("Bmc")).collect();
    let retries: u64 = bmc.iter().map(|e| e.1).sum();
    assert!(
        retries > 0,
        "no BMC failures on record although {injected} faults were injected: {evs:?}"
    );
    eprintln!(
        "{injected} of {requests} BMC requests failed; {retries} BMC warnings recorded: {:?}",
        bmc.iter().map(|e| (&e.0, e.1)).collect::<Vec<_>>()
    );
    // Once converged, the BMC is reachable and no stale BMC error remains.
    tokio::task::spawn_blocking(move || {
        proxy.set_chaos(None);
        for i in 0..MACHINES {
            let name = format!("flaky-{i}");
            wait_machine(&api, &name, Duration::from_secs(60), "settled", |m| {
                condition(m, "BmcReachable").is_some_and(|c| c["status"] == "True")
                    && m["status"].get("lastError").is_none()
            });
        }
        assert!(!api.log().contains("panicked"));
    })
    .await
    .unwrap();
}
