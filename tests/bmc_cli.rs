//! Story: "racking day": a technician checks a freshly racked server with
//! `metalherd bmc` — directly by address with a password file, or by
//! Machine name through the API — and never sees the password echoed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::process::Command;

use common::redfish_server::{RedfishServer, ServerOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_checks_a_freshly_racked_server_without_printing_the_password() {
    let opts = ServerOptions {
        task_polls: 1,
        ..Default::default()
    };
    let pw = opts.password.clone();
    let srv = RedfishServer::start(opts).await;
    let dir = tempfile::tempdir().unwrap();
    let pw_file = dir.path().join("pw");
    std::fs::write(&pw_file, format!("{pw}\n")).unwrap();
    let bad_file = dir.path().join("bad");
    std::fs::write(&bad_file, "wrong-cli-pw-8e2f\n").unwrap();
    let address = format!("redfish+http://127.0.0.1:{}/redfish/v1/Systems/1", srv.port);
    let run = |args: Vec<String>| async move {
        tokio::task::spawn_blocking(move || {
            Command::new(common::metalherd_bin())
                .arg("bmc")
                .args(args)
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    };
    let direct = |cmd: &[&str], file: &Path| {
        let mut v: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
        v.extend([
            "--address".into(),
            address.clone(),
            "--username".into(),
            "root".into(),
            "--password-file".into(),
            file.display().to_string(),
        ]);
        v
    };
    let check = |out: &std::process::Output, secret: &str| {
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!all.contains(secret), "password printed: {all}");
        all
    };

    let out = run(direct(&["status"], &pw_file)).await;
    let text = check(&out, &pw);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("power: Off"), "{text}");

    let out = run(direct(&["power", "on"], &pw_file)).await;
    let text = check(&out, &pw);
    assert!(out.status.success(), "{text}");
    assert_eq!(srv.power(), "On");

    let out = run(direct(&["bootdev", "pxe"], &pw_file)).await;
    let text = check(&out, &pw);
    assert!(out.status.success(), "{text}");
    assert_eq!(srv.sim.lock().unwrap().boot.0, "Pxe");

    let mut args = direct(&["inventory"], &pw_file);
    args.push("--json".into());
    let out = run(args).await;
    let text = check(&out, &pw);
    assert!(out.status.success(), "{text}");
    let inv: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(inv["nics"][0]["mac"], "aa:bb:cc:00:00:01");
    assert_eq!(inv["serialNumber"], "SIM0001");

    let out = run(direct(&["status"], &bad_file)).await;
    let text = check(&out, "wrong-cli-pw-8e2f");
    assert!(!out.status.success());
    assert!(text.contains("bad credentials"), "{text}");

    // Every session the CLI opened was closed again.
    assert_eq!(srv.live_sessions(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_checks_a_machine_by_name_through_the_api() {
    let opts = ServerOptions::default();
    let pw = opts.password.clone();
    let srv = RedfishServer::start(opts).await;
    let api = tokio::task::spawn_blocking(common::server::Server::start)
        .await
        .unwrap();
    let (code, body) = api.req(
        "POST",
        "/api/v1/namespaces/default/secrets",
        Some(&serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "u7-bmc", "namespace": "default"},
            "stringData": {"username": "root", "password": pw}})),
    );
    assert!(code < 300, "{code} {body}");
    let (code, body) = api.req(
        "POST",
        "/apis/metalherd.dev/v1alpha1/namespaces/default/machines",
        Some(&serde_json::json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
            "metadata": {"name": "rack1-u7", "namespace": "default"},
            "spec": {"bmc": {"address": format!("redfish+http://127.0.0.1:{}/redfish/v1/Systems/1", srv.port),
                             "credentialsSecretRef": {"name": "u7-bmc"}}}})),
    );
    assert!(code < 300, "{code} {body}");
    let out = tokio::task::spawn_blocking({
        let api_dir = api.data_dir.clone();
        move || {
            Command::new(common::metalherd_bin())
                .arg("--data-dir")
                .arg(api_dir)
                .args(["bmc", "inventory", "rack1-u7", "--json"])
                .env_remove("METALHERD_SERVER")
                .env_remove("METALHERD_TOKEN")
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let (stdout, stderr) = common::server::text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(!stdout.contains(&pw) && !stderr.contains(&pw));
    let inv: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(inv["serialNumber"], "SIM0001");

    // A Machine that does not exist: a clear error.
    let out = api.cli(&["bmc", "status", "no-such-machine"]);
    let (stdout, stderr) = common::server::text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("no-such-machine"), "{stdout}{stderr}");
}
