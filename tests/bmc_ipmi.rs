//! Story: a technician racks a server whose BMC speaks only IPMI. metalherd
//! opens an RMCP+ session (cipher suite 3 or 17), reads power state and
//! inventory, powers it on and off with each action verified by polling,
//! and sets a one-time network boot that it reads back. Checked against
//! two real BMC emulators (OpenIPMI's ipmi_sim and pyghmi's fake BMC),
//! with ipmitool run against the same emulator as the reference.

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
    assert_eq!(bmc.power_state().await.expect("power state"), PowerState::Off);
    assert_eq!(ipmitool_power(port, c), "off");

    bmc.power(PowerAction::On).await.expect("power on");
    assert_eq!(ipmitool_power(port, c), "on");
    bmc.power(PowerAction::Reset).await.expect("reset");
    assert_eq!(ipmitool_power(port, c), "on");
    bmc.power(PowerAction::Cycle).await.expect("cycle");
    assert_eq!(ipmitool_power(port, c), "on");
    bmc.power(PowerAction::GracefulOff).await.expect("graceful off");
    assert_eq!(ipmitool_power(port, c), "off");
    // A cycle of a server that is off powers it on.
    bmc.power(PowerAction::Cycle).await.expect("cycle from off");
    assert_eq!(ipmitool_power(port, c), "on");
    bmc.power(PowerAction::ForceOff).await.expect("force off");
    assert_eq!(ipmitool_power(port, c), "off");
    assert_eq!(bmc.power_state().await.expect("power state"), PowerState::Off);
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
    let (ok, out) = ipmitool(sim.port, 3, PASSWORD, &["chassis", "bootdev", "pxe", "options=efiboot"]);
    assert!(ok, "{out}");
    assert_eq!(bmc.boot_flags().await.expect("read back").hex(), "0004000000");
    assert!(sim.chassis_log().contains("set boot pxe"), "{}", sim.chassis_log());

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
    assert_eq!(inv.manufacturer.as_deref(), Some(field(&fru, "Product Manufacturer").as_str()));
    assert_eq!(inv.model.as_deref(), Some(field(&fru, "Product Name").as_str()));
    assert_eq!(inv.serial_number.as_deref(), Some(field(&fru, "Product Serial").as_str()));
    assert_eq!(inv.firmware_version.as_deref(), Some(field(&mc, "Firmware Revision").as_str()));
    assert_eq!(inv.model.as_deref(), Some("MH-1000"));
    bmc.close().await.expect("close");
    bmc.close().await.expect("close is idempotent");
}
