//! Story: "rack a server, power it on, boot it from the network" over
//! Redfish — against sushy-tools' emulator (fake driver), through a
//! fault-injecting proxy, over TLS with a self-signed certificate, and
//! against a small Redfish server with sessions and task monitors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::bmc_proxy::{BmcProxy, Fault, Rule};
use common::redfish_server::{RedfishServer, ServerOptions};
use common::sushy::{FakeSystem, Sushy, SushyOptions};
use metalherd::bmc::connector::connect_address;
use metalherd::bmc::redfish::logic::RetryPolicy;
use metalherd::bmc::redfish::{RedfishBmc, TlsMode};
use metalherd::bmc::{
    Bmc, BmcError, BootDevice, Credentials, FirmwareMode, PowerAction, PowerState, Timing,
};
use reqwest::Method;

/// Sushy applies power changes 1–11 s after the request: poll up to 40 s.
fn sushy_timing() -> Timing {
    Timing {
        power_deadline: Duration::from_secs(40),
        poll_interval: Duration::from_millis(300),
        request_timeout: Duration::from_secs(10),
    }
}

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        base_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        max_retry_after: Duration::from_secs(2),
    }
}

fn sushy_creds(s: &Sushy) -> Credentials {
    let (u, p) = s.opts.auth.clone().expect("auth");
    Credentials::new(u, p)
}

fn sushy_bmc(s: &Sushy, base: url::Url, timing: Timing) -> RedfishBmc {
    RedfishBmc::with_retry(
        base,
        Some(format!("/redfish/v1/Systems/{}", s.opts.systems[0].uuid)),
        sushy_creds(s),
        &TlsMode::SystemRoots,
        timing,
        fast_retry(),
    )
    .expect("driver")
}

/// What sushy itself reports for system 0 (read around the driver).
async fn sushy_system(s: &Sushy) -> serde_json::Value {
    let (u, p) = s.opts.auth.clone().expect("auth");
    reqwest::Client::new()
        .get(format!(
            "http://127.0.0.1:{}/redfish/v1/Systems/{}",
            s.port, s.opts.systems[0].uuid
        ))
        .basic_auth(u, Some(p))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sushy_power_on_off_cycle_polls_until_reached() {
    let s = Sushy::start(SushyOptions::default());
    let bmc = sushy_bmc(&s, s.base(), sushy_timing());
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);

    bmc.power(PowerAction::On).await.unwrap();
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::On);
    assert_eq!(sushy_system(&s).await["PowerState"], "On");

    // Already on: nothing to send, still Ok.
    bmc.power(PowerAction::On).await.unwrap();

    // A cycle of a running server: sushy drops to Off, then comes back On.
    bmc.power(PowerAction::Cycle).await.unwrap();
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::On);

    bmc.power(PowerAction::ForceOff).await.unwrap();
    assert_eq!(sushy_system(&s).await["PowerState"], "Off");

    // Cycling a server that is off powers it on.
    bmc.power(PowerAction::Cycle).await.unwrap();
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::On);

    bmc.power(PowerAction::GracefulOff).await.unwrap();
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    bmc.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sushy_one_time_pxe_boot_with_uefi_is_read_back() {
    let s = Sushy::start(SushyOptions::default());
    let bmc = sushy_bmc(&s, s.base(), sushy_timing());
    bmc.set_boot_once(BootDevice::Network, FirmwareMode::Uefi)
        .await
        .unwrap();
    let sys = sushy_system(&s).await;
    assert_eq!(sys["Boot"]["BootSourceOverrideTarget"], "Pxe");
    assert_eq!(sys["Boot"]["BootSourceOverrideMode"], "UEFI");

    bmc.set_boot_once(BootDevice::Disk, FirmwareMode::Legacy)
        .await
        .unwrap();
    let sys = sushy_system(&s).await;
    assert_eq!(sys["Boot"]["BootSourceOverrideTarget"], "Hdd");
    assert_eq!(sys["Boot"]["BootSourceOverrideMode"], "Legacy");

    bmc.set_boot_once(BootDevice::Network, FirmwareMode::Uefi)
        .await
        .unwrap();
    assert_eq!(
        sushy_system(&s).await["Boot"]["BootSourceOverrideMode"],
        "UEFI"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sushy_inventory_lists_nics_with_macs_and_finds_the_only_system() {
    let s = Sushy::start(SushyOptions::default());
    // No system in the address: the only one is discovered.
    let bmc = RedfishBmc::new(
        s.base(),
        None,
        sushy_creds(&s),
        &TlsMode::SystemRoots,
        sushy_timing(),
    )
    .unwrap();
    assert_eq!(
        bmc.system_path().await.unwrap(),
        format!("/redfish/v1/Systems/{}", s.opts.systems[0].uuid)
    );
    let inv = bmc.inventory().await.unwrap();
    assert_eq!(inv.manufacturer.as_deref(), Some("Sushy Emulator"));
    assert_eq!(inv.uuid.as_deref(), Some(s.opts.systems[0].uuid.as_str()));
    let mut macs: Vec<_> = inv.nics.iter().map(|n| n.mac.clone()).collect();
    macs.sort();
    assert_eq!(macs, s.opts.systems[0].macs);
    // sushy's fake driver answers Storage with 500: no disks, no failure.
    assert!(inv.disks.is_empty());
    // Secure Boot as the System's SecureBoot resource says, off and on.
    assert_eq!(inv.secure_boot, Some(false));
    s.set_secure_boot(0, true).await;
    assert_eq!(bmc.inventory().await.unwrap().secure_boot, Some(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sushy_system_choice_needs_a_path_when_there_are_several() {
    let s = Sushy::start(SushyOptions {
        systems: vec![FakeSystem::new(1), FakeSystem::new(2)],
        ..Default::default()
    });
    let creds = sushy_creds(&s);
    let bmc = RedfishBmc::new(
        s.base(),
        None,
        creds.clone(),
        &TlsMode::SystemRoots,
        sushy_timing(),
    )
    .unwrap();
    let e = bmc.power_state().await.unwrap_err();
    assert_eq!(e.reason(), "BmcConfigError", "{e}");
    assert!(e.to_string().contains("2 systems"), "{e}");

    // The connector path with an address naming the second system.
    let b = connect_address(
        &s.address(1),
        creds.clone(),
        &TlsMode::SystemRoots.into(),
        sushy_timing(),
    )
    .await
    .unwrap();
    assert_eq!(b.power_state().await.unwrap(), PowerState::Off);

    // A system that does not exist.
    let addr = format!(
        "redfish+http://127.0.0.1:{}/redfish/v1/Systems/nope",
        s.port
    );
    let b = connect_address(&addr, creds, &TlsMode::SystemRoots.into(), sushy_timing())
        .await
        .unwrap();
    let e = b.power_state().await.unwrap_err();
    assert!(matches!(e, BmcError::NoSuchSystem { .. }), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sushy_bad_credentials_are_reported_without_the_password() {
    let s = Sushy::start(SushyOptions::default());
    let wrong = "wrong-pw-Zq81";
    let bmc = RedfishBmc::new(
        s.base(),
        None,
        Credentials::new("admin", wrong),
        &TlsMode::SystemRoots,
        sushy_timing(),
    )
    .unwrap();
    let e = bmc.power_state().await.unwrap_err();
    assert!(matches!(e, BmcError::BadCredentials { .. }), "{e}");
    assert_eq!(e.reason(), "BadCredentials");
    for text in [e.to_string(), format!("{e:?}"), format!("{bmc:?}")] {
        assert!(!text.contains(wrong), "password leaked: {text}");
    }
    // The right password (only) works.
    let good = sushy_bmc(&s, s.base(), sushy_timing());
    assert_eq!(good.power_state().await.unwrap(), PowerState::Off);
    assert!(!format!("{good:?}").contains(s.opts.auth.as_ref().unwrap().1.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_5xx_and_503_retry_after_are_retried() {
    let s = Sushy::start(SushyOptions::default());
    let proxy = BmcProxy::start(s.base()).await;
    let bmc = sushy_bmc(&s, proxy.base(), sushy_timing());
    let sys = "/redfish/v1/Systems/";
    let r503 = proxy.add(
        Rule::new(
            Some(Method::GET),
            sys,
            Fault::Status {
                code: 503,
                retry_after: Some(1),
            },
        )
        .times(1),
    );
    let r500 = proxy.add(
        Rule::new(
            Some(Method::GET),
            sys,
            Fault::Status {
                code: 500,
                retry_after: None,
            },
        )
        .times(2),
    );
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    assert_eq!((proxy.hits(r503), proxy.hits(r500)), (1, 2));

    // A BMC that keeps failing: a typed HTTP error after the attempts.
    proxy.add(Rule::new(
        Some(Method::GET),
        sys,
        Fault::Status {
            code: 502,
            retry_after: None,
        },
    ));
    let e = bmc.power_state().await.unwrap_err();
    assert!(matches!(e, BmcError::Http { status: 502, .. }), "{e}");
    let tries = proxy.log().iter().filter(|(_, _, st)| *st == 502).count();
    assert_eq!(tries, fast_retry().max_attempts as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_ignored_boot_override_is_caught_by_read_back() {
    let s = Sushy::start(SushyOptions::default());
    let proxy = BmcProxy::start(s.base()).await;
    let bmc = sushy_bmc(&s, proxy.base(), sushy_timing());
    let swallow = proxy.add(Rule::new(Some(Method::PATCH), "/Systems/", Fault::Swallow));
    let e = bmc
        .set_boot_once(BootDevice::Network, FirmwareMode::Uefi)
        .await
        .unwrap_err();
    assert_eq!(proxy.hits(swallow), 1);
    match e {
        BmcError::BootOverrideIgnored { wanted, got, .. } => {
            assert_eq!(wanted, "Pxe/Once/UEFI");
            assert!(got.starts_with("Hdd/"), "{got}");
        }
        other => panic!("expected BootOverrideIgnored, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_power_state_never_reached_is_an_error() {
    let s = Sushy::start(SushyOptions::default());
    let proxy = BmcProxy::start(s.base()).await;
    let timing = Timing {
        power_deadline: Duration::from_secs(3),
        ..sushy_timing()
    };
    let bmc = sushy_bmc(&s, proxy.base(), timing);
    let swallow = proxy.add(Rule::new(
        Some(Method::POST),
        "ComputerSystem.Reset",
        Fault::Swallow,
    ));
    let e = bmc.power(PowerAction::On).await.unwrap_err();
    assert_eq!(proxy.hits(swallow), 1);
    match e {
        BmcError::PowerStateNotReached { wanted, last, .. } => {
            assert_eq!(wanted, PowerState::On);
            assert_eq!(last, PowerState::Off);
        }
        other => panic!("expected PowerStateNotReached, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_delays_and_dropped_replies() {
    let s = Sushy::start(SushyOptions::default());
    let proxy = BmcProxy::start(s.base()).await;
    let timing = Timing {
        request_timeout: Duration::from_secs(1),
        ..sushy_timing()
    };
    let bmc = sushy_bmc(&s, proxy.base(), timing);
    // A slow answer inside the timeout is fine.
    proxy.add(
        Rule::new(
            Some(Method::GET),
            "/Systems/",
            Fault::Delay(Duration::from_millis(300)),
        )
        .times(1),
    );
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    // One dropped reply is retried (GET is idempotent).
    let once = proxy.add(Rule::new(Some(Method::GET), "/Systems/", Fault::Drop).times(1));
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    assert_eq!(proxy.hits(once), 1);
    // A BMC that always hangs up: Unreachable.
    proxy.add(Rule::new(Some(Method::GET), "/Systems/", Fault::Drop).times(100));
    let e = bmc.power_state().await.unwrap_err();
    assert!(matches!(e, BmcError::Unreachable { .. }), "{e}");
    proxy.clear();
    // One that answers too late: Timeout.
    proxy.add(Rule::new(
        Some(Method::GET),
        "/Systems/",
        Fault::Delay(Duration::from_secs(5)),
    ));
    let e = bmc.power_state().await.unwrap_err();
    assert!(matches!(e, BmcError::Timeout { .. }), "{e}");
    // Nothing listening at all.
    let port = common::free_port();
    let dead = sushy_bmc(
        &s,
        url::Url::parse(&format!("http://127.0.0.1:{port}")).unwrap(),
        timing,
    );
    let e = dead.power_state().await.unwrap_err();
    assert!(matches!(e, BmcError::Unreachable { .. }), "{e}");
}

/// A self-signed certificate for 127.0.0.1 (not a CA: a leaf trusted as is).
fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    let openssl = common::require_tool("openssl");
    let cert = dir.join("bmc.crt");
    let key = dir.join("bmc.key");
    let st = Command::new(openssl)
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-addext", "keyUsage=digitalSignature"])
        .args(["-addext", "extendedKeyUsage=serverAuth"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl");
    assert!(st.success(), "openssl req failed");
    (cert, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_self_signed_accepted_with_its_ca_bundle_and_refused_without() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let s = Sushy::start(SushyOptions {
        tls: Some((cert.clone(), key)),
        ..Default::default()
    });
    let pem = std::fs::read_to_string(&cert).unwrap();
    let creds = sushy_creds(&s);
    let addr = s.address(0);
    assert!(addr.starts_with("redfish+https://"));

    let b = connect_address(
        &addr,
        creds.clone(),
        &TlsMode::CaBundle(pem).into(),
        sushy_timing(),
    )
    .await
    .unwrap();
    assert_eq!(b.power_state().await.unwrap(), PowerState::Off);

    let b = connect_address(
        &addr,
        creds.clone(),
        &TlsMode::SystemRoots.into(),
        sushy_timing(),
    )
    .await
    .unwrap();
    let e = b.power_state().await.unwrap_err();
    assert!(matches!(e, BmcError::Tls { .. }), "{e}");
    assert!(!e.to_string().contains(creds.password()));

    // A different CA is refused as well.
    let other = tempfile::tempdir().unwrap();
    let (other_cert, _) = self_signed(other.path());
    let b = connect_address(
        &addr,
        creds.clone(),
        &TlsMode::CaBundle(std::fs::read_to_string(other_cert).unwrap()).into(),
        sushy_timing(),
    )
    .await
    .unwrap();
    assert!(matches!(b.power_state().await, Err(BmcError::Tls { .. })));

    // Insecure only when asked for explicitly.
    let b = connect_address(&addr, creds, &TlsMode::Insecure.into(), sushy_timing())
        .await
        .unwrap();
    assert_eq!(b.power_state().await.unwrap(), PowerState::Off);
}

fn sim_timing() -> Timing {
    Timing {
        power_deadline: Duration::from_secs(20),
        poll_interval: Duration::from_millis(50),
        request_timeout: Duration::from_secs(5),
    }
}

fn sim_bmc(srv: &RedfishServer, password: &str) -> RedfishBmc {
    RedfishBmc::with_retry(
        srv.base(),
        None,
        Credentials::new("root", password),
        &TlsMode::SystemRoots,
        sim_timing(),
        fast_retry(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_login_token_reuse_logout_and_relogin_after_expiry() {
    let opts = ServerOptions::default();
    let pw = opts.password.clone();
    let srv = RedfishServer::start(opts).await;
    let bmc = sim_bmc(&srv, &pw);
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    assert!(bmc.uses_session().await);
    let inv = bmc.inventory().await.unwrap();
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    let c = srv.counters();
    assert_eq!(c.logins, 1, "one login, the token reused");
    assert_eq!(c.basic_requests, 0);
    assert!(c.token_requests >= 6, "{c:?}");
    assert_eq!(inv.serial_number.as_deref(), Some("SIM0001"));
    assert_eq!(inv.firmware_version.as_deref(), Some("2.3.4"));
    assert_eq!(inv.memory_mib, Some(64 * 1024));
    assert_eq!(inv.nics.len(), 2);
    assert_eq!(inv.nics[0].mac, "aa:bb:cc:00:00:01");
    assert_eq!(inv.nics[0].link_up, Some(true));
    assert_eq!(inv.nics[1].link_up, Some(false));
    assert_eq!(inv.disks.len(), 1);
    assert_eq!(inv.disks[0].rotational, Some(false));

    // The BMC forgets the session: the driver logs in again, once.
    srv.expire_sessions();
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    let c = srv.counters();
    assert_eq!((c.logins, c.rejected_tokens), (2, 1));

    bmc.close().await.unwrap();
    assert_eq!(srv.counters().logouts, 1);
    assert_eq!(srv.live_sessions(), 0);
    bmc.close().await.unwrap();
    assert_eq!(srv.counters().logouts, 1, "close is idempotent");

    // A wrong password fails at login, as bad credentials.
    let bad = sim_bmc(&srv, "not-it-4c1b");
    let e = bad.power_state().await.unwrap_err();
    assert!(matches!(e, BmcError::BadCredentials { .. }), "{e}");
    assert!(!format!("{e} {e:?} {bad:?}").contains("not-it-4c1b"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_monitor_and_settings_object_with_if_match() {
    let opts = ServerOptions {
        task_polls: 3,
        ..Default::default()
    };
    let pw = opts.password.clone();
    let srv = RedfishServer::start(opts).await;
    let bmc = sim_bmc(&srv, &pw);

    // ResetType from ActionInfo (PowerCycle offered); Reset is a task.
    bmc.power(PowerAction::On).await.unwrap();
    assert_eq!(srv.power(), "On");
    let c = srv.counters();
    assert_eq!(c.resets, 1);
    assert_eq!(c.monitor_polls, 4, "3 running answers, then completed");
    bmc.power(PowerAction::Cycle).await.unwrap();
    bmc.power(PowerAction::GracefulOff).await.unwrap();
    assert_eq!(srv.power(), "Off");

    // A failing task is a typed error.
    srv.sim.lock().unwrap().fail_next_task = true;
    let e = bmc.power(PowerAction::On).await.unwrap_err();
    match &e {
        BmcError::TaskFailed { state, detail, .. } => {
            assert_eq!(state, "Exception");
            assert!(detail.contains("power supply fault"));
        }
        other => panic!("expected TaskFailed, got {other}"),
    }

    // Boot goes to the settings object; it demands If-Match (428 first).
    bmc.set_boot_once(BootDevice::Network, FirmwareMode::Uefi)
        .await
        .unwrap();
    let c = srv.counters();
    assert_eq!(
        (c.patches_without_if_match, c.patches_with_if_match),
        (1, 1)
    );
    let boot = srv.sim.lock().unwrap().boot.clone();
    assert_eq!(boot, ("Pxe".into(), "Once".into(), "UEFI".into()));
    bmc.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_driver_still_logs_out() {
    let opts = ServerOptions::default();
    let pw = opts.password.clone();
    let srv = RedfishServer::start(opts).await;
    let bmc = sim_bmc(&srv, &pw);
    bmc.power_state().await.unwrap();
    assert_eq!(srv.live_sessions(), 1);
    drop(bmc);
    let gone = tokio::time::timeout(Duration::from_secs(10), async {
        while srv.live_sessions() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "session left open");
    assert_eq!(srv.counters().logouts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bmc_that_refuses_sessions_gets_basic_auth() {
    let opts = ServerOptions {
        sessions: false,
        allow_basic: true,
        ..Default::default()
    };
    let pw = opts.password.clone();
    let srv = RedfishServer::start(opts).await;
    let bmc = sim_bmc(&srv, &pw);
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    assert!(!bmc.uses_session().await);
    let c = srv.counters();
    assert_eq!((c.logins, c.token_requests), (0, 0));
    assert!(c.basic_requests >= 2, "{c:?}");
    bmc.close().await.unwrap();
    // Wrong password over Basic: bad credentials too.
    let bad = sim_bmc(&srv, "nope-basic-77");
    let e = bad.power_state().await.unwrap_err();
    assert!(matches!(e, BmcError::BadCredentials { .. }), "{e}");
}
