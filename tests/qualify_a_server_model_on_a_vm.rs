//! Story: "qualify one server of a new model before racking a fleet of
//! them", the half that needs a server that really boots: `metalherd
//! hw-test --interface` against a UEFI QEMU VM of the virtual rack, run
//! inside the rack's namespace on its bridge, where metalherd's proxy DHCP
//! watches the VM's firmware PXE-boot after the one-time PXE override and
//! checks the next power cycle does not PXE-boot again. Two real BMCs of
//! the same VM: sushy-tools' libvirt driver (Redfish) and virtualbmc
//! (IPMI), and a lying BMC: the fault proxy in front of sushy-tools reads
//! the override back as `Once`. None makes the override one-time (they
//! rewrite the domain's boot order for good): hw-test must see the second
//! PXE boot, say how the BMC's read-back compares with what happened, and
//! name a BMC that reports Once but PXE-boots twice.
//!
//! Then the consequence, both ways, with a BMC no built-in quirk entry
//! knows (sushy-tools disguised as "Acme" by the fault proxy; it reads the
//! one-time override back as `Continuous`): hw-test names it and proposes
//! the quirk entry; without that entry the Machine controller refuses to
//! power the VM on and ends in Error, saying what the BMC read back and
//! what to do; with the entry hw-test proposed in the config file the same
//! Machine provisions to Ready, and `describe machine` shows the entry.
//! Runs QEMU: take /tmp/metalherd-lab.lock around `cargo test`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::bmc_proxy::{Fault, Rule};
use common::lab::{LAB_LOCK, Lab, boot_steps, mac};
use common::ns_proxy::NsProxy;
use common::vbmc::{self, Vbmc};
use serde_json::Value;

/// `metalherd hw-test` inside the rack's namespace with power actions,
/// watching its bridge for the VM's PXE boots unless `pxe` is false.
fn hw_test(
    lab: &Lab,
    address: &str,
    user: &str,
    password: &str,
    pxe: bool,
    extra: &[&str],
) -> (Value, String) {
    let pw = lab.run.join("hw-test-password");
    std::fs::write(&pw, format!("{password}\n")).unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", &lab.ns])
        .arg(common::metalherd_bin())
        .args(["hw-test", "--address", address, "--username", user])
        .arg("--password-file")
        .arg(&pw)
        .arg("--allow-power-actions")
        .args([
            "-o",
            "json",
            "--settle-window",
            "3",
            "--power-timeout",
            "120",
        ])
        .args(if pxe {
            &["--interface", "br0", "--pxe-timeout", "300"][..]
        } else {
            &[]
        })
        .args(extra)
        .env_remove("METALHERD_CONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "report is not JSON ({e}):\n{stdout}\nstderr:\n{stderr}\nconsole:\n{}",
            lab.console(1)
        )
    });
    eprintln!("{stderr}");
    (report, stderr)
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

fn detail(report: &Value, name: &str) -> String {
    check(report, name)["detail"].as_str().unwrap().to_string()
}

#[test]
fn a_vm_pxe_boots_once_per_override_and_hw_test_sees_whether_it_does_again() {
    let _guard = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // One VM, nothing declared: metalherd serve on the bridge answers it
    // nothing (an unknown client, discovery off), as a site's DHCP server
    // that does not PXE-boot unknown servers would.
    let mut lab = Lab::up(1);
    let vm_mac = mac(1);

    // Redfish: sushy-tools' libvirt driver. The boot MAC comes from the
    // inventory's NICs.
    let address = format!(
        "redfish+http://127.0.0.1:8000/redfish/v1/Systems/{}",
        lab.uuids[0]
    );
    // bios-applied writes the attribute named here.
    let (report, stderr) = hw_test(
        &lab,
        &address,
        "admin",
        "password",
        true,
        &["--bios-attribute", "ProcTurboMode=Disabled"],
    );
    assert_eq!(status(&report, "pxe-boot"), "pass", "{report:#}\n{stderr}");
    // The libvirt driver keeps BIOS attributes (in the domain's metadata).
    assert_eq!(status(&report, "bios"), "pass", "{report:#}");
    assert!(
        detail(&report, "bios").contains("attributes readable"),
        "{report:#}"
    );
    // With power actions: the named attribute written, applied at the power
    // cycle (sushy-tools applies at once), read back, and restored.
    assert_eq!(status(&report, "bios-applied"), "pass", "{report:#}");
    let flipped = detail(&report, "bios-applied");
    assert!(
        flipped.contains("ProcTurboMode: Enabled -> Disabled applied at the power cycle"),
        "{flipped}"
    );
    assert!(
        lab.bmc_calls("PATCH", "BIOS/Settings") > 0,
        "no BIOS settings written through the emulator"
    );
    let first = detail(&report, "pxe-boot");
    assert!(first.contains(&vm_mac), "{first}");
    assert!(
        first.contains("PXEClient"),
        "the firmware's vendor class: {first}"
    );
    assert!(
        check(&report, "pxe-boot")["seconds"].as_f64().is_some(),
        "{report:#}"
    );
    // sushy-tools reads the override back as Continuous, and it is: the
    // VM PXE-boots again after the cycle; the built-in entry covers it.
    assert_eq!(status(&report, "pxe-once"), "quirk", "{report:#}");
    let second = detail(&report, "pxe-once");
    assert!(second.contains("PXE-booted again"), "{second}");
    assert!(second.contains("as reported"), "{second}");
    let findings = report["findings"].as_array().unwrap();
    assert!(
        findings.iter().any(|f| f["quirk"] == "onceKeptAsContinuous"
            && f["evidence"].as_str().unwrap().contains("PXE-booted twice")
            && f["coveredBy"] == "sushy-tools"),
        "{report:#}"
    );
    assert_eq!(report["qualified"], true, "{report:#}");
    assert!(stderr.contains("pxe-once"), "progress on screen: {stderr}");

    // A lying Redfish BMC on the same VM: the fault proxy (in the rack's
    // namespace, in front of sushy-tools) reads every override back as
    // `Once` and disguises sushy-tools as a vendor no built-in entry
    // knows; the VM still PXE-boots on every start.
    let proxy = NsProxy::start(
        &lab.ns,
        url::Url::parse("http://127.0.0.1:8000").unwrap(),
        vec![Rule::new(
            Some(reqwest::Method::GET),
            "/redfish/v1",
            Fault::Rewrite(vec![
                ("Sushy".into(), "Acme".into()),
                ("sushy".into(), "acme".into()),
                ("\"Continuous\"".into(), "\"Once\"".into()),
            ]),
        )],
    );
    let address = format!(
        "redfish+http://127.0.0.1:{}/redfish/v1/Systems/{}",
        proxy.port, lab.uuids[0]
    );
    let (report, stderr) = hw_test(&lab, &address, "admin", "password", true, &[]);
    assert_eq!(
        status(&report, "boot-override"),
        "pass",
        "{report:#}\n{stderr}"
    );
    assert_eq!(status(&report, "pxe-boot"), "pass", "{report:#}");
    assert_eq!(status(&report, "pxe-once"), "quirk", "{report:#}");
    let second = detail(&report, "pxe-once");
    assert!(
        second.contains("reports Once") && second.contains("PXE-boots twice"),
        "{second}"
    );
    assert!(
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["quirk"] == "onceKeptAsContinuous"
                && f["evidence"].as_str().unwrap().contains("Acme")
                && f["coveredBy"].is_null()),
        "the BMC is named: {report:#}"
    );
    assert_eq!(
        report["proposedQuirk"]["onceKeptAsContinuous"], true,
        "{report:#}"
    );
    assert_eq!(
        report["proposedQuirk"]["match"]["vendor"], "Acme",
        "{report:#}"
    );
    drop(proxy);

    // IPMI: virtualbmc on the same VM. IPMI has no NIC inventory: the boot
    // MAC is given.
    let bmc = Vbmc::start(&lab, 1);
    let (report, stderr) = hw_test(
        &lab,
        &bmc.address(),
        vbmc::USER,
        vbmc::PASSWORD,
        true,
        &["--boot-mac", &vm_mac],
    );
    assert_eq!(report["protocol"], "ipmi");
    assert_eq!(
        status(&report, "login-suite-3"),
        "pass",
        "{report:#}\n{stderr}\n{}",
        bmc.log()
    );
    assert_eq!(status(&report, "pxe-boot"), "pass", "{report:#}\n{stderr}");
    assert!(detail(&report, "pxe-boot").contains(&vm_mac));
    // virtualbmc reads back a one-time (not persistent) PXE override that
    // is still set after the boot, and the VM PXE-boots again. It has no
    // chassis power cycle: the second boot is an off and an on.
    assert_eq!(
        status(&report, "override-after-boot"),
        "quirk",
        "{report:#}"
    );
    assert_eq!(status(&report, "power-cycle"), "fail", "{report:#}");
    assert_eq!(status(&report, "pxe-once"), "quirk", "{report:#}");
    let second = detail(&report, "pxe-once");
    assert!(second.contains("PXE-booted again"), "{second}");
    // Its read-back is a one-time override, still set after the boot.
    assert!(second.contains("reports Once"), "{second}");
    assert!(
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["quirk"] == "onceKeptAsContinuous"
                && f["evidence"].as_str().unwrap().contains("PXE-booted twice")
                && f["coveredBy"].is_null()),
        "{report:#}"
    );
    assert_eq!(
        report["proposedQuirk"]["onceKeptAsContinuous"], true,
        "{report:#}"
    );
    assert_eq!(report["proposedQuirk"]["protocol"], "ipmi", "{report:#}");
    drop(bmc);

    the_proposed_quirk_decides_whether_the_machine_provisions(&mut lab);
}

/// A BMC no built-in entry knows that keeps the one-time override as
/// `Continuous`: hw-test proposes the entry; without it the Machine ends
/// in Error before any power-on, with it (taken from hw-test's report) the
/// same Machine provisions to Ready.
fn the_proposed_quirk_decides_whether_the_machine_provisions(lab: &mut Lab) {
    // sushy-tools as "Acme": what it reads back is the truth (Continuous),
    // only the vendor is unknown. One proxy for hw-test and metalherd.
    let proxy = NsProxy::start(
        &lab.ns,
        url::Url::parse("http://127.0.0.1:8000").unwrap(),
        vec![Rule::new(
            Some(reqwest::Method::GET),
            "/redfish/v1",
            Fault::Rewrite(vec![
                ("Sushy".into(), "Acme".into()),
                ("sushy".into(), "acme".into()),
            ]),
        )],
    );
    let address = format!(
        "redfish+http://127.0.0.1:{}/redfish/v1/Systems/{}",
        proxy.port, lab.uuids[0]
    );
    // The read-back is enough to name it: no PXE watching this time.
    let (report, stderr) = hw_test(lab, &address, "admin", "password", false, &[]);
    assert_eq!(
        status(&report, "boot-override"),
        "quirk",
        "{report:#}\n{stderr}"
    );
    assert!(
        detail(&report, "boot-override").contains("Continuous"),
        "{report:#}"
    );
    assert!(
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["quirk"] == "onceKeptAsContinuous" && f["coveredBy"].is_null()),
        "{report:#}"
    );
    let proposed = report["proposedQuirk"].clone();
    assert_eq!(proposed["onceKeptAsContinuous"], true, "{report:#}");
    assert_eq!(proposed["match"]["vendor"], "Acme", "{report:#}");
    let entry = proposed["name"].as_str().unwrap().to_string();

    // Without the entry. Short retry pacing: three refused boots in a row
    // make the Error.
    lab.merge_config("controller: {retryBaseSeconds: 5, bmcRetrySeconds: 5}");
    lab.kill_metalherd();
    lab.start_metalherd();
    let before = proxy.seen.bodies().len();
    lab.declare(&[("LAB_BMC_PORT", &proxy.port.to_string())]);
    let mut seen = Vec::new();
    lab.wait_phase("vm1", "Error", Duration::from_secs(600), &mut seen);
    let m = lab.machine("vm1").unwrap();
    let err = &m["status"]["lastError"];
    assert_eq!(err["reason"], "BmcBootOverrideIgnored", "{m:#}");
    let message = err["message"].as_str().unwrap();
    eprintln!("vm1's last error without the quirk entry: {message}");
    for want in [
        "accepted boot override Pxe/Once",
        "reads back Pxe/Continuous",
        "metalherd hw-test",
        "`bmc.quirks:`",
        "onceKeptAsContinuous: true",
    ] {
        assert!(message.contains(want), "{want:?} missing: {message}");
    }
    // The override was refused before any power-on: the VM stayed off and
    // never network-booted for the Machine.
    let bodies = proxy.seen.bodies();
    let ons: Vec<_> = bodies[before..]
        .iter()
        .filter(|(_, path, body)| path.contains("Reset") && body.contains("\"On\""))
        .collect();
    assert!(ons.is_empty(), "power-on sent: {ons:?}");
    assert!(
        bodies[before..]
            .iter()
            .any(|(method, _, body)| method == "PATCH" && body.contains("Once")),
        "the override was asked for: {bodies:?}"
    );
    assert!(!lab.vm_running(1));
    assert!(boot_steps(&m).is_empty(), "{m:#}");
    let d = lab.cli_ok(&["describe", "machine", "vm1"]);
    assert!(
        d.contains("BMC Quirks:   none (standard path)") && d.contains("BmcBootOverrideIgnored"),
        "{d}"
    );

    // With the entry hw-test proposed, from the config file: the same
    // Machine, retried from Error, provisions.
    lab.merge_config(&serde_json::json!({ "bmc": { "quirks": [proposed] } }).to_string());
    lab.kill_metalherd();
    lab.start_metalherd();
    lab.wait_phase("vm1", "Ready", Duration::from_secs(900), &mut seen);
    let m = lab.machine("vm1").unwrap();
    assert!(m["status"]["lastError"].is_null(), "{m:#}");
    let steps = boot_steps(&m);
    for want in ["DHCPAck", "Kernel", "Installed", "Booted"] {
        assert!(steps.iter().any(|s| s == want), "{want} in {steps:?}");
    }
    let console = lab.console(1);
    assert!(
        console.contains("installer: called home installed")
            && console.contains("node: called home booted"),
        "{console}"
    );
    let d = lab.cli_ok(&["describe", "machine", "vm1"]);
    assert!(d.contains(&format!("BMC Quirks:   {entry}")), "{d}");
}
