//! Boot HTTP endpoints against a real listener and the embedded store:
//! ranges return exactly the requested bytes, conditional requests work,
//! the Ignition endpoint refuses a wrong token, a wrong address and a
//! reused token (each with a Warning event, and one generic word to the
//! client), call-homes close the boot, a deprovisioning boot gets the live
//! OS with the wipe config and its `wiped` closes it (and the controller
//! then powers off and lets the Machine go), and malformed requests get a
//! 400 with a reason.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::boot_server::{client, start, wait_known};
use common::bootlab;
use metalherd::api::{Kind, Machine};
use metalherd::store::TypedStore;
use metalherd::store::events::list_for;

#[path = "boot_http/deprovision.rs"]
mod deprovision;

#[tokio::test]
async fn ranges_return_exactly_the_requested_bytes() {
    let s = start().await;
    // Streamed from disk (over 256 KiB), and from memory (small assets).
    for len in [300_000usize, 70_000] {
        ranges_of(&s, len).await;
    }
    // A small asset rewritten on disk is served anew, once the memory
    // copy's revalidation window has passed.
    let u = format!("{}/assets/small.ipxe", s.url);
    std::fs::write(s.assets.join("small.ipxe"), b"#!ipxe\nboot one\n").unwrap();
    let c = client();
    let first = c.get(&u).send().await.unwrap().text().await.unwrap();
    assert_eq!(first, "#!ipxe\nboot one\n");
    std::fs::write(s.assets.join("small.ipxe"), b"#!ipxe\nboot the other\n").unwrap();
    let mut second = String::new();
    for _ in 0..100 {
        second = c.get(&u).send().await.unwrap().text().await.unwrap();
        if second != first {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(second, "#!ipxe\nboot the other\n");
    for bad in [
        "../s.redb",
        "%2e%2e/s.redb",
        "..%2fs.redb",
        "missing.bin",
        ".hidden",
    ] {
        let r = c
            .get(format!("{}/assets/{bad}", s.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{bad}");
    }
}

async fn ranges_of(s: &common::boot_server::Server, len: usize) {
    let data: Vec<u8> = (0..len as u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let name = format!("ipxe-{len}.efi");
    std::fs::write(s.assets.join(&name), &data).unwrap();
    let c = client();
    let u = format!("{}/assets/{name}", s.url);

    let full = c.get(&u).send().await.unwrap();
    assert_eq!(full.status(), 200);
    let etag = full.headers()["etag"].to_str().unwrap().to_string();
    assert_eq!(full.bytes().await.unwrap().as_ref(), &data[..]);

    let mid = len / 2;
    for (range, lo, hi) in [
        ("bytes=0-0".to_string(), 0usize, 0usize),
        ("bytes=100-1099".to_string(), 100, 1099),
        (format!("bytes={}-", len - 10), len - 10, len - 1),
        ("bytes=-10".to_string(), len - 10, len - 1),
        (format!("bytes={}-{}", mid - 5, mid + 5), mid - 5, mid + 5),
        (format!("bytes={}-999999", len - 1000), len - 1000, len - 1),
    ] {
        let r = c.get(&u).header("range", &range).send().await.unwrap();
        assert_eq!(r.status(), 206, "{len}: {range}");
        assert_eq!(
            r.headers()["content-range"].to_str().unwrap(),
            format!("bytes {lo}-{hi}/{len}")
        );
        assert_eq!(r.bytes().await.unwrap().as_ref(), &data[lo..=hi], "{range}");
    }
    let r = c
        .get(&u)
        .header("range", format!("bytes={len}-"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 416);
    assert_eq!(
        r.headers()["content-range"],
        format!("bytes */{len}").as_str()
    );
    // Several ranges: the whole body (allowed by RFC 9110).
    let r = c
        .get(&u)
        .header("range", "bytes=0-1,5-6")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().len(), data.len());
    // If-Range with a stale validator: the whole body.
    let r = c
        .get(&u)
        .header("range", "bytes=0-9")
        .header("if-range", "\"stale\"")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .get(&u)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);
    let r = c.head(&u).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-length"], len.to_string().as_str());
    assert_eq!(r.headers()["accept-ranges"], "bytes");
}

#[tokio::test]
async fn ignition_refuses_wrong_token_wrong_address_and_reused_token() {
    let s = start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k"), b"kernel").unwrap();
    std::fs::write(dir.path().join("i"), b"initrd").unwrap();
    let class = bootlab::class(
        "workers",
        bootlab::file_artifact(&dir.path().join("k")),
        bootlab::file_artifact(&dir.path().join("i")),
        &["console=ttyS0"],
    );
    s.store.create_obj(&class).await.unwrap();
    // Reserved on loopback: requests from this test come from its address.
    let here = bootlab::machine("here", "52:54:00:00:00:01", "127.0.0.1/8", "workers");
    let here = bootlab::create_booting(s.store.as_ref(), &here, "boot-1").await;
    let away = bootlab::machine("away", "52:54:00:00:00:02", "10.99.0.2/24", "workers");
    let away = bootlab::create_booting(s.store.as_ref(), &away, "boot-1").await;
    wait_known(&s, [0x52, 0x54, 0, 0, 0, 1], Some("boot-1")).await;
    wait_known(&s, [0x52, 0x54, 0, 0, 0, 2], Some("boot-1")).await;
    let uid = |m: &Machine| m.metadata.uid.clone().unwrap();
    let c = client();
    let ign = |mac: &str, token: &str| format!("{}/ignition?mac={mac}&token={token}", s.url);
    let good = s.key.mint(&uid(&here), "boot-1");

    // The script carries the Ignition URL with this boot's token.
    let script = c
        .get(format!(
            "{}/boot.ipxe?mac=52-54-00-00-00-01&arch=x86_64&platform=efi",
            s.url
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        script.contains(&format!(
            "ignition.config.url={}",
            ign("52-54-00-00-00-01", &good)
        )),
        "{script}"
    );

    // Wrong token (another machine's, and garbage).
    let other = s.key.mint(&uid(&away), "boot-1");
    for t in [other.as_str(), "00", "x"] {
        let r = c.get(ign("52-54-00-00-00-01", t)).send().await.unwrap();
        assert_eq!(r.status(), 403, "token {t}");
        assert_eq!(r.text().await.unwrap(), "forbidden\n");
    }
    // Wrong address: the right token for `away`, asked from here.
    let r = c
        .get(ign("52-54-00-00-00-02", &other))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // The client learns nothing about why: the same words as a wrong token.
    assert_eq!(r.text().await.unwrap(), "forbidden\n");
    // The right machine, token and address.
    let r = c.get(ign("52-54-00-00-00-01", &good)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(v["ignition"]["version"], "3.3.0");
    // Call home: installed closes the boot; the token is useless afterwards.
    let r = c
        .post(format!(
            "{}/callhome/installed?mac=52-54-00-00-00-01&token={good}",
            s.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c.get(ign("52-54-00-00-00-01", &good)).send().await.unwrap();
    assert_eq!(r.status(), 403, "reused token after the boot completed");
    assert_eq!(r.text().await.unwrap(), "forbidden\n");
    // A retried call-home is fine; a contradicting one is refused.
    let r = c
        .post(format!(
            "{}/callhome/installed?mac=52-54-00-00-00-01&token={good}",
            s.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .post(format!(
            "{}/callhome/failed?mac=52-54-00-00-00-01&token={good}&reason=x",
            s.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // The next boot mints a new token; the old one stays dead.
    bootlab::set_boot(s.store.as_ref(), &here, "boot-2").await;
    wait_known(&s, [0x52, 0x54, 0, 0, 0, 1], Some("boot-2")).await;
    let r = c.get(ign("52-54-00-00-00-01", &good)).send().await.unwrap();
    assert_eq!(r.status(), 403, "token of an earlier boot");
    let fresh = s.key.mint(&uid(&here), "boot-2");
    let r = c
        .get(ign("52-54-00-00-00-01", &fresh))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(!r.bytes().await.unwrap().is_empty());

    // Noted once the body is out (in the background).
    let mut served = None;
    for _ in 0..100 {
        let m: Machine = s.store.get_obj("default", "here").await.unwrap();
        let b = m.status.unwrap().boot.unwrap();
        assert_eq!(b.id, "boot-2");
        served = b.ignition_served_at;
        if served.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served.is_some());
    // Every refusal left a Warning event on the Machine it concerned.
    let evs = list_for(s.store.as_ref(), Kind::Machine, "default", "here")
        .await
        .unwrap();
    let refused: i32 = evs
        .iter()
        .filter(|e| e.type_ == "Warning" && e.reason.ends_with("Refused"))
        .map(|e| e.count)
        .sum();
    assert!(refused >= 6, "{evs:#?}");
    assert!(
        evs.iter().all(|e| !e.message.contains(&good)),
        "a token leaked into an event"
    );
    let evs = list_for(s.store.as_ref(), Kind::Machine, "default", "away")
        .await
        .unwrap();
    assert!(
        evs.iter().any(|e| e.message.contains("address")),
        "{evs:#?}"
    );

    // The steps are in the boot history (written in the background, held
    // up to `metalherd::directory::HOLD` first).
    let mut steps = Vec::new();
    for _ in 0..500 {
        let m: Machine = s.store.get_obj("default", "here").await.unwrap();
        steps = m
            .status
            .unwrap()
            .boot_history
            .iter()
            .map(|e| e.step.to_string())
            .collect::<Vec<_>>();
        if steps.len() >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The retried call-home is not a second step.
    assert_eq!(steps, ["Script", "Ignition", "Installed", "Ignition"]);
}

#[tokio::test]
async fn scripts_images_and_malformed_requests() {
    let s = start().await;
    let dir = tempfile::tempdir().unwrap();
    let kernel: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    std::fs::write(dir.path().join("k"), &kernel).unwrap();
    std::fs::write(dir.path().join("i"), b"initrd").unwrap();
    let class = bootlab::class(
        "workers",
        bootlab::file_artifact(&dir.path().join("k")),
        bootlab::file_artifact(&dir.path().join("i")),
        &[],
    );
    s.store.create_obj(&class).await.unwrap();
    let m = bootlab::machine("m1", "52:54:00:00:00:01", "127.0.0.1/8", "workers");
    bootlab::create_booting(s.store.as_ref(), &m, "boot-1").await;
    wait_known(&s, [0x52, 0x54, 0, 0, 0, 1], Some("boot-1")).await;
    let c = client();
    let get = |p: &str| c.get(format!("{}{p}", s.url)).send();

    let chain = get("/boot.ipxe").await.unwrap().text().await.unwrap();
    assert!(chain.contains("${mac:hexhyp}"));
    let script = get("/boot.ipxe?mac=52:54:00:00:00:01&platform=pcbios")
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let kernel_url = script
        .lines()
        .find_map(|l| l.strip_prefix("kernel "))
        .and_then(|l| l.split(' ').next())
        .unwrap()
        .to_string();
    let r = c.get(&kernel_url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), &kernel[..]);
    let r = c
        .get(&kernel_url)
        .header("range", "bytes=10-19")
        .send()
        .await
        .unwrap();
    assert_eq!(r.bytes().await.unwrap().as_ref(), &kernel[10..20]);

    // Unknown machines get the discovery script and no OS; the DHCP
    // server's DiscoveredMachine has its lastSeen refreshed, but HTTP alone
    // never creates one.
    let seen_long_ago = jiff::Timestamp::UNIX_EPOCH;
    let mut dm = metalherd::api::DiscoveredMachine::new(
        "mac-525400aabbcc",
        metalherd::api::DiscoveredMachineSpec {
            mac_address: "52:54:00:aa:bb:cc".into(),
            architecture: Some("efi-x86_64".into()),
            vendor_class: None,
            address: None,
            first_seen: seen_long_ago,
            last_seen: seen_long_ago,
        },
    );
    dm.metadata.namespace = Some("default".into());
    s.store.create_obj(&dm).await.unwrap();
    let d = get("/boot.ipxe?mac=52-54-00-aa-bb-cc&arch=7")
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(d.contains("not known") && !d.contains("kernel"), "{d}");
    let dm: metalherd::api::DiscoveredMachine = s
        .store
        .get_obj("default", "mac-525400aabbcc")
        .await
        .unwrap();
    assert!(dm.spec.last_seen > seen_long_ago);
    assert_eq!(dm.spec.architecture.as_deref(), Some("efi-x86_64"));
    let d = get("/boot.ipxe?mac=52-54-00-aa-bb-dd")
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(d.contains("not known"));
    let all: Vec<metalherd::api::DiscoveredMachine> =
        s.store.list_obj(&Default::default()).await.unwrap();
    assert_eq!(all.len(), 1, "HTTP must not create DiscoveredMachines");

    for (path, status, words) in [
        ("/boot.ipxe?mac=zz", 400, "mac"),
        (
            "/boot.ipxe?mac=52-54-00-00-00-01&arch=x%0Ashell",
            400,
            "arch",
        ),
        ("/ignition", 400, "mac"),
        ("/ignition?mac=52-54-00-00-00-01", 400, "token"),
        (
            "/ignition?mac=52-54-00-00-00-01&token=aa&stage=evil",
            400,
            "stage",
        ),
        ("/ignition?mac=52-54-00-99-99-99&token=aa", 403, "forbidden"),
        ("/images/notasha/kernel", 404, "no such image"),
        ("/nope", 404, "not found"),
    ] {
        let r = get(path).await.unwrap();
        assert_eq!(r.status(), status, "{path}");
        assert!(r.text().await.unwrap().contains(words), "{path}");
    }
    let r = c
        .post(format!(
            "{}/callhome/rebooted?mac=52-54-00-00-00-01&token=aa",
            s.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = c
        .post(format!(
            "{}/callhome/failed?mac=52-54-00-00-00-01&token=aa",
            s.url
        ))
        .body(vec![b'x'; 10_000])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413, "body limit");

    let mut steps = Vec::new();
    for _ in 0..500 {
        let m: Machine = s.store.get_obj("default", "m1").await.unwrap();
        steps = m
            .status
            .unwrap()
            .boot_history
            .iter()
            .map(|e| (e.step.to_string(), e.bytes))
            .collect::<Vec<_>>();
        if steps.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(steps[0].0, "Script");
    assert_eq!(steps[1], ("Kernel".to_string(), Some(100_000)));
    assert_eq!(steps[2], ("Kernel".to_string(), Some(10)));
}

#[tokio::test]
async fn image_cache_downloads_over_http_once_and_verifies() {
    let s = start().await;
    let bytes: Vec<u8> = (0..500_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(s.assets.join("vmlinuz"), &bytes).unwrap();
    let sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&bytes))
    };
    let dir = tempfile::tempdir().unwrap();
    let cache = metalherd::files::ImageCache::new(dir.path().join("cache"));
    let art = metalherd::api::Artifact {
        url: format!("{}/assets/vmlinuz", s.url),
        sha256: Some(sha.clone()),
        sha512: None,
        checksums_url: None,
    };
    // Concurrent requests share one download.
    let (a, b) = tokio::join!(cache.ensure(&art), cache.ensure(&art));
    assert_eq!(a.unwrap(), sha);
    assert_eq!(b.unwrap(), sha);
    assert_eq!(
        std::fs::read(cache.lookup(&sha).await.unwrap()).unwrap(),
        bytes
    );
    // Served from disk afterwards: the source can go away.
    std::fs::remove_file(s.assets.join("vmlinuz")).unwrap();
    assert_eq!(cache.ensure(&art).await.unwrap(), sha);
    // A digest that does not match is never cached.
    std::fs::write(s.assets.join("other"), b"other").unwrap();
    let bad = metalherd::api::Artifact {
        url: format!("{}/assets/other", s.url),
        sha256: Some("0".repeat(64)),
        sha512: None,
        checksums_url: None,
    };
    assert!(matches!(
        cache.ensure(&bad).await,
        Err(metalherd::files::CacheError::Mismatch { .. })
    ));
    assert!(cache.lookup(&"0".repeat(64)).await.is_none());
    let missing = metalherd::api::Artifact {
        url: format!("{}/assets/missing", s.url),
        sha256: Some("1".repeat(64)),
        sha512: None,
        checksums_url: None,
    };
    assert!(matches!(
        cache.ensure(&missing).await,
        Err(metalherd::files::CacheError::Download { .. })
    ));
}

#[tokio::test]
async fn a_fedora_coreos_live_boot_gets_its_rootfs_url() {
    let s = start().await;
    let dir = tempfile::tempdir().unwrap();
    for (f, bytes) in [
        ("kernel", &b"fcos kernel"[..]),
        ("initramfs", b"fcos initramfs"),
        ("rootfs.img", b"fcos live rootfs"),
    ] {
        std::fs::write(dir.path().join(f), bytes).unwrap();
    }
    let mut class = bootlab::class(
        "fcos",
        bootlab::file_artifact(&dir.path().join("kernel")),
        bootlab::file_artifact(&dir.path().join("initramfs")),
        &["console=ttyS0"],
    );
    class.spec.image.os = "fedora-coreos".into();
    class.spec.image.version = "42.20250721.3.0".into();
    class.spec.image.rootfs = Some(bootlab::file_artifact(&dir.path().join("rootfs.img")));
    s.store.create_obj(&class).await.unwrap();
    let m = bootlab::machine("fcos-1", "52:54:00:00:0f:01", "127.0.0.1/8", "fcos");
    let m = bootlab::create_booting(s.store.as_ref(), &m, "boot-1").await;
    wait_known(&s, [0x52, 0x54, 0, 0, 0x0f, 1], Some("boot-1")).await;
    let c = client();
    let r = c
        .get(format!(
            "{}/boot.ipxe?mac=52-54-00-00-0f-01&arch=x86_64&platform=efi",
            s.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let script = r.text().await.unwrap();
    // The rootfs URL on the kernel line serves the class's rootfs.
    let url = script
        .split_whitespace()
        .find_map(|a| a.strip_prefix("coreos.live.rootfs_url="))
        .unwrap_or_else(|| panic!("no coreos.live.rootfs_url in:\n{script}"));
    let got = c.get(url).send().await.unwrap();
    assert_eq!(got.status(), 200, "{url}");
    assert_eq!(got.bytes().await.unwrap().as_ref(), b"fcos live rootfs");
    // The whole script, with the per-run parts (port, token) replaced.
    let token = s.key.mint(m.metadata.uid.as_deref().unwrap(), "boot-1");
    let shown = script
        .replace(&s.url, "http://BOOT")
        .replace(&token, "TOKEN");
    insta::assert_snapshot!("fcos_live_install_script", shown);
}
