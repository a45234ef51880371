//! The real Ignition (Debian's 2.14, the binary a node's initramfs runs)
//! applies every config the example classes render: its fetch and files
//! stages, into a directory standing for the node's root. Downloads are
//! served from loopback, as a lab class points them at the lab's server.

use std::io::Write;

use serde_json::Value;

use crate::common::ignition::{ctx, examples, secrets, url_ctx};
use metalherd::ignition::{self, NodeConfigSource, Stage, render};

/// A loopback HTTP server standing in for metalherd's image cache: every
/// path answers with bytes of its own, so a file Ignition downloads can be
/// told from any other.
struct Artifacts {
    url: String,
}

fn artifact_bytes(path: &str) -> Vec<u8> {
    format!("artifact served at {path}\n").into_bytes()
}

impl Artifacts {
    fn start() -> Artifacts {
        use std::io::{BufRead, BufReader};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for conn in listener.incoming().take(1000) {
                let Ok(mut conn) = conn else { continue };
                let mut line = String::new();
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                // Drain the headers.
                let mut h = String::new();
                while reader.read_line(&mut h).is_ok_and(|n| n > 2) {
                    h.clear();
                }
                let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
                let body = artifact_bytes(&path);
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes());
                let _ = conn.write_all(&body);
            }
        });
        Artifacts { url }
    }

    /// Point every remote file source of `cfg` here (as a lab class points
    /// its downloads at the lab's own server), with the digest of what is
    /// served; returns what each path must then contain.
    fn localize(&self, cfg: &mut Value) -> Vec<(String, Vec<u8>)> {
        use sha2::Digest;
        let mut expected = Vec::new();
        let files = cfg["storage"]["files"].as_array_mut();
        for (i, f) in files.into_iter().flatten().enumerate() {
            let Some(src) = f["contents"]["source"].as_str() else {
                continue;
            };
            if src.starts_with("data:") {
                continue;
            }
            let name = src.rsplit('/').next().unwrap_or("file");
            let path = format!("/{i}/{name}");
            let bytes = artifact_bytes(&path);
            f["contents"]["source"] = Value::from(format!("{}{path}", self.url));
            if f["contents"].get("verification").is_some() {
                let hash = hex::encode(sha2::Sha512::digest(&bytes));
                f["contents"]["verification"]["hash"] = Value::from(format!("sha512-{hash}"));
            }
            expected.push((f["path"].as_str().unwrap().to_string(), bytes));
        }
        expected
    }
}

/// What a config should leave in the root, checked file by file.
fn check_applied(name: &str, cfg: &Value, remote: &[(String, Vec<u8>)], root: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let at = |p: &str| root.join(p.trim_start_matches('/'));
    for f in cfg["storage"]["files"].as_array().into_iter().flatten() {
        let path = f["path"].as_str().unwrap();
        let got = std::fs::read(at(path)).unwrap_or_else(|e| panic!("{name}: {path}: {e}"));
        let want = match f["contents"]["source"].as_str() {
            Some(src) if src.starts_with("data:") => ignition::spec::decode_data_url(src).unwrap(),
            Some(_) => remote.iter().find(|(p, _)| p == path).unwrap().1.clone(),
            None => Vec::new(),
        };
        assert_eq!(got, want, "{name}: contents of {path}");
        if let Some(mode) = f["mode"].as_u64() {
            let meta = std::fs::metadata(at(path)).unwrap();
            assert_eq!(
                u64::from(meta.permissions().mode() & 0o7777),
                mode,
                "{name}: mode of {path}"
            );
        }
    }
    for d in cfg["storage"]["directories"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let path = d["path"].as_str().unwrap();
        assert!(at(path).is_dir(), "{name}: directory {path}");
    }
    // Users exist and carry their keys (Ignition writes them to
    // authorized_keys.d/ignition, which the node's sshd must read).
    let passwd = std::fs::read_to_string(at("/etc/passwd")).unwrap_or_default();
    for u in cfg["passwd"]["users"].as_array().into_iter().flatten() {
        let user = u["name"].as_str().unwrap();
        assert!(
            passwd.lines().any(|l| l.starts_with(&format!("{user}:"))),
            "{name}: user {user} not created: {passwd}"
        );
        let keys =
            std::fs::read_to_string(at(&format!("/home/{user}/.ssh/authorized_keys.d/ignition")))
                .unwrap_or_default();
        for k in u["sshAuthorizedKeys"].as_array().into_iter().flatten() {
            assert!(keys.contains(k.as_str().unwrap()), "{name}: key of {user}");
        }
    }
    let preset = std::fs::read_to_string(at("/etc/systemd/system-preset/20-ignition.preset"))
        .unwrap_or_default();
    for u in cfg["systemd"]["units"].as_array().into_iter().flatten() {
        let unit = u["name"].as_str().unwrap();
        if let Some(contents) = u["contents"].as_str() {
            let got = std::fs::read_to_string(at(&format!("/etc/systemd/system/{unit}"))).unwrap();
            assert_eq!(got, contents, "{name}: unit {unit}");
        }
        for d in u["dropins"].as_array().into_iter().flatten() {
            let dropin = format!(
                "/etc/systemd/system/{unit}.d/{}",
                d["name"].as_str().unwrap()
            );
            let got = std::fs::read_to_string(at(&dropin)).unwrap();
            assert_eq!(got, d["contents"].as_str().unwrap(), "{name}: {dropin}");
        }
        if u["enabled"] == true {
            assert!(
                preset.lines().any(|l| l == format!("enable {unit}")),
                "{name}: {unit} not enabled: {preset}"
            );
        }
    }
}

/// The real Ignition, run as a node runs it (fetch and files stages),
/// applies every config every example class renders: each file, mode,
/// directory, unit, drop-in and enablement lands where the config says,
/// and each download is fetched and checked against its digest.
#[test]
fn real_ignition_applies_every_rendered_config() {
    let artifacts = Artifacts::start();
    for (name, m, class) in examples() {
        for (label, stage, c) in [
            (
                "install/embed",
                Stage::Install,
                ctx(NodeConfigSource::Embed),
            ),
            ("install/url", Stage::Install, url_ctx()),
            ("node", Stage::Node, url_ctx()),
            ("wipe", Stage::Wipe, url_ctx()),
        ] {
            let what = format!("{name} {label}");
            let cfg = render(stage, &m, &class, &secrets(), &c).unwrap();
            let mut v: Value = serde_json::to_value(&cfg).unwrap();
            let remote = artifacts.localize(&mut v);
            let root = tempfile::tempdir().unwrap();
            crate::common::ignition::apply(&v.to_string(), root.path())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            check_applied(&what, &v, &remote, root.path());
            // The class's fragments, merged by Ignition itself.
            for merged in v["ignition"]["config"]["merge"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let src = merged["source"].as_str().unwrap();
                let bytes = ignition::spec::decode_data_url(src).expect("an inline fragment");
                let fragment: Value = serde_json::from_slice(&bytes).unwrap();
                check_applied(&format!("{what} fragment"), &fragment, &[], root.path());
            }
            let count = |p: &str| v.pointer(p).and_then(Value::as_array).map_or(0, Vec::len);
            println!(
                "{what}: real Ignition wrote {} files ({} downloaded), {} directories, {} units",
                count("/storage/files"),
                remote.len(),
                count("/storage/directories"),
                count("/systemd/units"),
            );
            assert!(count("/storage/files") > 0, "{what}: nothing to check");
        }
    }
}
