//! `metalherd serve` for DHCP tests: the server runs inside the server
//! namespace (its API on that namespace's loopback), objects go in through
//! `metalherd apply` and come back through `metalherd get`, run in the same
//! namespace.

use std::path::Path;
use std::time::Duration;

use super::netns::Netns;
use super::proc::{ChildGuard, wait_for};

/// Start `metalherd serve` in `ns` and wait until DHCP is bound.
pub fn start(ns: &Netns, config: &Path, data_dir: &Path, log: &Path) -> ChildGuard {
    start_until(ns, config, data_dir, log, "dhcp server bound")
}

/// Start `metalherd serve` in `ns` and wait until its log says `bound`
/// (`dhcp6 server bound` for DHCPv6).
pub fn start_until(
    ns: &Netns,
    config: &Path,
    data_dir: &Path,
    log: &Path,
    bound: &str,
) -> ChildGuard {
    let port = super::free_port().to_string();
    let bin = super::metalherd_bin();
    let mut cmd = ns.command(bin.to_str().unwrap());
    cmd.args([
        "serve",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--config",
    ])
    .arg(config)
    .arg("--data-dir")
    .arg(data_dir);
    let mut g = ChildGuard::spawn("metalherd", &mut cmd, log);
    let ok = wait_for(Duration::from_secs(30), || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(bound) {
            return Some(true);
        }
        if !g.running() {
            return Some(false);
        }
        None
    });
    assert_eq!(
        ok,
        Some(true),
        "metalherd serve did not log {bound:?}: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    g
}

/// Run the CLI against the server of `data_dir`, inside `ns`.
pub fn cli(ns: &Netns, data_dir: &Path, args: &[&str]) -> std::process::Output {
    let bin = super::metalherd_bin();
    ns.command(bin.to_str().unwrap())
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env_remove("METALHERD_SERVER")
        .env_remove("METALHERD_TOKEN")
        .output()
        .expect("run metalherd CLI")
}

/// `metalherd apply -f` a manifest (YAML text); panics with the CLI's output on failure.
pub fn apply(ns: &Netns, data_dir: &Path, manifest: &str) {
    let f = data_dir.with_extension(format!("{}.yaml", super::unique("m")));
    std::fs::write(&f, manifest).unwrap();
    let out = cli(ns, data_dir, &["apply", "-f", f.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "apply: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `metalherd get KIND [NAME] -o json`, as JSON (None when it fails).
pub fn get_json(ns: &Netns, data_dir: &Path, args: &[&str]) -> Option<serde_json::Value> {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    let out = cli(ns, data_dir, &a);
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}
