//! The real kubectl against a running `metalherd serve`, through the
//! kubeconfig `metalherd kubeconfig` prints: TLS verified against the data
//! directory's CA, the token accepted. And the CLI's side of TLS: it never
//! sends the token over plain HTTP unless told to.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::server::{Server, text};

/// Write `metalherd kubeconfig` for `s` into its temp dir; returns the path.
fn kubeconfig(s: &Server) -> std::path::PathBuf {
    let out = s.cli(&["kubeconfig"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "metalherd kubeconfig: {stderr}");
    let path = s.dir.path().join("kubeconfig");
    std::fs::write(&path, &stdout).unwrap();
    path
}

fn kubectl(kc: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let bin = common::require_tool("kubectl");
    let out = std::process::Command::new(bin)
        .env("KUBECONFIG", kc)
        .env("HOME", kc.parent().unwrap())
        .args(args)
        .output()
        .expect("run kubectl");
    let (o, e) = text(&out);
    (out.status.success(), o, e)
}

#[test]
fn kubectl_accepts_the_printed_kubeconfig_as_is() {
    let s = Server::start();
    let kc = kubeconfig(&s);
    // kubectl reads it: server, CA data, token, context with a namespace.
    let (ok, view, err) = kubectl(&kc, &["config", "view", "--raw", "-o", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&view).unwrap();
    assert_eq!(v["current-context"], "metalherd");
    assert_eq!(v["contexts"][0]["context"]["namespace"], "default");
    assert_eq!(v["clusters"][0]["cluster"]["server"], s.url.as_str());
    assert!(v["clusters"][0]["cluster"]["certificate-authority-data"].is_string());
    assert_eq!(v["users"][0]["user"]["token"], s.token.as_str());
    // Over TLS, verified against the CA, with the token: a raw list works
    // (no discovery involved).
    let (ok, body, err) = kubectl(&kc, &["get", "--raw", "/api/v1/namespaces/default/secrets"]);
    assert!(ok, "kubectl get --raw: {err}\n{}", s.log());
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "SecretList", "{body}");
    // A wrong token is refused by the server (kubectl did send it).
    let bad = std::fs::read_to_string(&kc)
        .unwrap()
        .replace(&s.token, "wrong-token");
    let bad_kc = s.dir.path().join("kubeconfig.bad");
    std::fs::write(&bad_kc, bad).unwrap();
    let (ok, _, err) = kubectl(&bad_kc, &["get", "--raw", "/api/v1/secrets"]);
    assert!(!ok);
    assert!(err.contains("Unauthorized") || err.contains("401"), "{err}");
}

#[test]
fn the_cli_sends_no_token_over_plain_http_unless_told() {
    let s = Server::start();
    let plain = s.url.replace("https://", "http://");
    let out = s.cli(&["--server", &plain, "get", "machines"]);
    let (_, err) = text(&out);
    assert!(!out.status.success());
    assert!(err.contains("plain HTTP"), "{err}");
    // And the TLS server does not answer plain HTTP either.
    let out = s
        .command("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("{plain}/healthz"))
        .output()
        .unwrap();
    assert_ne!(out.stdout, b"200");
    // A loopback server started with --insecure-http is reached with it.
    let addr = format!("127.0.0.1:{}", common::free_port());
    let data = s.dir.path().join("plain-data");
    let _g = common::proc::ChildGuard::spawn(
        "metalherd serve --insecure-http",
        s.metalherd()
            .args(["serve", "--insecure-http", "--listen", &addr, "--data-dir"])
            .arg(&data)
            .args(["--config"])
            .arg(s.dir.path().join("config.yaml")),
        &s.dir.path().join("plain.log"),
    );
    let up = common::proc::wait_for(std::time::Duration::from_secs(30), || {
        let o = s
            .metalherd()
            .args(["--insecure-http", "--data-dir"])
            .arg(&data)
            .args(["get", "machines"])
            .output()
            .ok()?;
        o.status.success().then_some(())
    });
    assert!(up.is_some(), "CLI over --insecure-http");
    // The same server refuses to listen off loopback without TLS.
    let out = s
        .metalherd()
        .args([
            "serve",
            "--insecure-http",
            "--listen",
            "0.0.0.0:0",
            "--data-dir",
        ])
        .arg(s.dir.path().join("other"))
        .output()
        .unwrap();
    let (_, err) = text(&out);
    assert!(!out.status.success());
    assert!(err.contains("only on a loopback address"), "{err}");
}
