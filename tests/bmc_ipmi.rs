//! Story: a technician racks a server whose BMC speaks only IPMI. metalherd
//! opens an RMCP+ session (cipher suite 3 or 17), reads power state and
//! inventory, powers it on and off with each action verified by polling,
//! and sets a one-time network boot that it reads back. Checked against
//! two real BMC emulators (OpenIPMI's ipmi_sim and pyghmi's fake BMC),
//! with ipmitool run against the same emulator as the reference.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::ipmi_emulators::{
    Faults, IpmiSim, PASSWORD, PyghmiBmc, USER, UdpProxy, ipmitool, ipmitool_boot_flags,
    ipmitool_power,
};
use metalherd::bmc::ipmi::{CipherSuite, IpmiBmc, metrics};
use metalherd::bmc::{
    Bmc, BmcError, BootDevice, Credentials, FirmwareMode, PowerAction, PowerState, Timing,
};

fn timing() -> Timing {
    Timing {
        power_deadline: Duration::from_secs(10),
        poll_interval: Duration::from_millis(100),
        request_timeout: Duration::from_secs(4),
    }
}

fn creds(password: &str) -> Credentials {
    Credentials::new(USER, password)
}

async fn connect(port: u16, suite: CipherSuite) -> IpmiBmc {
    IpmiBmc::connect("127.0.0.1", port, creds(PASSWORD), suite, timing())
        .await
        .unwrap_or_else(|e| panic!("connect suite {suite:?}: {e}"))
}

fn suite_id(s: CipherSuite) -> u8 {
    s.id()
}

/// Every power action, each verified by the driver and then by ipmitool.
async fn power_cycle_story(bmc: &IpmiBmc, port: u16, suite: CipherSuite) {
    let c = suite_id(suite);
    assert_eq!(
        bmc.power_state().await.expect("power state"),
        PowerState::Off
    );
    assert_eq!(ipmitool_power(port, c), "off");

    bmc.power(PowerAction::On).await.expect("power on");
    assert_eq!(ipmitool_power(port, c), "on");
    bmc.power(PowerAction::Reset).await.expect("reset");
    assert_eq!(ipmitool_power(port, c), "on");
    bmc.power(PowerAction::Cycle).await.expect("cycle");
    assert_eq!(ipmitool_power(port, c), "on");
    bmc.power(PowerAction::GracefulOff)
        .await
        .expect("graceful off");
    assert_eq!(ipmitool_power(port, c), "off");
    // A cycle of a server that is off powers it on.
    bmc.power(PowerAction::Cycle).await.expect("cycle from off");
    assert_eq!(ipmitool_power(port, c), "on");
    bmc.power(PowerAction::ForceOff).await.expect("force off");
    assert_eq!(ipmitool_power(port, c), "off");
    assert_eq!(
        bmc.power_state().await.expect("power state"),
        PowerState::Off
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmi_sim_suite3_power_boot_inventory_match_ipmitool() {
    let sim = IpmiSim::start();
    let bmc = connect(sim.port, CipherSuite::Suite3).await;
    power_cycle_story(&bmc, sim.port, CipherSuite::Suite3).await;

    // One-time PXE in UEFI mode. ipmi_sim keeps only the device and reads
    // back 0004000000 (no valid or EFI bit), for ipmitool's own
    // `bootdev pxe options=efiboot` as for ours.
    bmc.set_boot_once(BootDevice::Network, FirmwareMode::Uefi)
        .await
        .expect("boot once pxe");
    let ours = bmc.boot_flags().await.expect("read back").hex();
    assert_eq!(ours, ipmitool_boot_flags(sim.port, 3));
    assert_eq!(ours, "0004000000");
    bmc.set_boot_once(BootDevice::Disk, FirmwareMode::Legacy)
        .await
        .expect("boot once disk");
    assert_eq!(ipmitool_boot_flags(sim.port, 3), "0008000000");
    let (ok, out) = ipmitool(
        sim.port,
        3,
        PASSWORD,
        &["chassis", "bootdev", "pxe", "options=efiboot"],
    );
    assert!(ok, "{out}");
    assert_eq!(
        bmc.boot_flags().await.expect("read back").hex(),
        "0004000000"
    );
    assert!(
        sim.chassis_log().contains("set boot pxe"),
        "{}",
        sim.chassis_log()
    );

    // Inventory from Get Device ID and FRU 0, as ipmitool prints them.
    let inv = bmc.inventory().await.expect("inventory");
    let (ok, fru) = ipmitool(sim.port, 3, PASSWORD, &["fru", "print", "0"]);
    assert!(ok, "{fru}");
    let (ok, mc) = ipmitool(sim.port, 3, PASSWORD, &["mc", "info"]);
    assert!(ok, "{mc}");
    let field = |text: &str, name: &str| -> String {
        text.lines()
            .find(|l| l.trim_start().starts_with(name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    assert_eq!(
        inv.manufacturer.as_deref(),
        Some(field(&fru, "Product Manufacturer").as_str())
    );
    assert_eq!(
        inv.model.as_deref(),
        Some(field(&fru, "Product Name").as_str())
    );
    assert_eq!(
        inv.serial_number.as_deref(),
        Some(field(&fru, "Product Serial").as_str())
    );
    assert_eq!(
        inv.firmware_version.as_deref(),
        Some(field(&mc, "Firmware Revision").as_str())
    );
    assert_eq!(inv.model.as_deref(), Some("MH-1000"));
    bmc.close().await.expect("close");
    bmc.close().await.expect("close is idempotent");
}

/// pyghmi's BMC with suites 3 and 17 (its SHA-256 path first proven with
/// ipmitool -C 17): power actions, legacy PXE read back as ipmitool reads
/// it, and a UEFI request whose EFI flag pyghmi drops (for ipmitool's
/// `options=efiboot` as well) reported as BootOverrideIgnored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyghmi_suites_3_and_17_power_boot_inventory_match_ipmitool() {
    let bmc_emu = PyghmiBmc::start(true);
    let port = bmc_emu.port;
    for suite in [CipherSuite::Suite17, CipherSuite::Suite3] {
        let c = suite.id();
        let (ok, out) = ipmitool(port, c, PASSWORD, &["mc", "info"]);
        assert!(ok, "ipmitool -C {c} against pyghmi: {out}");

        let bmc = connect(port, suite).await;
        power_cycle_story(&bmc, port, suite).await;

        bmc.set_boot_once(BootDevice::Network, FirmwareMode::Legacy)
            .await
            .expect("legacy pxe once");
        assert_eq!(ipmitool_boot_flags(port, c), "8004000000");
        assert_eq!(
            bmc.boot_flags().await.expect("read back").hex(),
            "8004000000"
        );

        let err = bmc
            .set_boot_once(BootDevice::Network, FirmwareMode::Uefi)
            .await
            .expect_err("pyghmi drops the EFI flag");
        match err {
            BmcError::BootOverrideIgnored { wanted, got, .. } => {
                assert_eq!(wanted, "a004000000");
                assert_eq!(got, "8004000000");
            }
            other => panic!("expected BootOverrideIgnored, got {other}"),
        }
        let (ok, out) = ipmitool(
            port,
            c,
            PASSWORD,
            &["chassis", "bootdev", "pxe", "options=efiboot"],
        );
        assert!(ok, "{out}");
        assert_eq!(
            ipmitool_boot_flags(port, c),
            "8004000000",
            "ipmitool sees the same"
        );

        bmc.set_boot_once(BootDevice::Disk, FirmwareMode::Legacy)
            .await
            .expect("disk once");
        assert_eq!(ipmitool_boot_flags(port, c), "8008000000");

        let inv = bmc.inventory().await.expect("inventory");
        let (ok, guid) = ipmitool(port, c, PASSWORD, &["mc", "guid"]);
        assert!(ok, "{guid}");
        let uuid = inv.uuid.clone().expect("system GUID");
        assert!(guid.contains(&uuid), "ipmitool mc guid {guid} vs {uuid}");
        assert_eq!(inv.manufacturer.as_deref(), Some("Dell"));
        assert_eq!(inv.firmware_version.as_deref(), Some("2.15"));
        bmc.close().await.expect("close");
    }
}

async fn expect_bad_credentials(port: u16, suite: CipherSuite) {
    let err = IpmiBmc::connect(
        "127.0.0.1",
        port,
        creds("not-the-password"),
        suite,
        timing(),
    )
    .await
    .expect_err("wrong password must fail");
    assert!(
        matches!(err, BmcError::BadCredentials { .. }),
        "suite {suite:?}: expected BadCredentials, got {err}"
    );
    assert!(!err.to_string().contains("not-the-password"));
    let (ok, out) = ipmitool(port, suite.id(), "not-the-password", &["power", "status"]);
    assert!(!ok, "ipmitool with a wrong password succeeded: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_bad_credentials_on_both_emulators() {
    let sim = IpmiSim::start();
    expect_bad_credentials(sim.port, CipherSuite::Suite3).await;
    // ipmi_sim also refuses an unknown user name (RAKP 2 status 0x0d).
    let err = IpmiBmc::connect(
        "127.0.0.1",
        sim.port,
        Credentials::new("nobody", PASSWORD),
        CipherSuite::Suite3,
        timing(),
    )
    .await
    .expect_err("unknown user");
    assert!(matches!(err, BmcError::BadCredentials { .. }), "got {err}");
    let pyg = PyghmiBmc::start(true);
    expect_bad_credentials(pyg.port, CipherSuite::Suite3).await;
    expect_bad_credentials(pyg.port, CipherSuite::Suite17).await;
}

/// ipmi_sim has no SHA-256: ipmitool -C 17 fails against it, and so do we,
/// with a typed "unsupported" error rather than a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmi_sim_refuses_suite17_with_a_typed_error() {
    let sim = IpmiSim::start();
    let (ok, out) = ipmitool(sim.port, 17, PASSWORD, &["power", "status"]);
    assert!(!ok, "ipmi_sim accepted suite 17: {out}");
    let err = IpmiBmc::connect(
        "127.0.0.1",
        sim.port,
        creds(PASSWORD),
        CipherSuite::Suite17,
        timing(),
    )
    .await
    .expect_err("suite 17 against ipmi_sim");
    assert!(matches!(err, BmcError::Unsupported { .. }), "got {err}");

    // connect_best tries 17 and falls back to 3 on a refusal.
    let bmc = IpmiBmc::connect_best("127.0.0.1", sim.port, creds(PASSWORD), timing())
        .await
        .expect("connect_best");
    assert_eq!(bmc.suite().await, Some(CipherSuite::Suite3));
    assert_eq!(bmc.power_state().await.expect("power"), PowerState::Off);
    bmc.close().await.expect("close");
}

/// Stock pyghmi answers a suite 17 request with suite 3's algorithms: a
/// downgrade we refuse (typed), and connect_best then uses 3. With the
/// suite 17 switch, connect_best gets 17.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_negotiation_against_stock_and_suite17_pyghmi() {
    let stock = PyghmiBmc::start(false);
    let err = IpmiBmc::connect(
        "127.0.0.1",
        stock.port,
        creds(PASSWORD),
        CipherSuite::Suite17,
        timing(),
    )
    .await
    .expect_err("stock pyghmi has no suite 17");
    assert!(matches!(err, BmcError::Unsupported { .. }), "got {err}");
    let (ok, out) = ipmitool(stock.port, 17, PASSWORD, &["power", "status"]);
    assert!(!ok, "ipmitool -C 17 against stock pyghmi: {out}");
    let bmc = IpmiBmc::connect_best("127.0.0.1", stock.port, creds(PASSWORD), timing())
        .await
        .expect("connect_best");
    assert_eq!(bmc.suite().await, Some(CipherSuite::Suite3));
    bmc.close().await.expect("close");

    let s17 = PyghmiBmc::start(true);
    let bmc = IpmiBmc::connect_best("127.0.0.1", s17.port, creds(PASSWORD), timing())
        .await
        .expect("connect_best");
    assert_eq!(bmc.suite().await, Some(CipherSuite::Suite17));
    assert_eq!(bmc.power_state().await.expect("power"), PowerState::Off);
    drop(bmc); // closes its session in the background

    // The connector's way: a driver built without I/O connects (and
    // negotiates) on first use.
    let lazy = IpmiBmc::new("127.0.0.1", s17.port, creds(PASSWORD), None, timing());
    assert_eq!(lazy.suite().await, None);
    assert_eq!(lazy.power_state().await.expect("power"), PowerState::Off);
    assert_eq!(lazy.suite().await, Some(CipherSuite::Suite17));
    lazy.close().await.expect("close");
    let wrong = IpmiBmc::new("127.0.0.1", s17.port, creds("nope"), None, timing());
    let err = wrong.power_state().await.expect_err("wrong password");
    assert!(matches!(err, BmcError::BadCredentials { .. }), "got {err}");
}

/// A BMC that acknowledges and does nothing: the read-back and the power
/// poll catch it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignored_boot_override_and_stuck_power_are_caught() {
    let sim = IpmiSim::start();
    let bmc = connect(sim.port, CipherSuite::Suite3).await;
    sim.fault("ignore-boot", true);
    let err = bmc
        .set_boot_once(BootDevice::Network, FirmwareMode::Uefi)
        .await
        .expect_err("ignored override");
    assert!(
        matches!(err, BmcError::BootOverrideIgnored { .. }),
        "got {err}"
    );

    sim.fault("stuck-power", true);
    let short = Timing {
        power_deadline: Duration::from_millis(800),
        ..timing()
    };
    let stuck = IpmiBmc::connect(
        "127.0.0.1",
        sim.port,
        creds(PASSWORD),
        CipherSuite::Suite3,
        short,
    )
    .await
    .expect("connect");
    let err = stuck.power(PowerAction::On).await.expect_err("stuck power");
    match err {
        BmcError::PowerStateNotReached { wanted, last, .. } => {
            assert_eq!(wanted, PowerState::On);
            assert_eq!(last, PowerState::Off);
        }
        other => panic!("expected PowerStateNotReached, got {other}"),
    }
    assert_eq!(ipmitool_power(sim.port, 3), "off");
    sim.fault("stuck-power", false);
    stuck
        .power(PowerAction::On)
        .await
        .expect("power on once unstuck");
    stuck.close().await.expect("close");
    bmc.close().await.expect("close");
}

/// Duplicated, truncated and corrupted replies, and lost ones, between the
/// driver and a real BMC: every bad datagram is dropped and counted, lost
/// replies are retransmitted, and the answers stay right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbled_duplicated_and_lost_replies_are_survived() {
    let pyg = PyghmiBmc::start(true);
    for suite in [CipherSuite::Suite3, CipherSuite::Suite17] {
        let proxy = UdpProxy::start(
            pyg.port,
            Faults {
                duplicate: true,
                garble: true,
                drop_every: 0,
            },
        );
        let replays = metrics::dropped_count("replay");
        let bmc = connect(proxy.port, suite).await;
        for _ in 0..5 {
            assert_eq!(
                bmc.power_state().await.expect("power state"),
                PowerState::Off
            );
        }
        bmc.power(PowerAction::On)
            .await
            .expect("on through a noisy link");
        bmc.power(PowerAction::ForceOff)
            .await
            .expect("off through a noisy link");
        bmc.close().await.expect("close");
        assert!(
            metrics::dropped_count("replay") > replays,
            "duplicates were seen as replays"
        );
        assert!(
            metrics::dropped_count("integrity") > 0 || metrics::dropped_count("truncated") > 0,
            "garbled copies were counted"
        );
        drop(proxy);

        let retransmits = metrics::retransmit_count();
        let lossy = UdpProxy::start(
            pyg.port,
            Faults {
                drop_every: 3,
                ..Faults::default()
            },
        );
        let slow = Timing {
            request_timeout: Duration::from_secs(2),
            ..timing()
        };
        let bmc = IpmiBmc::connect("127.0.0.1", lossy.port, creds(PASSWORD), suite, slow)
            .await
            .expect("connect through a lossy link");
        for _ in 0..6 {
            assert_eq!(
                bmc.power_state().await.expect("power state"),
                PowerState::Off
            );
        }
        assert!(
            metrics::retransmit_count() > retransmits,
            "lost replies were retransmitted"
        );
        assert!(lossy.replies.load(std::sync::atomic::Ordering::Relaxed) >= 9);
        bmc.close().await.expect("close");
    }
}
