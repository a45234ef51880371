//! Story: DHCP is configured from `metalherd serve` flags as well as the
//! config file. Flags alone start a proxyDHCP server on the named
//! interface; flags override the file; a bad flag stops `serve` at start
//! with one line naming the flag.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::netns::VethPair;
use common::proc::{ChildGuard, wait_for};

fn serve_log(
    pair: &VethPair,
    args: &[&str],
    dir: &std::path::Path,
    log: &str,
) -> (ChildGuard, std::path::PathBuf) {
    let bin = common::metalherd_bin();
    let port = common::free_port().to_string();
    let mut cmd = pair.server.command(bin.to_str().unwrap());
    cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(args)
        .env("METALHERD_LOG", "info");
    let log = dir.join(log);
    (ChildGuard::spawn("metalherd", &mut cmd, &log), log)
}

#[test]
fn flags_alone_start_proxy_dhcp_and_override_the_file() {
    let pair = VethPair::new("10.79.0.1/24", None);
    let dir = tempfile::tempdir().unwrap();
    let (mut g, log) = serve_log(
        &pair,
        &["--dhcp-interface", &pair.server_if, "--dhcp-mode", "proxy"],
        dir.path(),
        "flags.log",
    );
    let bound = wait_for(Duration::from_secs(30), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("dhcp server bound") {
            return Some(text);
        }
        (!g.running()).then(|| panic!("serve stopped: {text}"))
    })
    .expect("DHCP bound from flags alone");
    assert!(bound.contains("Proxy"), "{bound}");
    assert!(bound.contains(&pair.server_if), "{bound}");
    drop(g);

    // The file says authoritative on a missing interface; the flags win.
    let cfg = dir.path().join("config.yaml");
    std::fs::write(
        &cfg,
        "dhcp:\n  interface: nosuchif0\n  mode: authoritative\n  subnets: [{subnet: 10.79.0.0/24, ranges: [{start: 10.79.0.100, end: 10.79.0.110}]}]\n",
    )
    .unwrap();
    let (mut g, log) = serve_log(
        &pair,
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--dhcp-interface",
            &pair.server_if,
            "--dhcp-lease-sync",
            "always",
        ],
        dir.path(),
        "override.log",
    );
    let bound = wait_for(Duration::from_secs(30), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("dhcp server bound") {
            return Some(text);
        }
        (!g.running()).then(|| panic!("serve stopped: {text}"))
    })
    .expect("DHCP bound with the flag's interface");
    assert!(
        bound.contains("Authoritative") && bound.contains("Always"),
        "{bound}"
    );
}

#[test]
fn a_bad_dhcp_flag_stops_serve_with_one_line_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, value) in [
        ("--dhcp-mode", "relay"),
        ("--dhcp-interface", "eth0/1"),
        ("--dhcp-server-address", "10.0.0"),
        ("--dhcp-lease-sync", "sometimes"),
    ] {
        let out = std::process::Command::new(common::metalherd_bin())
            .args(["serve", "--listen", "127.0.0.1:0", flag, value])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flag} {value} must be refused");
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err
            .lines()
            .find(|l| l.contains(flag))
            .unwrap_or_else(|| panic!("{flag}: {err}"));
        assert!(line.contains(value), "{line}");
    }
}

/// In proxy mode the site's DHCP server leases the addresses: a Machine
/// without `spec.network.address` could never be served its configs, so
/// the API refuses it with the field and the reason.
#[test]
fn proxy_mode_refuses_a_machine_without_an_address() {
    let pair = VethPair::new("10.79.1.1/24", None);
    let dir = tempfile::tempdir().unwrap();
    let (mut g, log) = serve_log(
        &pair,
        &["--dhcp-interface", &pair.server_if, "--dhcp-mode", "proxy"],
        dir.path(),
        "proxy.log",
    );
    wait_for(Duration::from_secs(30), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("metalherd serving") {
            return Some(());
        }
        (!g.running()).then(|| panic!("serve stopped: {text}"))
    })
    .expect("serve up");
    let apply = |name: &str, network: &str| {
        // Paused: the controller makes no BMC call for it.
        let manifest = format!(
            "apiVersion: metalherd.dev/v1alpha1\nkind: Machine\nmetadata:\n  name: {name}\n  annotations: {{metalherd.dev/paused: \"true\"}}\n\
             spec:\n  bmc: {{address: 'ipmi://127.0.0.1:1', credentialsSecretRef: {{name: bmc}}}}\n  bootMACAddress: '52:54:00:00:79:01'\n{network}"
        );
        let f = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&f, manifest).unwrap();
        let out = pair
            .server
            .command(common::metalherd_bin().to_str().unwrap())
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["apply", "-f"])
            .arg(&f)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (ok, text) = apply("no-address", "");
    assert!(!ok, "{text}");
    assert!(text.contains("spec.network.address"), "{text}");
    assert!(text.contains("proxy mode"), "{text}");
    let (ok, text) = apply(
        "with-address",
        "  network: {address: 10.79.1.20/24, gateway: 10.79.1.1}\n",
    );
    assert!(ok, "{text}");
}
