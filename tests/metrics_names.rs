//! `/metrics` of a running `metalherd serve`: every subsystem's metrics
//! under one `metalherd_` prefix, never twice.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use serde_json::json;

fn metrics(s: &common::server::Server) -> String {
    let out = s
        .curl()
        .args(["-sf", "-H", &format!("Authorization: Bearer {}", s.token)])
        .arg(format!("{}/metrics", s.url))
        .output()
        .unwrap();
    assert!(out.status.success(), "GET /metrics failed: {}", s.log());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn metrics_share_one_prefix() {
    // The controller on (the default): it reconciles the Machine below.
    let s = common::server::Server::start_with_config(None);
    // A Machine whose BMC refuses connections: the controller reconciles it
    // and the BMC driver counts a failed operation.
    let m = json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": "m1", "namespace": "default"},
        "spec": {"bmc": {"address": "redfish+http://127.0.0.1:1/redfish/v1/Systems/1",
                         "credentialsSecretRef": {"name": "m1-bmc"}}}
    });
    let sec = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "m1-bmc"},
                     "stringData": {"username": "u", "password": "p"}});
    assert_eq!(
        s.req("POST", "/api/v1/namespaces/default/secrets", Some(&sec))
            .0,
        201
    );
    assert_eq!(
        s.req(
            "POST",
            "/apis/metalherd.dev/v1alpha1/namespaces/default/machines",
            Some(&m)
        )
        .0,
        201
    );
    // A MachineSet: its controller reports the set's machines out of service.
    let set = json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": "workers", "namespace": "default"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"role": "worker"}},
                 "template": {"classRef": {"name": "flatcar"}}}
    });
    assert_eq!(
        s.req(
            "POST",
            "/apis/metalherd.dev/v1alpha1/namespaces/default/machinesets",
            Some(&set)
        )
        .0,
        201
    );
    let want = [
        "metalherd_api_requests",
        "metalherd_bmc_http_retries",
        "metalherd_reconciles_running",
        "metalherd_ipmi_sessions",
        "metalherd_machineset_rollouts",
        "metalherd_machineset_remediations",
        "metalherd_machineset_batch_seconds",
        "metalherd_machineset_machines_out_of_service",
    ];
    let text = common::proc::wait_for(Duration::from_secs(60), || {
        let t = metrics(&s);
        want.iter().all(|w| t.contains(w)).then_some(t)
    })
    .unwrap_or_else(|| {
        panic!(
            "families {want:?} not all in /metrics:\n{}\nlog:\n{}",
            metrics(&s),
            s.log()
        )
    });
    assert!(
        !text.contains("metalherd_metalherd_"),
        "doubled prefix:\n{text}"
    );
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let name = line.split_whitespace().nth(2).unwrap_or_default();
        assert!(
            name.starts_with("metalherd_"),
            "metric {name} outside the prefix"
        );
    }
}
