//! Declaring Machines in a running `metalherd serve` and waiting for the
//! controller: Secrets and Machines through the API, a controller config
//! with short polls for tests, and waits on a Machine's phase.

use std::time::Duration;

use serde_json::{Value, json};

use super::Api;
use super::proc::wait_for;

/// A config file with the controller polling every second (and `extra`
/// YAML lines appended under `controller:`, indented by the caller's
/// two spaces), plus any other top-level `sections`.
pub fn controller_config(extra: &str, sections: &str) -> String {
    format!(
        "controller:\n  pollSeconds: 1\n  bmcRetrySeconds: 1\n  resyncSeconds: 5\n  \
         bmcRequestTimeoutSeconds: 3\n  bmcPowerDeadlineSeconds: 20\n{extra}{sections}"
    )
}

pub fn put_secret(api: &impl Api, name: &str, user: &str, password: &str) {
    let (code, body) = api.req(
        "POST",
        "/api/v1/namespaces/default/secrets",
        Some(&json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "default"},
            "stringData": {"username": user, "password": password}})),
    );
    assert!(code < 300, "create Secret {name}: {code} {body}");
}

/// `serve` flags for a replica in Kubernetes mode against `kubeconfig`,
/// with short leader-election timing (3 s Lease, 2 s renew deadline, 500 ms
/// retry) so failover stories stay quick.
pub fn replica_args(kubeconfig: &str) -> [&str; 10] {
    [
        "--store",
        "kubernetes",
        "--kubeconfig",
        kubeconfig,
        "--leader-lease-duration",
        "3s",
        "--leader-renew-deadline",
        "2s",
        "--leader-retry-period",
        "500ms",
    ]
}

/// A temp directory holding the files `vmlinuz` and `initrd` (the class of
/// [`flatcar_class`]) and an empty `assets` directory for boot HTTP.
pub fn boot_files() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for f in ["vmlinuz", "initrd"] {
        std::fs::write(dir.path().join(f), f.as_bytes()).expect("boot file");
    }
    std::fs::create_dir_all(dir.path().join("assets")).expect("assets dir");
    dir
}

/// The Kubernetes-mode stories' class: `flatcar`, in `default`, its kernel
/// and initrd the files `vmlinuz` and `initrd` in `dir`, as API JSON.
pub fn flatcar_class(dir: &std::path::Path) -> Value {
    let mut class = super::bootlab::class(
        "flatcar",
        super::bootlab::file_artifact(&dir.join("vmlinuz")),
        super::bootlab::file_artifact(&dir.join("initrd")),
        &[],
    );
    class.metadata.namespace = Some("default".into());
    let mut class = serde_json::to_value(&class).expect("class JSON");
    class["apiVersion"] = json!("metalherd.dev/v1alpha1");
    class["kind"] = json!("MachineClass");
    class
}

/// The bootstrap-token Secret `join` the classes name.
pub fn put_join_secret(api: &impl Api) {
    let join = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "join", "namespace": "default"},
        "stringData": {"token": "abcdef.0123456789abcdef"}});
    let (code, body) = api.req("POST", "/api/v1/namespaces/default/secrets", Some(&join));
    assert!(code < 300, "join secret: {code} {body}");
}

/// Create a Machine with `spec` (must hold `bmc`).
pub fn put_machine(api: &impl Api, name: &str, spec: Value) {
    let (code, body) = api.req(
        "POST",
        "/apis/metalherd.dev/v1alpha1/namespaces/default/machines",
        Some(
            &json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec}),
        ),
    );
    assert!(code < 300, "create Machine {name}: {code} {body}");
}

pub fn bmc_spec(address: &str, secret: &str) -> Value {
    json!({"address": address, "credentialsSecretRef": {"name": secret}})
}

pub fn get_machine(api: &impl Api, name: &str) -> Option<Value> {
    let (code, body) = api.req(
        "GET",
        &format!("/apis/metalherd.dev/v1alpha1/namespaces/default/machines/{name}"),
        None,
    );
    (code == 200).then_some(body)
}

pub fn phase(m: &Value) -> &str {
    m.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The condition `type_` of a Machine, if set.
pub fn condition<'a>(m: &'a Value, type_: &str) -> Option<&'a Value> {
    m.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
}

/// Wait until `pred` holds for the Machine; panic with it and the log.
pub fn wait_machine(
    api: &impl Api,
    name: &str,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let got = wait_for(timeout, || {
        let m = get_machine(api, name)?;
        pred(&m).then_some(m)
    });
    match got {
        Some(m) => m,
        None => panic!(
            "machine {name} never became {what}; now:\n{:#}\nlog tail:\n{}",
            get_machine(api, name).unwrap_or(Value::Null),
            tail(&api.api_log(), 60)
        ),
    }
}

pub fn wait_phase(api: &impl Api, name: &str, want: &str, timeout: Duration) -> Value {
    wait_machine(api, name, timeout, want, |m| phase(m) == want)
}

/// Events about one object (reason, count, message).
pub fn events(api: &impl Api, name: &str) -> Vec<(String, u64, String)> {
    let (_, body) = api.req("GET", "/api/v1/namespaces/default/events", None);
    body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["involvedObject"]["name"] == name)
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or("").to_string(),
                e["count"].as_u64().unwrap_or(0),
                e["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
