//! The real kubectl against a test's `metalherd serve`, configured only by
//! the kubeconfig `metalherd kubeconfig` prints (and a fresh cache).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::server::{Server, text};

/// Write `metalherd kubeconfig` for `s` into its temp dir; returns the path.
pub fn kubeconfig(s: &Server) -> PathBuf {
    let out = s.cli(&["kubeconfig"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "metalherd kubeconfig: {stderr}");
    let path = s.dir.path().join("kubeconfig");
    std::fs::write(&path, &stdout).expect("write kubeconfig");
    path
}

/// kubectl with `kc` as its only kubeconfig (and a fresh cache).
pub fn kubectl_cmd(kc: &Path) -> Command {
    let bin = super::require_tool("kubectl");
    let mut c = Command::new(bin);
    c.env("KUBECONFIG", kc)
        .env("HOME", kc.parent().expect("kubeconfig in a directory"));
    c
}

/// Run kubectl: (success, stdout, stderr).
pub fn kubectl(kc: &Path, args: &[&str]) -> (bool, String, String) {
    let out = kubectl_cmd(kc).args(args).output().expect("run kubectl");
    let (o, e) = text(&out);
    (out.status.success(), o, e)
}

/// kubectl that must succeed; its stdout.
pub fn ok(kc: &Path, args: &[&str]) -> String {
    let (ok, out, err) = kubectl(kc, args);
    assert!(ok, "kubectl {}: {err}\n{out}", args.join(" "));
    out
}

/// kubectl that must fail; its stderr.
pub fn fails(kc: &Path, args: &[&str]) -> String {
    let (ok, out, err) = kubectl(kc, args);
    assert!(!ok, "kubectl {} succeeded: {out}", args.join(" "));
    err
}

/// The suites need what kubectl 1.27+ does (OpenAPI v3, server-side field
/// validation); an older kubectl fails them, naming its version.
pub fn require_recent_kubectl() {
    let out = Command::new(super::require_tool("kubectl"))
        .args(["version", "--client", "-o", "json"])
        .output()
        .expect("kubectl version");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let minor: u32 = v["clientVersion"]["minor"]
        .as_str()
        .unwrap_or("0")
        .trim_end_matches('+')
        .parse()
        .unwrap_or(0);
    assert!(
        minor >= 27,
        "kubectl {} is too old for this suite (it targets 1.32: OpenAPI v3 and server-side field validation)",
        v["clientVersion"]["gitVersion"]
    );
}

/// The rows of kubectl's table output, split on whitespace.
pub fn rows(out: &str) -> Vec<Vec<&str>> {
    out.lines()
        .map(|l| l.split_whitespace().collect())
        .collect()
}
