//! Story: "qualify one server of a new model before racking a fleet of
//! them": `metalherd hw-test` against the BMC emulators the project uses
//! (sushy-tools' fake driver, OpenIPMI's ipmi_sim, pyghmi's fake BMC), and
//! against a lying BMC (the fault proxy in front of sushy-tools) whose lie
//! it must name and turn into a quirk entry. The VM-backed half of the
//! qualification (a real PXE boot observed through proxy DHCP) is in
//! qualify_a_server_model_on_a_vm.rs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;

use common::bmc_proxy::{BmcProxy, Fault, Rule};
use common::ipmi_emulators::{IpmiSim, PASSWORD, PyghmiBmc, USER};
use common::sushy::{Sushy, SushyOptions};
use serde_json::Value;

/// Run `metalherd hw-test` and return (exit success, JSON report, stderr).
fn hw_test(address: &str, user: &str, password: &str, extra: &[&str]) -> (bool, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("password");
    std::fs::write(&pw, format!("{password}\n")).unwrap();
    // A short watch after each power action unless the test asks longer.
    let settle: &[&str] = if extra.contains(&"--settle-window") {
        &[]
    } else {
        &["--settle-window", "3"]
    };
    let out = Command::new(common::metalherd_bin())
        .args(["hw-test", "--address", address, "--username", user])
        .arg("--password-file")
        .arg(&pw)
        .args(["-o", "json", "--power-timeout", "60"])
        .args(extra)
        .args(settle)
        .env_remove("METALHERD_CONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("report is not JSON ({e}):\n{stdout}\nstderr:\n{stderr}"));
    // The password never reaches the report or the progress lines.
    assert!(!stdout.contains(password), "{stdout}");
    assert!(!stderr.contains(password), "{stderr}");
    (out.status.success(), report, stderr)
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {report:#}"))
}

fn status(report: &Value, name: &str) -> String {
    check(report, name)["status"].as_str().unwrap().to_string()
}

/// Requests that change power or the next boot, as the proxy saw them.
fn changes(proxy: &BmcProxy) -> Vec<(String, String)> {
    proxy
        .log()
        .into_iter()
        .filter(|(m, _, _)| m == "POST" || m == "PATCH" || m == "PUT")
        .filter(|(_, p, _)| !p.contains("SessionService") && !p.contains("/Sessions"))
        .map(|(m, p, _)| (m, p))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_qualification_of_sushy_changes_nothing() {
    let sushy = Sushy::start(SushyOptions::default());
    let proxy = BmcProxy::start(sushy.base()).await;
    let system = &sushy.opts.systems[0];
    let address = format!(
        "redfish+http://127.0.0.1:{}/redfish/v1/Systems/{}",
        proxy.base().port().unwrap(),
        system.uuid
    );
    let (user, pw) = sushy.opts.auth.clone().unwrap();
    let (ok, report, stderr) = tokio::task::spawn_blocking(move || {
        hw_test(&address, &user, &pw, &["--probe-session-limit", "3"])
    })
    .await
    .unwrap();
    assert!(ok, "{report:#}\n{stderr}");
    assert_eq!(report["protocol"], "redfish");
    assert_eq!(status(&report, "login-basic"), "pass", "{report:#}");
    // sushy-tools has no SessionService: said, not failed.
    assert_eq!(
        status(&report, "login-session"),
        "notSupported",
        "{report:#}"
    );
    // Day two, read only: sushy-tools' fake driver has no BIOS and no
    // storage, and offers SimpleUpdate.
    assert_eq!(status(&report, "bios"), "notSupported", "{report:#}");
    assert_eq!(status(&report, "simple-update"), "pass", "{report:#}");
    assert_eq!(status(&report, "volumes"), "notSupported", "{report:#}");
    assert_eq!(status(&report, "inventory"), "pass");
    let detail = check(&report, "inventory")["detail"].as_str().unwrap();
    for mac in &system.macs {
        assert!(detail.contains(mac.as_str()), "{mac} missing: {detail}");
    }
    for step in [
        "boot-override",
        "power-off",
        "power-on",
        "power-cycle",
        "bios-applied",
        "virtual-media",
    ] {
        assert_eq!(status(&report, step), "skipped", "{step}");
    }
    let vmedia = check(&report, "virtual-media")["detail"].as_str().unwrap();
    assert!(vmedia.starts_with("no --virtual-media-url"), "{vmedia}");
    assert!(stderr.contains("read-only run"), "{stderr}");
    // Counted at the BMC: no power call, no boot override.
    assert_eq!(changes(&proxy), Vec::<(String, String)>::new());
    assert!(!proxy.log().is_empty(), "the run went through the proxy");

    // The operator's entry point, hw-tests/run, with its read-only profile.
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("password");
    std::fs::write(&pw, sushy.opts.auth.clone().unwrap().1).unwrap();
    let address = sushy.address(0);
    let user = sushy.opts.auth.clone().unwrap().0;
    let results = dir.path().join("results");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hw-tests/run"))
            .arg("read-only")
            .env("METALHERD_BIN", common::metalherd_bin())
            .env("METALHERD_BMC_ADDRESS", address)
            .env("METALHERD_BMC_USERNAME", user)
            .env("METALHERD_BMC_PASSWORD_FILE", &pw)
            .env("HW_TEST_RESULTS", &results)
            .env_remove("METALHERD_CONFIG")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("QUALIFIED"), "{stdout}");
    assert!(stdout.contains("session-limit"), "{stdout}");
    let reports: Vec<_> = std::fs::read_dir(dir.path().join("results"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(reports.len(), 1, "one JSON report written");
}

/// Python's http.server on 127.0.0.1 serving `dir`: an image server
/// sushy-tools downloads virtual media from. Killed when dropped.
fn image_server(dir: &std::path::Path) -> (common::proc::ChildGuard, u16) {
    let port = common::free_port();
    let guard = common::proc::ChildGuard::spawn(
        "http.server",
        Command::new(common::venv().join("bin/python3"))
            .args(["-m", "http.server", "--bind", "127.0.0.1"])
            .arg(port.to_string())
            .arg("--directory")
            .arg(dir),
        &dir.join("http.log"),
    );
    let up = common::proc::wait_for(std::time::Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    });
    assert!(up.is_some(), "http.server did not listen");
    (guard, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_qualification_of_sushy_times_power_and_reads_the_override_back() {
    let sushy = Sushy::start(SushyOptions::default());
    let address = sushy.address(0);
    let (user, pw) = sushy.opts.auth.clone().unwrap();
    // An "ISO" behind a path with a token in it, as boot HTTP serves them.
    let images = tempfile::tempdir().unwrap();
    let token = "f00dfeed42";
    std::fs::create_dir_all(images.path().join("vmedia").join(token)).unwrap();
    std::fs::write(
        images.path().join("vmedia").join(token).join("boot.iso"),
        vec![7u8; 32 * 1024],
    )
    .unwrap();
    let (_server, port) = image_server(images.path());
    let url = format!("http://127.0.0.1:{port}/vmedia/{token}/boot.iso");
    let (_, report, stderr) = tokio::task::spawn_blocking(move || {
        hw_test(
            &address,
            &user,
            &pw,
            &["--allow-power-actions", "--virtual-media-url", &url],
        )
    })
    .await
    .unwrap();
    // Inserted (sushy fetched the image), booted once from Cd, ejected,
    // the override put back; the token shows nowhere.
    let c = check(&report, "virtual-media");
    assert_eq!(c["status"], "pass", "{report:#}\n{stderr}");
    let detail = c["detail"].as_str().unwrap();
    for said in [
        "/.../boot.iso",
        "one-time boot Cd read back Cd/",
        "ejected",
        "put back (Pxe/",
    ] {
        assert!(detail.contains(said), "{said}: {detail}");
    }
    let fetched = std::fs::read_to_string(images.path().join("http.log")).unwrap();
    assert!(
        fetched.contains(&format!("GET /vmedia/{token}/boot.iso")),
        "{fetched}"
    );
    assert!(!report.to_string().contains(token), "{report:#}");
    assert!(!stderr.contains(token), "{stderr}");
    metalherd::bmc::redfish::client::install_crypto_provider();
    let cd = reqwest::Client::new()
        .get(format!(
            "{}redfish/v1/Systems/{}/VirtualMedia/Cd",
            sushy.base(),
            sushy.opts.systems[0].uuid
        ))
        .basic_auth(
            &sushy.opts.auth.as_ref().unwrap().0,
            sushy.opts.auth.as_ref().map(|a| &a.1),
        )
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(cd["Inserted"], false, "left empty: {cd:#}");
    for step in ["power-off", "power-on", "power-cycle"] {
        let c = check(&report, step);
        assert_ne!(c["status"], "fail", "{step}: {report:#}\n{stderr}");
        assert!(c["seconds"].as_f64().is_some(), "{step} untimed: {c}");
    }
    let c = check(&report, "boot-override");
    assert_ne!(c["status"], "fail", "{report:#}");
    assert!(
        c["detail"].as_str().unwrap().contains("Pxe"),
        "the override read back names the target: {c}"
    );
    assert!(
        stderr.contains("power-cycle"),
        "progress on screen: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bmc_that_keeps_a_one_time_override_is_named_and_gets_a_quirk() {
    let sushy = Sushy::start(SushyOptions::default());
    let proxy = BmcProxy::start(sushy.base()).await;
    // sushy-tools itself keeps a one-time override (a built-in quirk entry
    // knows it by name): disguised as another vendor, it is a BMC no entry
    // covers. It also reports power On before the server runs.
    proxy.add(Rule::new(
        Some(reqwest::Method::GET),
        "/redfish/v1",
        Fault::Rewrite(vec![
            ("Sushy".into(), "Acme".into()),
            ("sushy".into(), "acme".into()),
        ]),
    ));
    proxy.add(
        Rule::new(
            Some(reqwest::Method::POST),
            "ComputerSystem.Reset",
            Fault::PowerEarly { reads: 3 },
        )
        .times(1),
    );
    let address = format!(
        "redfish+http://127.0.0.1:{}/redfish/v1/Systems/{}",
        proxy.base().port().unwrap(),
        sushy.opts.systems[0].uuid
    );
    let (user, pw) = sushy.opts.auth.clone().unwrap();
    let (ok, report, stderr) = tokio::task::spawn_blocking(move || {
        // sushy applies a power change 1–11 s after it acknowledged it: a
        // watch that reads every 200 ms sees the state before it does.
        let extra = [
            "--allow-power-actions",
            "--settle-window",
            "15",
            "--poll-ms",
            "200",
        ];
        hw_test(&address, &user, &pw, &extra)
    })
    .await
    .unwrap();
    assert_eq!(
        status(&report, "boot-override"),
        "quirk",
        "{report:#}\n{stderr}"
    );
    let findings = report["findings"].as_array().unwrap();
    assert!(
        findings
            .iter()
            .any(|f| f["quirk"] == "onceKeptAsContinuous" && f["coveredBy"].is_null()),
        "{report:#}"
    );
    assert!(
        findings.iter().any(|f| f["quirk"] == "powerSettleSeconds"),
        "the early power report is named: {report:#}"
    );
    // The proposed entry is in the config file's format, and loads.
    let proposed = &report["proposedQuirk"];
    assert_eq!(proposed["onceKeptAsContinuous"], true, "{report:#}");
    assert!(
        proposed["powerSettleSeconds"].as_u64().is_some(),
        "{report:#}"
    );
    assert_eq!(proposed["match"]["vendor"], "Acme", "{report:#}");
    let yaml = serde_yaml::to_string(&serde_json::json!({"bmc": {"quirks": [proposed]}})).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, &yaml).unwrap();
    metalherd::config::ConfigFile::load(&config)
        .unwrap_or_else(|e| panic!("proposed quirk does not load: {e}\n{yaml}"));
    // Qualified with the quirk it proposes.
    assert!(ok, "{report:#}");
    assert_eq!(report["qualified"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmi_sim_and_pyghmi_qualify_over_both_cipher_suites() {
    let sim = IpmiSim::start();
    let address = format!("ipmi://127.0.0.1:{}", sim.port);
    let (ok, report, stderr) = tokio::task::spawn_blocking(move || {
        hw_test(&address, USER, PASSWORD, &["--allow-power-actions"])
    })
    .await
    .unwrap();
    assert_eq!(report["protocol"], "ipmi");
    assert_eq!(
        status(&report, "login-suite-3"),
        "pass",
        "{report:#}\n{stderr}"
    );
    // ipmi_sim has no SHA-256 suite.
    assert_ne!(status(&report, "login-suite-17"), "pass", "{report:#}");
    assert_eq!(status(&report, "inventory"), "pass", "{report:#}");
    for step in ["power-off", "power-on", "power-cycle"] {
        assert_ne!(status(&report, step), "fail", "{step}: {report:#}");
    }
    assert!(
        sim.chassis_log().contains("set boot pxe"),
        "the override reached the emulator: {}",
        sim.chassis_log()
    );
    let _ = ok;

    let pyg = PyghmiBmc::start(true);
    let address = format!("ipmi://127.0.0.1:{}", pyg.port);
    let (_, report, stderr) =
        tokio::task::spawn_blocking(move || hw_test(&address, USER, PASSWORD, &[]))
            .await
            .unwrap();
    assert_eq!(
        status(&report, "login-suite-17"),
        "pass",
        "{report:#}\n{stderr}"
    );
    assert_eq!(status(&report, "power-off"), "skipped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_qualification_over_ipmi_sends_no_chassis_control() {
    let sim = IpmiSim::start();
    let address = format!("ipmi://127.0.0.1:{}", sim.port);
    // --interface too: without --allow-power-actions nothing is watched
    // either (no port is bound, no power call is made).
    let (ok, report, stderr) = tokio::task::spawn_blocking(move || {
        hw_test(&address, USER, PASSWORD, &["--interface", "lo"])
    })
    .await
    .unwrap();
    assert!(ok, "{report:#}\n{stderr}");
    assert_eq!(status(&report, "inventory"), "pass", "{report:#}");
    for step in [
        "boot-override",
        "power-off",
        "power-on",
        "power-cycle",
        "pxe-boot",
        "pxe-once",
    ] {
        assert_eq!(status(&report, step), "skipped", "{step}: {report:#}");
    }
    // Counted at the emulator: ipmi_sim runs its chassis program for every
    // power and boot-device request; none of them was a "set".
    let log = sim.chassis_log();
    assert!(
        log.lines().any(|l| l.starts_with("get")),
        "the run read the chassis through the emulator: {log}"
    );
    assert!(
        !log.lines().any(|l| l.starts_with("set")),
        "a read-only run changed the chassis: {log}"
    );
}
