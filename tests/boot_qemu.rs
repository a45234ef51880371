//! Story: a server network-boots and installs. Real PXE firmware under QEMU
//! (software emulation) boots against metalherd in a network namespace:
//! - legacy BIOS: SeaBIOS + QEMU's NIC ROM (iPXE): DHCP -> HTTP script ->
//!   kernel + initrd;
//! - UEFI: OVMF firmware DHCP -> TFTP ipxe.efi -> iPXE DHCP -> HTTP script
//!   -> kernel + initrd;
//! - UEFI HTTP boot: OVMF's own HTTP boot (its PXE turned off, no TFTP
//!   server at all): DHCP as `HTTPClient` -> HTTP ipxe.efi from the URL in
//!   the answer -> iPXE as above.
//!
//! The test OS fetches its Ignition config with the per-boot token, calls
//! home `installed` and prints a marker. The test asserts the marker, the
//! call-home (the boot is closed with outcome `installed`) and every step
//! in the Machine's boot history. Each firmware boots twice, without and
//! with metalherd's minimal IPv6 router advertisement; the time from power
//! on to the Ignition fetch is printed (not asserted).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::bootlab;
use common::initramfs::{self, INSTALL_DONE};
use common::proc::ChildGuard;
use common::qemu::{self, BridgeLab, Firmware};
use metalherd::api::Machine;
use metalherd::store::embedded::EmbeddedStore;
use metalherd::store::{Store, TypedStore};

const SERVER_IP: &str = "10.77.0.1";
const MACHINE_IP: &str = "10.77.0.50";

struct Outcome {
    to_ignition: Duration,
    steps: Vec<String>,
    /// Boot HTTP served `/assets/ipxe.efi` (what UEFI HTTP boot fetches).
    http_boot_fetch: bool,
}

/// Who hands out addresses on the boot network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dhcp {
    /// metalherd's DHCP server, authoritative.
    Metalherd,
    /// A site DHCP server (dnsmasq, addresses only, on another host of the
    /// bridge) and metalherd in proxyDHCP mode beside it.
    ProxyBesideDnsmasq,
}

async fn boot_once(
    fw: Firmware,
    ra: bool,
    dhcp: Dhcp,
    mac: &str,
    os: &initramfs::TestOs,
) -> Outcome {
    // Kept for post-mortems when the test fails; removed when it passes.
    let work = tempfile::Builder::new()
        .prefix("mh-qemu")
        .tempdir()
        .unwrap()
        .keep();
    let lab = BridgeLab::new(&format!("{SERVER_IP}/24"));
    let data = work.join("data");
    std::fs::create_dir_all(&data).unwrap();

    // Objects as the controller leaves them right before powering on.
    {
        let store: Arc<dyn Store> =
            Arc::new(EmbeddedStore::open(&data.join(metalherd::datadir::STORE_FILE)).unwrap());
        let mut class = bootlab::class(
            "lab",
            bootlab::file_artifact(&os.kernel),
            bootlab::file_artifact(&os.initrd),
            &["console=ttyS0", "panic=5"],
        );
        // What the installer would write to disk (the test OS does not).
        class.spec.image.install = Some(metalherd::api::Artifact {
            url: format!("http://{SERVER_IP}:8080/assets/undionly.kpxe"),
            ..bootlab::file_artifact(&common::repo_root().join("boot-assets/undionly.kpxe"))
        });
        store.create_obj(&class).await.unwrap();
        store.create_obj(&bootlab::join_secret()).await.unwrap();
        let m = bootlab::machine("node1", mac, &format!("{MACHINE_IP}/24"), "lab");
        bootlab::create_booting(store.as_ref(), &m, "boot-1").await;
    }

    let base = format!("http://{SERVER_IP}:8080");
    let assets = common::repo_root().join("boot-assets");
    // metalherd alone answers DHCP, TFTP and HTTP on the boot network.
    // The test mints the boot itself (as the Machine controller would), so
    // the controller stays off.
    let mut config = format!(
        "controller:
  enabled: false
dhcp:
  interface: {br}
  httpBootUrl: {base}
{mode}{tftp}boot:
  listen: {SERVER_IP}:8080
  baseUrl: {base}
  assetsDir: {assets}
  waitSeconds: 5
",
        br = lab.bridge,
        assets = assets.display(),
        mode = match dhcp {
            Dhcp::Metalherd => format!(
                "  mode: authoritative\n  subnets:\n    - subnet: 10.77.0.0/24\n      \
                 ranges: [{{start: 10.77.0.100, end: 10.77.0.150}}]\n      router: {SERVER_IP}\n"
            ),
            Dhcp::ProxyBesideDnsmasq => "  mode: proxy\n".to_string(),
        },
        // UEFI HTTP boot needs no TFTP: none runs, so none can be used.
        tftp = if fw == Firmware::UefiHttp {
            String::new()
        } else {
            format!(
                "tftp:\n  listen: {SERVER_IP}:69\n  root: {}\n",
                assets.display()
            )
        },
    );
    if ra {
        config.push_str(&format!(
            "  routerAdvertisement:\n    interface: {}\n    intervalSeconds: 3\n",
            lab.bridge
        ));
    }
    std::fs::write(work.join("config.yaml"), &config).unwrap();
    let mut serve_cmd = lab.ns.command(common::metalherd_bin().to_str().unwrap());
    serve_cmd
        .args(["--data-dir", data.to_str().unwrap(), "serve", "--listen"])
        .arg(format!("127.0.0.1:{}", common::free_port()))
        .arg("--config")
        .arg(work.join("config.yaml"))
        .env("METALHERD_LOG", "info,tower_http=debug");
    let mut serve = ChildGuard::spawn("metalherd", &mut serve_cmd, &work.join("metalherd.log"));
    let up = common::proc::wait_for(Duration::from_secs(20), || {
        std::fs::read_to_string(work.join("metalherd.log"))
            .ok()
            .filter(|l| l.contains("boot HTTP server listening"))
    });
    assert!(
        up.is_some(),
        "metalherd did not start: {}",
        std::fs::read_to_string(work.join("metalherd.log")).unwrap_or_default()
    );

    // The site's DHCP server: another host on the bridge, addresses only
    // (the machine's own by reservation), no boot options.
    let _site = (dhcp == Dhcp::ProxyBesideDnsmasq).then(|| site_dhcp(&lab, mac, &work));

    let mut vm = qemu::start_vm(&lab, fw, mac, &work);
    let done = vm.wait_serial_or_exit(INSTALL_DONE, Duration::from_secs(240));
    let serial = vm.serial_text();
    if done.is_none() {
        let log = std::fs::read_to_string(work.join("metalherd.log")).unwrap_or_default();
        panic!(
            "{fw:?}: no {INSTALL_DONE} within 240 s (work dir {})\n--- serial (tail) ---\n{}\n--- metalherd ---\n{}",
            work.display(),
            tail(&serial, 60),
            tail(&log, 60),
        );
    }
    assert!(
        serial.contains("installer: called home installed"),
        "{}",
        tail(&serial, 30)
    );
    vm.wait_exit(Duration::from_secs(30));
    // Let the boot-history writer catch up, then stop metalherd to read its store.
    std::thread::sleep(Duration::from_secs(2));
    serve.terminate(Duration::from_secs(10));

    let store = EmbeddedStore::open(&data.join(metalherd::datadir::STORE_FILE)).unwrap();
    let m: Machine = store.get_obj("default", "node1").await.unwrap();
    let st = m.status.unwrap();
    let b = st.boot.unwrap();
    assert_eq!(
        b.outcome.as_ref().map(|o| o.as_str()),
        Some("installed"),
        "call-home closes the boot"
    );
    assert!(b.completed_at.is_some() && b.ignition_served_at.is_some());
    let steps: Vec<String> = st.boot_history.iter().map(|e| e.step.to_string()).collect();
    for e in st.boot_history.iter().filter(|e| {
        ["Script", "Kernel", "Initrd", "Ignition", "Installed"].contains(&e.step.as_str())
    }) {
        // The controller may have minted the boot itself; all steps belong
        // to the boot the call-home closed.
        assert_eq!(e.boot_id.as_deref(), Some(b.id.as_str()), "{e:?}");
    }
    let ign = st
        .boot_history
        .iter()
        .find(|e| e.step.as_str() == "Ignition")
        .unwrap_or_else(|| panic!("no Ignition step: {steps:?}"));
    let to_ignition = Duration::from_millis(
        (ign.time.as_millisecond() - vm.started_at.as_millisecond()).max(0) as u64,
    );
    let log = std::fs::read_to_string(work.join("metalherd.log")).unwrap_or_default();
    let http_boot_fetch = strip_ansi(&log)
        .lines()
        .any(|l| l.contains("/assets/ipxe.efi") && l.contains("status=200"));
    let _ = std::fs::remove_dir_all(&work);
    Outcome {
        to_ignition,
        steps,
        http_boot_fetch,
    }
}

/// dnsmasq in a namespace of its own, joined to the lab's bridge by a veth
/// pair, handing out addresses only. Returned guards stop it and remove
/// the namespace (the veth goes with it).
fn site_dhcp(
    lab: &BridgeLab,
    mac: &str,
    work: &std::path::Path,
) -> (ChildGuard, common::netns::Netns) {
    let dnsmasq = common::require_tool("dnsmasq");
    let site = common::netns::Netns::new("mhsite");
    let (inner, outer) = (common::unique("vs"), common::unique("vl"));
    lab.ns.exec(&[
        "ip", "link", "add", &outer, "type", "veth", "peer", "name", &inner, "netns", &site.name,
    ]);
    lab.ns
        .exec(&["ip", "link", "set", &outer, "master", &lab.bridge]);
    lab.ns.exec(&["ip", "link", "set", &outer, "up"]);
    site.exec(&["ip", "addr", "add", "10.77.0.2/24", "dev", &inner]);
    site.exec(&["ip", "link", "set", &inner, "up"]);
    site.exec(&["ip", "link", "set", "lo", "up"]);
    let mut cmd = site.command(dnsmasq.to_str().unwrap());
    cmd.args([
        "--no-daemon",
        "--conf-file=/dev/null",
        "--port=0",
        "--log-dhcp",
        "--pid-file=",
        &format!("--interface={inner}"),
        "--bind-interfaces",
        "--dhcp-range=10.77.0.100,10.77.0.150,255.255.255.0,1h",
        &format!("--dhcp-host={mac},{MACHINE_IP}"),
        &format!("--dhcp-option=3,{SERVER_IP}"),
        &format!("--dhcp-leasefile={}", work.join("dnsmasq.leases").display()),
    ]);
    let guard = ChildGuard::spawn("dnsmasq", &mut cmd, &work.join("dnsmasq.log"));
    (guard, site)
}

/// The log without terminal colour sequences (`ESC [ ... letter`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn tail(s: &str, n: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(n)..].join("\n")
}

fn check_steps(fw: Firmware, steps: &[String]) {
    let mut want = vec![
        "DHCPAck",
        "Script",
        "Kernel",
        "Initrd",
        "Ignition",
        "Installed",
    ];
    match fw {
        Firmware::Uefi => {
            // Firmware DHCP and the TFTP of ipxe.efi come first.
            want.insert(0, "TFTP");
            want.insert(0, "DHCPAck");
        }
        Firmware::UefiHttp => {
            // Firmware DHCP, then ipxe.efi over HTTP: no TFTP step.
            want.insert(0, "DHCPAck");
            assert!(
                !steps.iter().any(|s| s == "TFTP"),
                "UEFI HTTP boot used TFTP: {steps:?}"
            );
        }
        Firmware::Bios => {}
    }
    let mut it = steps.iter();
    for w in want {
        assert!(
            it.any(|s| s == w),
            "{fw:?}: step {w} missing or out of order in {steps:?}"
        );
    }
}

fn run(fw: Firmware, mac_last: u8) {
    common::require_root();
    common::require_tool("qemu-system-x86_64");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let os = initramfs::build(dir.path());
    let mac = format!("52:54:00:4d:48:{mac_last:02x}");
    let plain = rt.block_on(boot_once(fw, false, Dhcp::Metalherd, &mac, &os));
    check_steps(fw, &plain.steps);
    let with_ra = rt.block_on(boot_once(fw, true, Dhcp::Metalherd, &mac, &os));
    check_steps(fw, &with_ra.steps);
    println!(
        "boot_qemu {fw:?}: power-on to Ignition fetch: {:.1} s without router advertisement, {:.1} s with (saved {:.1} s); steps {:?}",
        plain.to_ignition.as_secs_f64(),
        with_ra.to_ignition.as_secs_f64(),
        plain.to_ignition.as_secs_f64() - with_ra.to_ignition.as_secs_f64(),
        plain.steps,
    );
}

#[test]
fn legacy_bios_server_pxe_boots_and_installs() {
    run(Firmware::Bios, 0x01);
}

#[test]
fn uefi_server_pxe_boots_and_installs() {
    run(Firmware::Uefi, 0x02);
}

/// OVMF's own UEFI HTTP boot: the DHCP answer's URL (under `/assets/`)
/// must be one boot HTTP serves, since there is no TFTP to fall back on.
#[test]
fn uefi_server_http_boots_without_tftp_and_installs() {
    common::require_root();
    common::require_tool("qemu-system-x86_64");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let os = initramfs::build(dir.path());
    let out = rt.block_on(boot_once(
        Firmware::UefiHttp,
        false,
        Dhcp::Metalherd,
        "52:54:00:4d:48:03",
        &os,
    ));
    check_steps(Firmware::UefiHttp, &out.steps);
    assert!(
        out.http_boot_fetch,
        "the firmware never fetched /assets/ipxe.efi over HTTP"
    );
    println!(
        "boot_qemu UefiHttp: power-on to Ignition fetch: {:.1} s; steps {:?}",
        out.to_ignition.as_secs_f64(),
        out.steps
    );
}

/// Proxy mode beside a site DHCP server: dnsmasq hands out the address,
/// metalherd only the boot (ProxyDHCP offers on port 67 and 4011). Both
/// firmware kinds install through it.
fn run_proxy(fw: Firmware, mac_last: u8) {
    common::require_root();
    common::require_tool("qemu-system-x86_64");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let os = initramfs::build(dir.path());
    let mac = format!("52:54:00:4d:48:{mac_last:02x}");
    let out = rt.block_on(boot_once(fw, false, Dhcp::ProxyBesideDnsmasq, &mac, &os));
    check_proxy_steps(fw, &out.steps);
    println!(
        "boot_qemu {fw:?} in proxy mode beside dnsmasq: power-on to Ignition fetch: {:.1} s; steps {:?}",
        out.to_ignition.as_secs_f64(),
        out.steps
    );
}

/// In proxy mode metalherd hands out no lease: its steps start with the
/// boot file (TFTP for UEFI) or the script.
fn check_proxy_steps(fw: Firmware, steps: &[String]) {
    let mut want = vec!["Script", "Kernel", "Initrd", "Ignition", "Installed"];
    if fw == Firmware::Uefi {
        want.insert(0, "TFTP");
    }
    let mut it = steps.iter();
    for w in want {
        assert!(
            it.any(|s| s == w),
            "{fw:?} proxy: step {w} missing or out of order in {steps:?}"
        );
    }
}

#[test]
fn legacy_bios_server_boots_through_proxy_dhcp_beside_a_site_dhcp_server() {
    run_proxy(Firmware::Bios, 0x04);
}

#[test]
fn uefi_server_boots_through_proxy_dhcp_beside_a_site_dhcp_server() {
    run_proxy(Firmware::Uefi, 0x05);
}
