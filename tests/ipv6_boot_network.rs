//! Story: a server sits on an IPv6-only provisioning network. `metalherd
//! serve` runs in one network namespace with `fd00:89::1/64`, the server
//! in another with its Machine's address `fd00:89::7/64`, joined by a veth
//! pair; nothing crosses IPv4 between them.
//!
//! - The router advertisement tells hosts what an IPv6 network boot needs:
//!   M and O set (iPXE then runs DHCPv6) and the boot prefix on-link;
//!   `rdisc6` reads it as a host does, and the host's kernel installs the
//!   on-link route from it.
//! - TFTP on `[::]` serves the IPv6 host (curl and atftp) and IPv4 clients
//!   on the same socket (IPv4-mapped), each transfer recorded as a step of
//!   its Machine; a hostile request is refused as over IPv4. TFTP bound to
//!   a link-local address (`[fe80::1%IFINDEX]`) serves the link too.
//! - Boot HTTP on `[::]` hands the IPv6 host a script whose URLs are under
//!   `boot.baseUrl6` and whose kernel arguments carry its static IPv6
//!   address from `spec.network`; it fetches its Ignition config and calls
//!   home over IPv6; a third address on the link is refused; an IPv4
//!   machine asking over the same dual-stack listener gets `boot.baseUrl`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::netns::Netns;
use common::server::Server;
use serde_json::{Value, json};

const BOOT_PORT: u16 = 8080;
const TFTP_PORT: u16 = 6969;
const SERVER_IP: &str = "fd00:89::1";
const HOST_IP: &str = "fd00:89::7";
const STRANGER_IP: &str = "fd00:89::9";
const MAC6: &str = "52:54:00:89:00:07";
const MAC4: &str = "52:54:00:89:00:04";

/// The two namespaces and `metalherd serve` in the first.
struct Net {
    server: Server,
    host: Netns,
    host_if: String,
    srv_if: String,
    assets: tempfile::TempDir,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Wait until the namespace has no tentative IPv6 address (DAD done), so
/// its addresses can send and be reached.
/// Wait until `dev` in `ns` has its kernel link-local address and nothing
/// in `ns` is tentative any more. The link-local address appears only once
/// the veth has carrier (both ends up), a moment after `ip link set up`:
/// "no tentative address" alone was also true before it existed, and an
/// ICMPv6 sent then fails with "Network is unreachable".
fn settled(ns: &Netns, dev: &str) {
    for _ in 0..100 {
        let link_local = ns.exec(&["ip", "-6", "addr", "show", "dev", dev, "scope", "link"]);
        let tentative = ns.exec(&["ip", "-6", "addr", "show", "tentative"]);
        if link_local.contains("inet6 fe80:") && tentative.trim().is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{dev} in {} has no usable link-local address", ns.name);
}

fn start(extra_ra: &str) -> Net {
    let srv = Arc::new(Netns::new("mh6s"));
    let host = Netns::new("mh6c");
    let srv_if = common::unique("v6s");
    let host_if = common::unique("v6c");
    ip(&[
        "link", "add", &srv_if, "netns", &srv.name, "type", "veth", "peer", "name", &host_if,
        "netns", &host.name,
    ]);
    srv.exec(&[
        "ip",
        "addr",
        "add",
        &format!("{SERVER_IP}/64"),
        "dev",
        &srv_if,
        "nodad",
    ]);
    // A fixed link-local address beside the kernel's, for a TFTP server
    // bound to a scoped address.
    srv.exec(&["ip", "addr", "add", "fe80::1/64", "dev", &srv_if, "nodad"]);
    srv.exec(&["ip", "link", "set", &srv_if, "up"]);
    host.exec(&["ip", "link", "set", &host_if, "up"]);
    settled(&srv, &srv_if);
    settled(&host, &host_if);
    let assets = tempfile::tempdir().unwrap();
    std::fs::write(
        assets.path().join("ipxe.efi"),
        common::tftp::pseudo_random(100_000),
    )
    .unwrap();
    std::fs::write(assets.path().join("kernel"), b"kernel").unwrap();
    std::fs::write(assets.path().join("initrd"), b"initrd").unwrap();
    let yaml = format!(
        "controller:\n  enabled: false\nboot:\n  listen: '[::]:{BOOT_PORT}'\n  baseUrl: http://127.0.0.1:{BOOT_PORT}\n  baseUrl6: http://[{SERVER_IP}]:{BOOT_PORT}\n  assetsDir: {assets}\n  routerAdvertisement:\n    interface: {srv_if}\n    intervalSeconds: 1\n{extra_ra}tftp:\n  listen: '[::]:{TFTP_PORT}'\n  root: {assets}\n",
        assets = assets.path().display(),
    );
    let server = Server::start_in_netns(Some(&yaml), srv, &[]);
    Net {
        server,
        host,
        host_if,
        srv_if,
        assets,
    }
}

#[test]
fn router_advertisements_tell_hosts_to_run_dhcpv6_on_the_boot_prefix() {
    let net = start(
        "    managed: true\n    other: true\n    prefixes:\n    - prefix: fd00:89::/64\n      validLifetimeSeconds: 3600\n      preferredLifetimeSeconds: 1800\n",
    );
    let rdisc6 = common::require_tool("rdisc6");
    let out = net
        .host
        .command(rdisc6.to_str().unwrap())
        .args(["-1", "-r", "5", "-w", "1000", &net.host_if])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "rdisc6: {text} {out:?}");
    let field = |name: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.split_whitespace().next().unwrap_or_default().to_string())
            .unwrap_or_else(|| panic!("no {name:?} in rdisc6's output:\n{text}"))
    };
    assert_eq!(field("Stateful address conf."), "Yes", "{text}");
    assert_eq!(field("Stateful other conf."), "Yes", "{text}");
    assert_eq!(field("Router lifetime"), "0", "{text}");
    assert_eq!(field("Prefix"), "fd00:89::/64", "{text}");
    assert_eq!(field("On-link"), "Yes", "{text}");
    assert_eq!(field("Autonomous address conf."), "No", "{text}");
    assert_eq!(field("Valid time"), "3600", "{text}");
    assert_eq!(field("Pref. time"), "1800", "{text}");
    // The host's own kernel took the prefix as on-link (what EDK2 needs
    // to reach the boot server), without forming an address in it (A=0).
    let mut routes = String::new();
    for _ in 0..50 {
        routes = net
            .host
            .exec(&["ip", "-6", "route", "show", "dev", &net.host_if]);
        if routes.contains("fd00:89::/64") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(routes.contains("fd00:89::/64"), "{routes}");
    let addrs = net
        .host
        .exec(&["ip", "-6", "addr", "show", "dev", &net.host_if]);
    assert!(!addrs.contains("fd00:89:"), "no SLAAC address: {addrs}");
}

#[test]
fn the_minimal_advertisement_stays_the_default() {
    let net = start("");
    let rdisc6 = common::require_tool("rdisc6");
    let out = net
        .host
        .command(rdisc6.to_str().unwrap())
        .args(["-1", "-r", "5", "-w", "1000", &net.host_if])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "rdisc6: {text} {out:?}");
    assert!(
        text.contains("Stateful address conf.    :           No"),
        "{text}"
    );
    assert!(
        text.contains("Stateful other conf.      :           No"),
        "{text}"
    );
    assert!(!text.contains("Prefix"), "no prefix option: {text}");
}

/// Create an object through the API; returns it as stored.
fn create(s: &Server, path: &str, body: Value) -> Value {
    let (code, v) = s.req("POST", path, Some(&body));
    assert!(code == 201 || code == 200, "create {path}: {code} {v}");
    v
}

/// Give Machine `name` an open install boot `boot-1`, powered on now.
fn booting(s: &Server, name: &str) {
    let path = format!("/apis/metalherd.dev/v1alpha1/namespaces/default/machines/{name}");
    for _ in 0..20 {
        let (_, mut m) = s.req("GET", &path, None);
        let now = jiff::Timestamp::now().to_string();
        m["status"] = json!({
            "phase": "Provisioning",
            "boot": {"id": "boot-1", "purpose": "install", "mintedAt": now},
            "progress": {"powerCycledFor": "boot-1", "poweredAt": now},
        });
        let (code, v) = s.req("PUT", &format!("{path}/status"), Some(&m));
        if code == 200 {
            return;
        }
        assert_eq!(code, 409, "set status: {v}");
    }
    panic!("set status: still conflicting");
}

fn machine(name: &str, mac: &str, address: &str) -> Value {
    json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "bmc": {"address": "ipmi://127.0.0.1:623", "credentialsSecretRef": {"name": "bmc"}},
            "bootMACAddress": mac,
            "network": {"address": address, "hostname": name},
            "classRef": {"name": "workers"}
        }
    })
}

/// The Machine's boot-history steps (`step` words), once `want` are all there.
fn steps_until(s: &Server, name: &str, want: &[&str]) -> Vec<Value> {
    let path = format!("/apis/metalherd.dev/v1alpha1/namespaces/default/machines/{name}");
    let mut history = Vec::new();
    for _ in 0..100 {
        let (_, m) = s.req("GET", &path, None);
        history = m["status"]["bootHistory"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let have: Vec<&str> = history.iter().filter_map(|e| e["step"].as_str()).collect();
        if want.iter().all(|w| have.contains(w)) {
            return history;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{name}: steps {want:?} never all recorded: {history:?}");
}

/// curl in `ns` (extra arguments first); (exit success, stdout).
fn curl_in(ns: &Netns, args: &[&str]) -> (bool, String) {
    let out = ns
        .command("curl")
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn a_machine_boots_over_ipv6_from_tftp_and_boot_http() {
    let net = start("    managed: true\n    prefixes:\n    - prefix: fd00:89::/64\n");
    let s = &net.server;
    let srv_ns = s.ns.clone().unwrap();
    net.host.exec(&[
        "ip",
        "addr",
        "add",
        &format!("{HOST_IP}/64"),
        "dev",
        &net.host_if,
        "nodad",
    ]);
    settled(&net.host, &net.host_if);
    create(
        s,
        "/api/v1/namespaces/default/secrets",
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "join", "namespace": "default"},
               "stringData": {"token": "abcdef.0123456789abcdef"}}),
    );
    let class = serde_json::to_value(common::bootlab::class(
        "workers",
        common::bootlab::file_artifact(&net.assets.path().join("kernel")),
        common::bootlab::file_artifact(&net.assets.path().join("initrd")),
        &["console=ttyS0"],
    ))
    .unwrap();
    create(
        s,
        "/apis/metalherd.dev/v1alpha1/namespaces/default/machineclasses",
        class,
    );
    let machines = "/apis/metalherd.dev/v1alpha1/namespaces/default/machines";
    create(s, machines, machine("six", MAC6, &format!("{HOST_IP}/64")));
    create(s, machines, machine("four", MAC4, "127.0.0.1/8"));
    booting(s, "six");
    booting(s, "four");

    // TFTP over IPv6 from the host: curl and atftp, byte-identical.
    let want = std::fs::read(net.assets.path().join("ipxe.efi")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let got = out.path().join("curl.efi");
    let (ok, _) = curl_in(
        &net.host,
        &[
            "-o",
            got.to_str().unwrap(),
            &format!("tftp://[{SERVER_IP}]:{TFTP_PORT}/ipxe.efi"),
        ],
    );
    assert!(ok, "curl over IPv6");
    assert_eq!(std::fs::read(&got).unwrap(), want);
    let got = out.path().join("atftp.efi");
    let atftp = common::require_tool("atftp");
    let o = net
        .host
        .command(atftp.to_str().unwrap())
        .args(["-g", "-r", "ipxe.efi", "-l", got.to_str().unwrap()])
        .args(["--option", "blksize 1400", "--option", "tsize"])
        .args([SERVER_IP, &TFTP_PORT.to_string()])
        .output()
        .unwrap();
    assert!(o.status.success(), "atftp over IPv6: {o:?}");
    assert_eq!(std::fs::read(&got).unwrap(), want);
    // The IPv6 host's transfers are its Machine's steps.
    steps_until(s, "six", &["TFTP"]);
    // The same dual-stack socket serves IPv4 (seen IPv4-mapped) and the
    // IPv6 loopback; the IPv4 transfer is the IPv4 Machine's step.
    for url in [
        format!("tftp://127.0.0.1:{TFTP_PORT}/ipxe.efi"),
        format!("tftp://[::1]:{TFTP_PORT}/ipxe.efi"),
    ] {
        let got = out.path().join("lo.efi");
        let (ok, _) = curl_in(&srv_ns, &["-o", got.to_str().unwrap(), &url]);
        assert!(ok, "{url}");
        assert_eq!(std::fs::read(&got).unwrap(), want, "{url}");
    }
    steps_until(s, "four", &["TFTP"]);
    // Hostile names are refused over IPv6 as over IPv4; the server stays up.
    for bad in ["../etc/passwd", "missing.bin"] {
        let (ok, _) = curl_in(
            &net.host,
            &[
                "-o",
                "/dev/null",
                &format!("tftp://[{SERVER_IP}]:{TFTP_PORT}/{bad}"),
            ],
        );
        assert!(!ok, "{bad} must be refused");
    }

    // Boot HTTP over IPv6: the script's URLs are under baseUrl6, its kernel
    // arguments carry the static IPv6 address.
    let base6 = format!("http://[{SERVER_IP}]:{BOOT_PORT}");
    let mac6 = MAC6.replace(':', "-");
    let (ok, chain) = curl_in(&net.host, &[&format!("{base6}/boot.ipxe")]);
    assert!(
        ok && chain.contains(&format!("{base6}/boot.ipxe?mac=")),
        "{chain}"
    );
    let (ok, script) = curl_in(
        &net.host,
        &[
            "--interface",
            HOST_IP,
            &format!("{base6}/boot.ipxe?mac={mac6}&arch=x86_64&platform=efi"),
        ],
    );
    assert!(ok, "{script}");
    assert!(
        script.contains(&format!("kernel {base6}/images/")),
        "{script}"
    );
    assert!(
        script.contains(&format!("ip=[{HOST_IP}]:::64:six:boot0:none")),
        "{script}"
    );
    assert!(script.contains(&format!("ifname=boot0:{MAC6}")), "{script}");
    assert!(!script.contains("127.0.0.1"), "no IPv4 URL: {script}");
    let ign = script
        .split_whitespace()
        .find_map(|w| w.strip_prefix("ignition.config.url="))
        .unwrap_or_else(|| panic!("no Ignition URL: {script}"))
        .to_string();
    assert!(
        ign.starts_with(&format!("{base6}/ignition?mac={mac6}&token=")),
        "{ign}"
    );
    // The kernel, by the URL the script names.
    let kernel_url = script
        .split_whitespace()
        .find(|w| w.starts_with(&format!("{base6}/images/")) && w.contains("/kernel"))
        .unwrap()
        .to_string();
    let (ok, kernel) = curl_in(&net.host, &[&kernel_url]);
    assert!(ok && kernel == "kernel", "{kernel}");
    // A stranger on the link (another address) is refused the config.
    net.host.exec(&[
        "ip",
        "addr",
        "add",
        &format!("{STRANGER_IP}/64"),
        "dev",
        &net.host_if,
        "nodad",
    ]);
    let (_, body) = curl_in(&net.host, &["--interface", STRANGER_IP, &ign]);
    assert_eq!(body, "forbidden\n");
    // The machine's own address gets it, and its call-home URLs are IPv6.
    let (ok, config) = curl_in(&net.host, &["--interface", HOST_IP, &ign]);
    assert!(ok, "{config}");
    let v: Value = serde_json::from_str(&config).unwrap_or_else(|e| panic!("{e}: {config}"));
    assert_eq!(v["ignition"]["version"], "3.3.0");
    // The installer's files carry them percent-encoded (data: URLs).
    let enc = |u: &str| url::form_urlencoded::byte_serialize(u.as_bytes()).collect::<String>();
    let (base6_enc, base4_enc) = (enc(&base6), enc(&format!("127.0.0.1:{BOOT_PORT}")));
    assert!(
        config.contains(&format!("METALHERD_CALLHOME_URL%3D%22{base6_enc}%22")),
        "{config}"
    );
    assert!(
        config.contains(&format!("NODE_CONFIG_URL%3D%22{base6_enc}%2Fignition")),
        "{config}"
    );
    assert!(!config.contains(&base4_enc), "no IPv4 boot URL: {config}");
    let installed = ign.replace("/ignition?", "/callhome/installed?");
    let (ok, _) = curl_in(
        &net.host,
        &["--interface", HOST_IP, "-X", "POST", "--fail", &installed],
    );
    assert!(ok, "call home over IPv6");
    let history = steps_until(s, "six", &["Script", "Kernel", "Ignition", "Installed"]);
    assert!(
        history
            .iter()
            .any(|e| e["step"] == "TFTP" && e["detail"] == "ipxe.efi")
    );

    // IPv4 on the dual-stack listener: the IPv4 machine gets baseUrl URLs,
    // and no static network (it asks DHCP as before).
    let base4 = format!("http://127.0.0.1:{BOOT_PORT}");
    let (ok, script4) = curl_in(
        &srv_ns,
        &[&format!("{base4}/boot.ipxe?mac={}", MAC4.replace(':', "-"))],
    );
    assert!(ok, "{script4}");
    assert!(
        script4.contains(&format!("kernel {base4}/images/")),
        "{script4}"
    );
    assert!(!script4.contains(" ip="), "{script4}");
    assert!(!script4.contains(&base6), "{script4}");
    steps_until(s, "four", &["Script"]);
}

/// TFTP bound to a link-local address (its scope named by the interface
/// index, as `SocketAddr` spells it) answers from transfer sockets on the
/// same scoped address: a client on the link fetches over `fe80::1%if`.
#[test]
fn tftp_on_a_link_local_address_serves_the_link() {
    let net = start("");
    let srv_ns = net.server.ns.clone().unwrap();
    let link = srv_ns.exec(&["ip", "-o", "link", "show", "dev", &net.srv_if]);
    let index: u32 = link.split(':').next().unwrap().trim().parse().unwrap();
    let yaml = format!(
        "controller:\n  enabled: false\ntftp:\n  listen: '[fe80::1%{index}]:{port}'\n  root: {root}\n",
        port = TFTP_PORT + 1,
        root = net.assets.path().display(),
    );
    let _scoped = Server::start_in_netns(Some(&yaml), srv_ns, &[]);
    let want = std::fs::read(net.assets.path().join("ipxe.efi")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let got = out.path().join("ll.efi");
    let url = format!(
        "tftp://[fe80::1%25{}]:{}/ipxe.efi",
        net.host_if,
        TFTP_PORT + 1
    );
    let mut ok = false;
    // The server may still be binding: retry briefly.
    for _ in 0..20 {
        ok = curl_in(&net.host, &["-o", got.to_str().unwrap(), &url]).0;
        if ok {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(ok, "{url}");
    assert_eq!(std::fs::read(&got).unwrap(), want);
}
