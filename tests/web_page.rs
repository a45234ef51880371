//! The web page, rendered by headless Chromium against a running
//! `metalherd serve`.
//!
//! - `web_page_shows_machines_with_phase_and_last_error`: each Machine's
//!   phase, power and last error; TLS and the token are really needed.
//! - `watch_a_rollout_on_the_web_page`: a person opens the page while a
//!   MachineSet on the simulated rack (tests/common/sim_rack.rs) has rolled
//!   a new class through in two batches, clicks the set and sees the
//!   batches with their machines, clicks a machine of a batch and sees its
//!   boot timeline: the steps its network boots really went through. The
//!   clicks are mouse events (tests/common/browser.rs); nothing shows
//!   without them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;

use std::time::Duration;

use common::browser::Browser;
use serde_json::{Value, json};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_a_rollout_on_the_web_page() {
    let s = common::sim_rack::story(
        "p",
        9,
        &[
            ("flatcar-a", "4230.2.3", &["console=ttyS0"]),
            ("flatcar-b", "4230.2.4", &["console=ttyS0"]),
        ],
    )
    .await;
    let status = ["rollout", "status", "machineset", "workers", "--timeout"];
    s.apply_set("flatcar-a", 4, 120).await;
    let (ok, out, err) = s.cli(&[&status[..], &["60s"]].concat()).await;
    assert!(ok, "first rollout: {out}{err}");
    s.apply_set("flatcar-b", 4, 120).await;
    let (ok, out, err) = s.cli(&[&status[..], &["3m"]].concat()).await;
    assert!(ok, "rollout: {out}{err}");

    // What the controller recorded: two batches of revision 2.
    let set = s.set().await;
    let batches: Vec<Vec<String>> = set["status"]["completedBatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            assert_eq!(b["revision"], 2, "{b}");
            b["machines"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["name"].as_str().unwrap().to_string())
                .collect()
        })
        .collect();
    assert_eq!(batches.len(), 2, "{:#}", set["status"]);
    let clicked = batches[1][0].clone();
    let history: Vec<String> = s
        .machines()
        .await
        .iter()
        .find(|m| m["metadata"]["name"] == clicked.as_str())
        .unwrap()["status"]["bootHistory"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["step"].as_str().unwrap().to_string())
        .collect();
    for step in ["Script", "Ignition", "Installed", "Booted"] {
        assert!(history.iter().any(|h| h == step), "{step}: {history:?}");
    }

    let pin = spki_pin(&s.api.data_dir.join("server.crt"));
    let page = format!("{}/#token={}", s.api.url, s.api.token);
    let profile = s.dir.path().join("chromium");
    tokio::task::spawn_blocking(move || {
        let t = Duration::from_secs(30);
        let mut b = Browser::open(&page, &profile, &pin);
        b.wait_until(
            "document.querySelector('tr.machineset[data-name=\"workers\"]')",
            "the set's row",
            t,
        );
        let row =
            b.eval("document.querySelector('tr.machineset[data-name=\"workers\"]').innerText");
        let cols: Vec<&str> = row.as_str().unwrap().split('\t').map(str::trim).collect();
        // NAME NAMESPACE DESIRED READY UPDATED AVAILABLE STATE REVISION
        assert_eq!(
            cols,
            ["workers", "default", "4", "4", "4", "4", "Complete", "2"]
        );
        assert_eq!(
            b.eval("document.querySelectorAll('.batch').length"),
            json!(0),
            "batches shown before the set was clicked"
        );

        b.click("tr.machineset[data-name=\"workers\"]");
        b.wait_until(
            "document.querySelectorAll('#batches .batch').length === 2",
            "the rollout's batches after clicking the set",
            t,
        );
        let shown: Value = b.eval(
            "Array.from(document.querySelectorAll('#batches .batch')).map((d) => \
             Array.from(d.querySelectorAll('.batch-machine')).map((m) => m.dataset.name))",
        );
        assert_eq!(shown, json!(batches), "each batch's machines");
        let text = b.text();
        assert!(text.contains("Batch 2 · revision 2"), "{text}");
        assert!(text.contains("Rollout: Complete"), "{text}");

        assert_eq!(
            b.eval("document.querySelectorAll('#detail tr').length"),
            json!(0),
            "a machine's detail shown before one was clicked"
        );
        b.click(&format!(".batch-machine[data-name=\"{clicked}\"]"));
        b.wait_until(
            &format!(
                "document.querySelector('#detail h2') && \
                 document.querySelector('#detail h2').textContent === 'default/{clicked}'"
            ),
            "the machine's detail after clicking it in its batch",
            t,
        );
        // The boot timeline: the table after the "Boot timeline" heading.
        let steps: Value = b.eval(
            "(() => { const h = Array.from(document.querySelectorAll('#detail h3')) \
             .find((h) => h.textContent === 'Boot timeline'); if (!h) return null; \
             return Array.from(h.nextElementSibling.querySelectorAll('tr')).slice(1) \
             .map((r) => r.children[1].textContent); })()",
        );
        assert_eq!(steps, json!(history), "the boot timeline of {clicked}");
    })
    .await
    .unwrap();
}
