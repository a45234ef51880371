//! The web page, rendered by headless Chromium against a running
//! `metalherd serve`: it shows each Machine's phase, power, last error and,
//! once clicked, its boot timeline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;

use serde_json::json;

/// The base64 SHA-256 of the server certificate's public key, which
/// Chromium's `--ignore-certificate-errors-spki-list` pins.
fn spki_pin(cert: &std::path::Path) -> String {
    common::require_tool("openssl");
    let out = Command::new("sh")
        .arg("-c")
        .arg("openssl x509 -in \"$1\" -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64")
        .arg("sh")
        .arg(cert)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The DOM Chromium renders for `url`. The API (and the page, served on
/// the same TLS listener) presents a certificate signed by the data
/// directory's own CA, which a throwaway profile does not know: `pin`
/// trusts exactly that server key, as a user who adds the CA would; no pin
/// means Chromium refuses the certificate.
fn chromium_dom(url: &str, profile: &std::path::Path, pin: Option<&str>) -> String {
    let chromium = common::require_tool("chromium");
    let mut cmd = Command::new(chromium);
    if let Some(pin) = pin {
        cmd.arg(format!("--ignore-certificate-errors-spki-list={pin}"));
    }
    let out = cmd
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

    assert!(s.url.starts_with("https://"), "{}", s.url);
    let pin = spki_pin(&s.data_dir.join("server.crt"));
    let page = format!("{}/#token={}", s.url, s.token);
    // An unknown certificate is refused: the page really comes over TLS.
    let dom = chromium_dom(&page, &s.dir.path().join("chromium0"), None);
    assert!(
        !dom.contains("rack1-u07"),
        "page loaded over an untrusted certificate:\n{dom}"
    );
    let profile = s.dir.path().join("chromium");
    let dom = chromium_dom(&page, &profile, Some(&pin));
    assert!(dom.contains("rack1-u07"), "machine row missing:\n{dom}");
    assert!(dom.contains("phase-Error"), "phase missing:\n{dom}");
    assert!(
        dom.contains("BadCredentials: bad credentials for BMC 10.0.0.5"),
        "last error missing:\n{dom}"
    );
    assert!(dom.contains("1 machines"), "summary missing:\n{dom}");

    // Without a token the page says what to do instead of showing data.
    let dom = chromium_dom(&s.url, &s.dir.path().join("chromium2"), Some(&pin));
    assert!(!dom.contains("rack1-u07"), "data shown without a token");
    assert!(
        dom.contains("api-token"),
        "no hint where the token is:\n{dom}"
    );
}
