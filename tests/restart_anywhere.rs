//! Story: restart anywhere. `metalherd serve` is killed with SIGKILL at
//! each phase of a server's provisioning (Registering, inside the inventory
//! read; Provisioning before the power-on; Provisioning after it, while the
//! installer runs; Provisioned, waiting for the installed OS) and started
//! again on the same data directory. The Machine still converges to Ready,
//! on the boot it minted first (no second token), with the emulator seeing
//! no extra power action: every Reset it received is a power-on, and the
//! simulated server ran its installer once.
//!
//! The BMC is sushy-tools' fake driver behind the fault proxy, used as a
//! counting pass-through (plus one-off delays that hold the controller
//! inside a step while it is killed). The server is simulated in the test:
//! when the emulator's power state turns On it walks the boot path at
//! protocol level against metalherd's boot HTTP endpoints: the iPXE script
//! for its MAC, the Ignition URL from that script, then the `installed` and
//! `booted` call-homes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::bmc_proxy::{BmcProxy, Fault, Rule};
use common::rack::*;
use common::server::Server;
use common::sushy::{Sushy, SushyOptions};
use hyper::Method;
use serde_json::json;

/// What the simulated server has done; gates hold it before each call-home.
#[derive(Default)]
struct Sim {
    boots: AtomicUsize,
    ignition_fetches: AtomicUsize,
    at_gate: AtomicUsize,
    gate_installed: AtomicBool,
    gate_booted: AtomicBool,
    installed: AtomicBool,
    booted: AtomicBool,
    stop: AtomicBool,
}

async fn wait_gate(g: &AtomicBool, stop: &AtomicBool) {
    while !g.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Retry a request until it answers 200 (metalherd may be down for a
/// restart); returns the body.
async fn until_ok(c: &reqwest::Client, method: Method, url: &str, stop: &AtomicBool) -> String {
    loop {
        if stop.load(Ordering::SeqCst) {
            return String::new();
        }
        if let Ok(r) = c.request(method.clone(), url).send().await
            && r.status() == 200
            && let Ok(t) = r.text().await
        {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The server: powered on by the BMC, it network-boots once (script,
/// Ignition), installs, reboots into the installed OS, calls home.
async fn simulate(
    sim: Arc<Sim>,
    system_url: String,
    auth: (String, String),
    boot_url: String,
    mac: String,
) {
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut on = false;
    while !sim.stop.load(Ordering::SeqCst) {
        let power = c
            .get(&system_url)
            .basic_auth(&auth.0, Some(&auth.1))
            .send()
            .await
            .ok();
        let state = match power {
            Some(r) => r.json::<serde_json::Value>().await.ok(),
            None => None,
        };
        let now_on = state.is_some_and(|v| v["PowerState"] == "On");
        if now_on && !on {
            sim.boots.fetch_add(1, Ordering::SeqCst);
            let hy = mac.replace(':', "-");
            // PXE: the script names the Ignition URL with this boot's token.
            let ign = loop {
                let script = until_ok(
                    &c,
                    Method::GET,
                    &format!("{boot_url}/boot.ipxe?mac={hy}&arch=x86_64&platform=efi"),
                    &sim.stop,
                )
                .await;
                if let Some(u) = script
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("ignition.config.url="))
                {
                    break u.to_string();
                }
                if sim.stop.load(Ordering::SeqCst) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            let token = ign
                .split("token=")
                .nth(1)
                .unwrap_or_default()
                .split('&')
                .next()
                .unwrap_or_default()
                .to_string();
            until_ok(&c, Method::GET, &ign, &sim.stop).await;
            sim.ignition_fetches.fetch_add(1, Ordering::SeqCst);
            sim.at_gate.store(1, Ordering::SeqCst);
            wait_gate(&sim.gate_installed, &sim.stop).await;
            let home = |what: &str| format!("{boot_url}/callhome/{what}?mac={hy}&token={token}");
            until_ok(&c, Method::POST, &home("installed"), &sim.stop).await;
            sim.installed.store(true, Ordering::SeqCst);
            // The installer reboots into the installed OS (from disk).
            sim.at_gate.store(2, Ordering::SeqCst);
            wait_gate(&sim.gate_booted, &sim.stop).await;
            until_ok(&c, Method::POST, &home("booted"), &sim.stop).await;
            sim.booted.store(true, Ordering::SeqCst);
        }
        on = now_on;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn wait_until(what: &str, api: &Server, f: impl Fn() -> bool) {
    let ok = common::proc::wait_for(Duration::from_secs(90), || f().then_some(()));
    assert!(
        ok.is_some(),
        "never: {what}; machine:\n{:#}\nlog:\n{}",
        get_machine(api, "u1").unwrap_or_default(),
        tail(&api.log(), 60)
    );
}

fn boot_id(m: &serde_json::Value) -> String {
    m["status"]["boot"]["id"].as_str().unwrap_or("").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_anywhere() {
    let sushy = Sushy::start(SushyOptions::default());
    let proxy = Arc::new(BmcProxy::start(sushy.base()).await);
    let (user, pw) = sushy.opts.auth.clone().unwrap();
    let sys = sushy.opts.systems[0].clone();
    let system_url = format!("{}redfish/v1/Systems/{}", sushy.base(), sys.uuid);
    let mac = sys.macs[0].clone();
    let art = tempfile::tempdir().unwrap();
    std::fs::write(art.path().join("vmlinuz"), b"kernel").unwrap();
    std::fs::write(art.path().join("initrd"), b"initrd").unwrap();
    std::fs::create_dir_all(art.path().join("assets")).unwrap();
    let boot_port = common::free_port();
    let boot_url = format!("http://127.0.0.1:{boot_port}");
    let config = controller_config(
        "  bootStormLimit: 1\n",
        &format!(
            "boot:\n  listen: 127.0.0.1:{boot_port}\n  assetsDir: {}\n  waitSeconds: 1\n",
            art.path().join("assets").display()
        ),
    );
    let class = common::bootlab::class(
        "workers",
        common::bootlab::file_artifact(&art.path().join("vmlinuz")),
        common::bootlab::file_artifact(&art.path().join("initrd")),
        &["console=ttyS0"],
    );
    let mut class = serde_json::to_value(&class).unwrap();
    class["apiVersion"] = json!("metalherd.dev/v1alpha1");
    class["kind"] = json!("MachineClass");

    let sim = Arc::new(Sim::default());
    let sim_task = tokio::spawn(simulate(
        sim.clone(),
        system_url,
        (user.clone(), pw.clone()),
        boot_url,
        mac.clone(),
    ));

    let p = proxy.clone();
    let s = sim.clone();
    let address = format!(
        "redfish+http://127.0.0.1:{}/redfish/v1/Systems/{}",
        proxy.port, sys.uuid
    );
    let (api, first_boot) = tokio::task::spawn_blocking(move || {
        let mut api = Server::start_with_config(Some(&config));
        let (code, body) = api.req(
            "POST",
            "/apis/metalherd.dev/v1alpha1/namespaces/default/machineclasses",
            Some(&class),
        );
        assert!(code < 300, "class: {code} {body}");
        put_secret(&api, "bmc", &user, &pw);
        // The class's bootstrap token (rendered into the Ignition config).
        let join = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "join", "namespace": "default"},
            "stringData": {"token": "abcdef.0123456789abcdef"}});
        let (code, body) = api.req("POST", "/api/v1/namespaces/default/secrets", Some(&join));
        assert!(code < 300, "join secret: {code} {body}");

        // 1. Registering: hold the inventory read, kill inside it.
        let inv = p.add(
            Rule::new(
                Some(Method::GET),
                "EthernetInterfaces",
                Fault::Delay(Duration::from_secs(3)),
            )
            .times(1),
        );
        // 2. Provisioning before power-on: hold the boot override.
        let patch = p.add(
            Rule::new(
                Some(Method::PATCH),
                "/Systems/",
                Fault::Delay(Duration::from_secs(3)),
            )
            .times(1),
        );
        put_machine(
            &api,
            "u1",
            json!({"bmc": bmc_spec(&address, "bmc"), "bootMACAddress": mac,
                   "classRef": {"name": "workers"},
                   "network": {"address": "127.0.0.1/8", "hostname": "u1"}}),
        );
        wait_until("inventory read in flight", &api, || p.hits(inv) == 1);
        // Reads only so far: nothing is recorded before them (the finalizer
        // and the registration go out together before the first BMC
        // write, checked at 2).
        let m = get_machine(&api, "u1").unwrap();
        assert!(m["status"]["boot"].is_null(), "{m:#}");
        api.kill_and_restart();

        // 2. The boot is minted and the override is on its way: kill.
        wait_until("boot override in flight", &api, || p.hits(patch) == 1);
        let m = get_machine(&api, "u1").unwrap();
        assert_eq!(phase(&m), "Provisioning", "{m:#}");
        assert!(
            m["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty()),
            "the finalizer is written before the first BMC write: {m:#}"
        );
        let first_boot = boot_id(&m);
        assert!(
            !first_boot.is_empty(),
            "boot minted before the override: {m:#}"
        );
        assert!(
            m["status"]["progress"].get("powerCycledFor").is_none(),
            "{m:#}"
        );
        api.kill_and_restart();

        // 3. Powered on; the installer fetched its Ignition: kill.
        wait_until("installer running", &api, || {
            s.at_gate.load(Ordering::SeqCst) == 1
        });
        let m = get_machine(&api, "u1").unwrap();
        assert_eq!(phase(&m), "Provisioning", "{m:#}");
        assert_eq!(boot_id(&m), first_boot, "a second boot was minted");
        assert_eq!(
            m["status"]["progress"]["powerCycledFor"],
            first_boot.as_str()
        );
        api.kill_and_restart();
        s.gate_installed.store(true, Ordering::SeqCst);

        // 4. Installed; waiting for the installed OS: kill.
        let m = wait_phase(&api, "u1", "Provisioned", Duration::from_secs(90));
        assert_eq!(boot_id(&m), first_boot);
        api.kill_and_restart();
        s.gate_booted.store(true, Ordering::SeqCst);
        let m = wait_phase(&api, "u1", "Ready", Duration::from_secs(90));
        assert_eq!(boot_id(&m), first_boot, "{m:#}");
        assert!(m["status"]["provisionedRevision"].is_string(), "{m:#}");
        // Settled: a while later nothing has moved.
        std::thread::sleep(Duration::from_secs(3));
        let later = get_machine(&api, "u1").unwrap();
        assert_eq!(phase(&later), "Ready");
        assert_eq!(boot_id(&later), first_boot);
        assert_eq!(api.starts, 5);
        (api, first_boot)
    })
    .await
    .unwrap();

    sim.stop.store(true, Ordering::SeqCst);
    let _ = sim_task.await;
    assert_eq!(
        sim.boots.load(Ordering::SeqCst),
        1,
        "the server booted more than once"
    );
    assert_eq!(sim.ignition_fetches.load(Ordering::SeqCst), 1);
    assert!(sim.installed.load(Ordering::SeqCst) && sim.booted.load(Ordering::SeqCst));
    let resets: Vec<String> = proxy
        .bodies()
        .into_iter()
        .filter(|(m, path, _)| m == "POST" && path.contains("ComputerSystem.Reset"))
        .map(|(_, _, body)| body)
        .collect();
    assert!(!resets.is_empty(), "the server was never powered on");
    for r in &resets {
        let v: serde_json::Value = serde_json::from_str(r).unwrap();
        assert_eq!(v["ResetType"], "On", "an extra power action: {resets:?}");
    }
    eprintln!(
        "converged on boot {first_boot} across {} starts; resets seen: {resets:?}",
        api.starts
    );
}
