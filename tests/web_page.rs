//! The web page, rendered by headless Chromium against a running
//! `metalherd serve`: it shows each Machine's phase, power, last error and,
//! once clicked, its boot timeline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;

use serde_json::json;

fn chromium_dom(url: &str, profile: &std::path::Path) -> String {
    let chromium = common::require_tool("chromium");
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=8000",
            "--dump-dom",
            // The API's certificate is signed by the data directory's own
            // CA, which this throwaway profile does not know.
            "--ignore-certificate-errors",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .expect("run chromium");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn web_page_shows_machines_with_phase_and_last_error() {
    let s = common::server::Server::start();
    let m = json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": "rack1-u07", "namespace": "default"},
        "spec": {"bmc": {"address": "redfish+https://10.0.0.5/redfish/v1/Systems/1",
                         "credentialsSecretRef": {"name": "rack1-u07-bmc"}}}
    });
    let (code, created) = s.req(
        "POST",
        "/apis/metalherd.dev/v1alpha1/namespaces/default/machines",
        Some(&m),
    );
    assert_eq!(code, 201, "{created}");
    let mut with_status = created.clone();
    with_status["status"] = json!({
        "phase": "Error", "powerState": "Off",
        "lastError": {"reason": "BadCredentials", "message": "bad credentials for BMC 10.0.0.5", "time": "2026-11-22T03:00:00Z"},
        "bootHistory": [{"time": "2026-11-22T03:00:01Z", "step": "DHCPOffer", "detail": "10.0.0.7"}]
    });
    let (code, body) = s.req(
        "PUT",
        "/apis/metalherd.dev/v1alpha1/namespaces/default/machines/rack1-u07/status",
        Some(&with_status),
    );
    assert_eq!(code, 200, "{body}");

    let profile = s.dir.path().join("chromium");
    let dom = chromium_dom(&format!("{}/#token={}", s.url, s.token), &profile);
    assert!(dom.contains("rack1-u07"), "machine row missing:\n{dom}");
    assert!(dom.contains("phase-Error"), "phase missing:\n{dom}");
    assert!(
        dom.contains("BadCredentials: bad credentials for BMC 10.0.0.5"),
        "last error missing:\n{dom}"
    );
    assert!(dom.contains("1 machines"), "summary missing:\n{dom}");

    // Without a token the page says what to do instead of showing data.
    let dom = chromium_dom(&s.url, &s.dir.path().join("chromium2"));
    assert!(!dom.contains("rack1-u07"), "data shown without a token");
    assert!(
        dom.contains("api-token"),
        "no hint where the token is:\n{dom}"
    );
}
