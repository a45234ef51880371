//! Boot one QEMU VM from its NIC against a network boot setup and time it:
//! metalherd alone (authoritative DHCP, TFTP, boot HTTP), metalherd in
//! proxy mode beside a site dnsmasq, or (for the boot benchmark) dnsmasq
//! and nginx serving the same test OS with no metalherd at all. Used by
//! tests/boot_qemu.rs and examples/bench_boot.rs.

use std::sync::Arc;
use std::time::Duration;

use metalherd::api::Machine;
use metalherd::store::embedded::EmbeddedStore;
use metalherd::store::{Store, TypedStore};

use super::bootlab;
use super::initramfs::{self, INSTALL_DONE};
use super::proc::ChildGuard;
use super::qemu::{self, BridgeLab, Firmware};

pub const SERVER_IP: &str = "10.77.0.1";
pub const MACHINE_IP: &str = "10.77.0.50";

/// What one boot showed.
pub struct Outcome {
    pub to_ignition: Duration,
    pub steps: Vec<String>,
    /// Boot HTTP served `/assets/ipxe.efi` (what UEFI HTTP boot fetches).
    pub http_boot_fetch: bool,
    /// iPXE's DISCOVER -> ACK from the boot timeline (its first OFFER to
    /// its ACK), when metalherd handed out the address.
    pub ipxe_dhcp: Option<Duration>,
    /// Each step of the boot timeline (with its detail) and when it came,
    /// in seconds after power-on.
    pub timeline: Vec<(String, f64)>,
}

/// Who hands out addresses on the boot network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dhcp {
    /// metalherd's DHCP server, authoritative.
    Metalherd,
    /// The same, with `ipxeNoProxyDhcp: false`: iPXE is not told that no
    /// ProxyDHCP offer will come (how it booted before that was said).
    MetalherdIpxeWaits,
    /// A site DHCP server (dnsmasq, addresses only, on another host of the
    /// bridge) and metalherd in proxyDHCP mode beside it.
    ProxyBesideDnsmasq,
}

/// What a boot's setup adds to the plain one: the Machine's
/// `spec.secureBoot`, lines under `dhcp:` (e.g. `secureBootFiles`), and a
/// TFTP root other than boot-assets/.
#[derive(Clone, Debug, Default)]
pub struct Extra {
    pub secure_boot: Option<bool>,
    pub dhcp_lines: String,
    pub tftp_root: Option<std::path::PathBuf>,
}

/// A booting Machine, metalherd serving it on the lab's bridge, and the
/// VM powered on.
pub struct Rig {
    pub lab: BridgeLab,
    pub work: std::path::PathBuf,
    pub data: std::path::PathBuf,
    pub serve: ChildGuard,
    pub vm: qemu::Vm,
    _site: Option<(ChildGuard, super::netns::Netns)>,
}

impl Rig {
    /// Stop metalherd once the boot-history writer caught up, and read the
    /// Machine from its store.
    pub async fn machine(&mut self) -> Machine {
        std::thread::sleep(metalherd::directory::HOLD + Duration::from_secs(2));
        self.serve.terminate(Duration::from_secs(10));
        let store = EmbeddedStore::open(&self.data.join(metalherd::datadir::STORE_FILE)).unwrap();
        store.get_obj("default", "node1").await.unwrap()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.work.join("metalherd.log")).unwrap_or_default()
    }
}

pub async fn boot_once(
    fw: Firmware,
    ra: bool,
    dhcp: Dhcp,
    mac: &str,
    os: &initramfs::TestOs,
) -> Outcome {
    let mut rig = start(fw, ra, dhcp, mac, os, &Extra::default()).await;
    let (work, started_at) = (rig.work.clone(), rig.vm.started_at);
    let done = rig
        .vm
        .wait_serial_or_exit(INSTALL_DONE, Duration::from_secs(240));
    let serial = rig.vm.serial_text();
    if done.is_none() {
        panic!(
            "{fw:?}: no {INSTALL_DONE} within 240 s (work dir {})\n--- serial (tail) ---\n{}\n--- metalherd ---\n{}",
            work.display(),
            tail(&serial, 60),
            tail(&rig.log(), 60),
        );
    }
    assert!(
        serial.contains("installer: called home installed"),
        "{}",
        tail(&serial, 30)
    );
    rig.vm.wait_exit(Duration::from_secs(30));
    let m = rig.machine().await;
    let log = rig.log();
    let out = outcome(&m, started_at, &log);
    drop(rig);
    let _ = std::fs::remove_dir_all(&work);
    out
}

/// Set up a booting Machine and metalherd for it, and power the VM on.
pub async fn start(
    fw: Firmware,
    ra: bool,
    dhcp: Dhcp,
    mac: &str,
    os: &initramfs::TestOs,
    extra: &Extra,
) -> Rig {
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
            ..bootlab::file_artifact(&super::repo_root().join("boot-assets/undionly.kpxe"))
        });
        store.create_obj(&class).await.unwrap();
        store.create_obj(&bootlab::join_secret()).await.unwrap();
        let mut m = bootlab::machine("node1", mac, &format!("{MACHINE_IP}/24"), "lab");
        m.spec.secure_boot = extra.secure_boot;
        bootlab::create_booting(store.as_ref(), &m, "boot-1").await;
    }

    let base = format!("http://{SERVER_IP}:8080");
    let assets = super::repo_root().join("boot-assets");
    let tftp_root = extra.tftp_root.clone().unwrap_or_else(|| assets.clone());
    // metalherd alone answers DHCP, TFTP and HTTP on the boot network.
    // The test mints the boot itself (as the Machine controller would), so
    // the controller stays off.
    let mut config = format!(
        "controller:
  enabled: false
dhcp:
  interface: {br}
  httpBootUrl: {base}
{dhcp_lines}{mode}{tftp}boot:
  listen: {SERVER_IP}:8080
  baseUrl: {base}
  assetsDir: {assets}
  waitSeconds: 5
",
        br = lab.bridge,
        assets = assets.display(),
        dhcp_lines = extra.dhcp_lines,
        mode = match dhcp {
            Dhcp::Metalherd | Dhcp::MetalherdIpxeWaits => format!(
                "  mode: authoritative\n  ipxeNoProxyDhcp: {}\n  subnets:\n    - subnet: 10.77.0.0/24\n      \
                 ranges: [{{start: 10.77.0.100, end: 10.77.0.150}}]\n      router: {SERVER_IP}\n",
                dhcp == Dhcp::Metalherd
            ),
            Dhcp::ProxyBesideDnsmasq => "  mode: proxy\n".to_string(),
        },
        // UEFI HTTP boot needs no TFTP: none runs, so none can be used.
        tftp = if fw == Firmware::UefiHttp {
            String::new()
        } else {
            format!(
                "tftp:\n  listen: {SERVER_IP}:69\n  root: {}\n",
                tftp_root.display()
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
    let mut serve_cmd = lab.ns.command(super::metalherd_bin().to_str().unwrap());
    serve_cmd
        .args(["--data-dir", data.to_str().unwrap(), "serve", "--listen"])
        .arg(format!("127.0.0.1:{}", super::free_port()))
        .arg("--config")
        .arg(work.join("config.yaml"))
        .env("METALHERD_LOG", "info,tower_http=debug");
    let serve = ChildGuard::spawn("metalherd", &mut serve_cmd, &work.join("metalherd.log"));
    let up = super::proc::wait_for(Duration::from_secs(20), || {
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
    let site = (dhcp == Dhcp::ProxyBesideDnsmasq).then(|| site_dhcp(&lab, mac, &work));

    let vm = qemu::start_vm(&lab, fw, mac, &work);
    Rig {
        lab,
        work,
        data,
        serve,
        vm,
        _site: site,
    }
}

/// What an installed boot showed, from the Machine metalherd left.
fn outcome(m: &Machine, started_at: jiff::Timestamp, log: &str) -> Outcome {
    let st = m.status.clone().unwrap();
    let b = st.boot.clone().unwrap();
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
        (ign.time.as_millisecond() - started_at.as_millisecond()).max(0) as u64,
    );
    let http_boot_fetch = strip_ansi(log)
        .lines()
        .any(|l| l.contains("/assets/ipxe.efi") && l.contains("status=200"));
    let ipxe_dhcp = ipxe_dhcp(&st.boot_history);
    let timeline = st
        .boot_history
        .iter()
        .map(|e| {
            let at = (e.time.as_millisecond() - started_at.as_millisecond()) as f64 / 1000.0;
            (format!("{} {}", e.step, e.detail), at)
        })
        .collect();
    Outcome {
        to_ignition,
        steps,
        http_boot_fetch,
        ipxe_dhcp,
        timeline,
    }
}

/// dnsmasq in a namespace of its own, joined to the lab's bridge by a veth
/// pair, handing out addresses only. Returned guards stop it and remove
/// the namespace (the veth goes with it).
pub fn site_dhcp(
    lab: &BridgeLab,
    mac: &str,
    work: &std::path::Path,
) -> (ChildGuard, super::netns::Netns) {
    let dnsmasq = super::require_tool("dnsmasq");
    let site = super::netns::Netns::new("mhsite");
    let (inner, outer) = (super::unique("vs"), super::unique("vl"));
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
pub fn strip_ansi(s: &str) -> String {
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

pub fn tail(s: &str, n: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(n)..].join("\n")
}

/// iPXE's DHCP exchange in a boot timeline: its first OFFER (sent as its
/// DISCOVER arrives) to its ACK.
pub fn ipxe_dhcp(history: &[metalherd::api::BootEvent]) -> Option<Duration> {
    let by_ipxe = |step: &str| {
        history
            .iter()
            .find(|e| e.step.as_str() == step && e.detail.contains("via ipxe"))
            .map(|e| e.time)
    };
    let (offer, ack) = (by_ipxe("DHCPOffer")?, by_ipxe("DHCPAck")?);
    let ms = ack.as_millisecond() - offer.as_millisecond();
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// The peer setup of the boot benchmark: no metalherd at all. dnsmasq
/// hands out the machine's reserved address, serves the iPXE binary over
/// TFTP and names a static script to iPXE; nginx serves that script, the
/// test OS's kernel and initrd, a static Ignition config and accepts the
/// call-home. The same VM as [`boot_once`] boots through it. Returns
/// power-on to the Ignition fetch, from nginx's access log, and each
/// request nginx logged with its time after power-on.
pub fn boot_with_dnsmasq_and_nginx(
    fw: Firmware,
    mac: &str,
    os: &initramfs::TestOs,
) -> (Duration, Vec<(String, f64)>) {
    assert!(fw != Firmware::UefiHttp, "the peer setup boots PXE only");
    let dnsmasq = super::require_tool("dnsmasq");
    let nginx = super::require_tool("nginx");
    let work = tempfile::Builder::new()
        .prefix("mh-peer")
        .tempdir()
        .unwrap()
        .keep();
    let lab = BridgeLab::new(&format!("{SERVER_IP}/24"));
    let www = work.join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::create_dir_all(work.join("tmp")).unwrap();
    std::fs::copy(&os.kernel, www.join("vmlinuz")).unwrap();
    std::fs::copy(&os.initrd, www.join("initrd")).unwrap();
    let base = format!("http://{SERVER_IP}:8081");
    // The script metalherd renders for the same class, as a static file.
    std::fs::write(
        www.join("boot.ipxe"),
        format!(
            "#!ipxe\nkernel {base}/vmlinuz initrd=initrd console=ttyS0 panic=5 \
             metalherd.ignition={base}/ignition?mac={mac} || goto failed\n\
             initrd --name initrd {base}/initrd || goto failed\nboot || goto failed\n\
             :failed\nsleep 5\nchain {base}/boot.ipxe\n"
        ),
    )
    .unwrap();
    std::fs::write(
        www.join("ignition.json"),
        // What the test OS installs from: nothing, on a VM without a disk.
        r#"{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/metalherd/install.env","contents":{"source":"data:,DISK%3D%0A"}}]}}"#,
    )
    .unwrap();
    let w = work.display();
    std::fs::write(
        work.join("nginx.conf"),
        format!(
            "daemon off;\nmaster_process off;\npid {w}/nginx.pid;\nerror_log {w}/nginx-error.log;\n\
             events {{}}\nhttp {{\n  log_format t '$msec $request_method $uri $status';\n  \
             access_log {w}/access.log t;\n  client_body_temp_path {w}/tmp;\n  \
             proxy_temp_path {w}/tmp;\n  fastcgi_temp_path {w}/tmp;\n  uwsgi_temp_path {w}/tmp;\n  \
             scgi_temp_path {w}/tmp;\n  sendfile on;\n  tcp_nodelay on;\n  server {{\n    \
             listen {SERVER_IP}:8081;\n    root {w}/www;\n    \
             location = /ignition {{ default_type application/json; alias {w}/www/ignition.json; }}\n    \
             location /callhome/ {{ return 200 \"\"; }}\n  }}\n}}\n"
        ),
    )
    .unwrap();
    let mut cmd = lab.ns.command(nginx.to_str().unwrap());
    cmd.arg("-c").arg(work.join("nginx.conf"));
    let _nginx = ChildGuard::spawn("nginx", &mut cmd, &work.join("nginx.log"));
    let assets = super::repo_root().join("boot-assets");
    let mut cmd = lab.ns.command(dnsmasq.to_str().unwrap());
    cmd.args([
        "--no-daemon",
        "--conf-file=/dev/null",
        "--port=0",
        "--user=root",
        "--log-dhcp",
        "--pid-file=",
        &format!("--interface={}", lab.bridge),
        "--bind-interfaces",
        "--dhcp-range=10.77.0.100,10.77.0.150,255.255.255.0,1h",
        &format!("--dhcp-host={mac},{MACHINE_IP}"),
        &format!("--dhcp-option=3,{SERVER_IP}"),
        &format!("--dhcp-leasefile={w}/dnsmasq.leases"),
        "--enable-tftp",
        &format!("--tftp-root={}", assets.display()),
        "--dhcp-userclass=set:ipxe,iPXE",
        "--dhcp-match=set:efi64,option:client-arch,7",
        &format!("--dhcp-boot=tag:ipxe,{base}/boot.ipxe"),
        "--dhcp-boot=tag:!ipxe,tag:efi64,ipxe.efi",
        "--dhcp-boot=tag:!ipxe,tag:!efi64,undionly.kpxe",
    ]);
    let _dnsmasq = ChildGuard::spawn("dnsmasq", &mut cmd, &work.join("dnsmasq.log"));
    // Both listening before the VM starts.
    let up = super::proc::wait_for(Duration::from_secs(20), || {
        let n = std::fs::read_to_string(work.join("nginx-error.log")).unwrap_or_default();
        let d = std::fs::read_to_string(work.join("dnsmasq.log")).unwrap_or_default();
        let listening = lab.ns.exec(&["ss", "-lntu"]);
        (listening.contains(&format!("{SERVER_IP}:8081")) && d.contains("DHCP, IP range"))
            .then_some(())
            .or_else(|| (n.contains("emerg")).then(|| panic!("nginx: {n}")))
    });
    assert!(up.is_some(), "dnsmasq or nginx did not start in {w}");

    let mut vm = qemu::start_vm(&lab, fw, mac, &work);
    let done = vm.wait_serial_or_exit(INSTALL_DONE, Duration::from_secs(240));
    let access = std::fs::read_to_string(work.join("access.log")).unwrap_or_default();
    assert!(
        done.is_some(),
        "{fw:?} through dnsmasq + nginx: no {INSTALL_DONE} within 240 s (work dir {w})\n{}\n{access}",
        tail(&vm.serial_text(), 40)
    );
    vm.wait_exit(Duration::from_secs(30));
    let started = vm.started_at.as_millisecond() as f64 / 1000.0;
    let timeline: Vec<(String, f64)> = access
        .lines()
        .filter_map(|l| {
            let (t, rest) = l.split_once(' ')?;
            Some((rest.to_string(), t.parse::<f64>().ok()? - started))
        })
        .collect();
    let fetched = timeline
        .iter()
        .find(|(r, _)| r == "GET /ignition 200")
        .map(|(_, t)| *t)
        .unwrap_or_else(|| panic!("no Ignition fetch in nginx's log: {access}"));
    let _ = std::fs::remove_dir_all(&work);
    (Duration::from_secs_f64(fetched.max(0.0)), timeline)
}
