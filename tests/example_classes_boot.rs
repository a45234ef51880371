//! Story: the MachineClasses shipped in deploy/examples/ boot as written.
//! Each example class is validated and stored as `apply` would, a Machine
//! of that class gets an open boot, and its install script is rendered
//! through the real image cache: the class's kernel and initrd (and the
//! distribution checksum files that pin them: Flatcar `.DIGESTS`, Fedora
//! CoreOS stream metadata) are served by a local HTTP server standing in
//! for the distribution's mirror, with only the host part of each URL
//! rewritten. A class pinned by nothing is refused at validation, naming
//! the field.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use common::bootlab;
use metalherd::api::validate::validate;
use metalherd::api::{Kind, MachineClass};
use metalherd::store::embedded::EmbeddedStore;
use metalherd::store::{Store, TypedStore};
use serde_json::{Value, json};
use sha2::Digest;

/// Every document of every example file, with its file name.
fn example_docs() -> Vec<(String, Value)> {
    let dir = common::repo_root().join("deploy/examples");
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for d in serde_yaml::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(d).unwrap();
            if !v.is_null() {
                out.push((f.file_name().unwrap().to_string_lossy().into_owned(), v));
            }
        }
    }
    out
}

/// `https://host/path` -> `{mirror}/host/path`.
fn rewrite(url: &str, mirror: &str) -> String {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .unwrap_or_else(|| panic!("example URL {url} is not http(s)"));
    format!("{mirror}/{rest}")
}

/// The fake mirror: path -> body.
type Files = Arc<std::sync::Mutex<HashMap<String, Vec<u8>>>>;

async fn start_mirror(files: Files) -> String {
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let files = files.clone();
        async move {
            match files.lock().unwrap().get(uri.path()) {
                Some(b) => (axum::http::StatusCode::OK, b.clone()),
                None => (axum::http::StatusCode::NOT_FOUND, b"not found".to_vec()),
            }
        }
    });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await });
    format!("http://{addr}")
}

fn path_of(url: &str) -> String {
    url::Url::parse(url).unwrap().path().to_string()
}

/// A checksum file in the format the distribution publishes, listing
/// `arts` (url, body): Flatcar's `.DIGESTS` (MD5, SHA1, SHA512 sections) or
/// Fedora CoreOS stream metadata (JSON, `location` + `sha256`).
fn checksum_file(list_url: &str, arts: &[(String, Vec<u8>)]) -> Vec<u8> {
    let name = |u: &str| u.rsplit('/').next().unwrap().to_string();
    if list_url.ends_with(".DIGESTS") {
        let mut s = String::new();
        // MD5 and SHA1 values are not real: metalherd must not use them.
        for (head, f) in [("MD5", 32), ("SHA1", 40)] {
            s.push_str(&format!("# {head} HASH\n"));
            for (u, _) in arts {
                s.push_str(&format!("{}  {}\n", "0".repeat(f), name(u)));
            }
        }
        s.push_str("# SHA512 HASH\n");
        for (u, b) in arts {
            s.push_str(&format!(
                "{}  {}\n",
                hex::encode(sha2::Sha512::digest(b)),
                name(u)
            ));
        }
        s.into_bytes()
    } else if list_url.ends_with(".json") {
        let mut pxe = serde_json::Map::new();
        for (u, b) in arts {
            let key = if u.contains("kernel") {
                "kernel"
            } else if u.contains("initramfs") {
                "initramfs"
            } else {
                "rootfs"
            };
            pxe.insert(
                key.into(),
                json!({"location": u, "signature": format!("{u}.sig"),
                       "sha256": hex::encode(sha2::Sha256::digest(b))}),
            );
        }
        serde_json::to_vec(&json!({
            "stream": "stable",
            "metadata": {"last-modified": "2025-09-30T00:00:00Z"},
            "architectures": {"x86_64": {"artifacts": {"metal": {
                "release": "42.20250914.3.0",
                "formats": {"pxe": pxe}
            }}}}
        }))
        .unwrap()
    } else {
        panic!("unknown checksum file format: {list_url}")
    }
}

#[tokio::test]
async fn every_example_class_renders_its_install_script_through_the_image_cache() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let files: Files = Arc::default();
    let mirror = start_mirror(files.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&dir.path().join("s.redb")).unwrap());
    let boot = common::boot_server::start_on(store.clone(), &dir.path().join("data")).await;
    let (url, directory) = (boot.url.clone(), boot.directory.clone());

    let docs = example_docs();
    let classes: Vec<&Value> = docs
        .iter()
        .filter(|(_, d)| d["kind"] == "MachineClass")
        .map(|(_, d)| d)
        .collect();
    assert!(classes.len() >= 2, "example classes: {}", classes.len());
    let class_names: Vec<&str> = classes
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap())
        .collect();
    // Every classRef in the examples names an example class.
    for (file, d) in &docs {
        for r in [
            &d["spec"]["classRef"]["name"],
            &d["spec"]["template"]["classRef"]["name"],
        ] {
            if let Some(n) = r.as_str() {
                assert!(
                    class_names.contains(&n) || file.starts_with("invalid"),
                    "{file} names class {n:?}, which no example defines ({class_names:?})"
                );
            }
        }
    }

    for (i, class) in classes.into_iter().enumerate() {
        let name = class["metadata"]["name"].as_str().unwrap().to_string();
        // As `apply` does: the example as written passes validation.
        validate(Kind::MachineClass, class)
            .unwrap_or_else(|e| panic!("example class {name} is refused: {e}"));
        let mut c = class.clone();
        let mut lists: BTreeMap<String, Vec<(String, Vec<u8>)>> = BTreeMap::new();
        let mut bodies = BTreeMap::new();
        for key in ["kernel", "initrd", "rootfs"] {
            let a = &mut c["spec"]["image"][key];
            if a.is_null() {
                continue;
            }
            let u = rewrite(a["url"].as_str().unwrap(), &mirror);
            let body = format!("{name} {key} bytes {}", "x".repeat(1000 + i)).into_bytes();
            files.lock().unwrap().insert(path_of(&u), body.clone());
            if let Some(l) = a["checksumsUrl"].as_str() {
                let l = rewrite(l, &mirror);
                lists
                    .entry(l.clone())
                    .or_default()
                    .push((u.clone(), body.clone()));
                a["checksumsUrl"] = json!(l);
            }
            a["url"] = json!(u);
            bodies.insert(key, body);
        }
        for (l, arts) in &lists {
            files
                .lock()
                .unwrap()
                .insert(path_of(l), checksum_file(l, arts));
        }
        validate(Kind::MachineClass, &c).unwrap();
        let typed: MachineClass = serde_json::from_value(c).unwrap();
        store.create_obj(&typed).await.unwrap();

        let mac = [0x52, 0x54, 0x00, 0xee, 0x00, i as u8];
        let mac_s = format!("52:54:00:ee:00:{i:02x}");
        // Reserved on loopback: the install script goes only to the
        // machine's address, and this client's requests come from it.
        let here = format!("127.0.9.{}", 10 + i);
        let m = bootlab::machine(&format!("ex-{i}"), &mac_s, &format!("{here}/8"), &name);
        let http = reqwest::Client::builder()
            .local_address(here.parse::<std::net::IpAddr>().unwrap())
            .build()
            .unwrap();
        bootlab::create_booting(store.as_ref(), &m, "boot-1").await;
        for _ in 0..250 {
            if matches!(
                directory.by_mac(&mac).map(|e| e.intent.clone()),
                Some(metalherd::directory::BootIntent::Install { .. })
            ) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let r = http
            .get(format!("{url}/boot.ipxe?mac={}", mac_s.replace(':', "-")))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let script = r.text().await.unwrap();
        assert_eq!(status, 200, "class {name}: {script}");
        for key in ["kernel", "initrd"] {
            let want = &bodies[key];
            let link = script
                .split_whitespace()
                .find(|w| w.contains("/images/") && w.contains(&format!("/{key}?")))
                .unwrap_or_else(|| panic!("class {name}: no {key} link in\n{script}"));
            let got = http.get(link).send().await.unwrap();
            assert_eq!(got.status(), 200, "class {name}: {link}");
            assert_eq!(&got.bytes().await.unwrap()[..], &want[..], "{name} {key}");
        }
    }
}

#[tokio::test]
async fn a_class_pinned_by_nothing_is_refused_at_validation() {
    let (_, flatcar) = example_docs()
        .into_iter()
        .find(|(f, _)| f == "class-flatcar.yaml")
        .unwrap();
    let mut c = flatcar;
    c["spec"]["image"]["initrd"] = json!({"url": "https://example.com/initrd.img"});
    let e = validate(Kind::MachineClass, &c).unwrap_err().to_string();
    assert!(
        e.contains("spec.image.initrd: not pinned") && e.contains("checksumsUrl"),
        "{e}"
    );
    assert!(!e.contains("spec.image.kernel"), "{e}");
}
