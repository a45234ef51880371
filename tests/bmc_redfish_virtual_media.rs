//! Story: "boot a server from an ISO over Redfish virtual media", at the
//! driver: the image URL goes into the BMC's virtual CD and reads back, the
//! server is set to boot the CD once, the CD is ejected and reads back
//! empty. Against sushy-tools (fake driver), which downloads the image
//! during the InsertMedia POST from a small HTTP server in this test;
//! through a proxy that hides the System's own VirtualMedia link (the CD is
//! then found through the Manager, as on iDRAC and iLO); and against the
//! project's Redfish stand-in, which has no virtual media at all. The
//! image URL carries a token: no error shows it. (bmc_redfish.rs holds the
//! rest of the Redfish story; it is at the file size limit.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::bmc_proxy::{BmcProxy, Fault, Rule};
use common::redfish_server::{RedfishServer, ServerOptions};
use common::sushy::{Sushy, SushyOptions};
use metalherd::bmc::redfish::logic::RetryPolicy;
use metalherd::bmc::redfish::{RedfishBmc, TlsMode};
use metalherd::bmc::{Bmc, BmcError, BootDevice, Credentials, FirmwareMode, Timing};
use serde_json::Value;

/// A one-thread HTTP/1.1 server for a few files: what a BMC fetches an
/// image from. Records every request target; unknown paths answer 404.
struct Files {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Files {
    fn serve(files: HashMap<String, Vec<u8>>) -> Files {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut first = String::new();
                if r.read_line(&mut first).is_err() {
                    continue;
                }
                // The rest of the head, unread otherwise.
                let mut line = String::new();
                while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let target = first.split_whitespace().nth(1).unwrap_or("").to_string();
                log.lock().unwrap().push(target.clone());
                let path = target.split('?').next().unwrap_or("");
                let _ = match files.get(path) {
                    Some(body) => conn
                        .write_all(
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                                body.len()
                            )
                            .as_bytes(),
                        )
                        .and_then(|_| conn.write_all(body)),
                    None => conn.write_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    ),
                };
            }
        });
        Files { port, seen }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// How many requests asked for `path` (query ignored).
    fn fetches(&self, path: &str) -> usize {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|t| t.split('?').next() == Some(path))
            .count()
    }
}

/// A small "ISO" at a path with a token in it, as boot HTTP serves them.
const TOKEN: &str = "7c1f0e9a5b3d4e21";

fn iso_files() -> HashMap<String, Vec<u8>> {
    let iso: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    HashMap::from([
        (format!("/vmedia/{TOKEN}/boot.iso"), iso.clone()),
        (format!("/vmedia/{TOKEN}/second.iso"), iso),
    ])
}

fn timing() -> Timing {
    Timing {
        power_deadline: Duration::from_secs(40),
        poll_interval: Duration::from_millis(300),
        request_timeout: Duration::from_secs(10),
    }
}

fn sushy_bmc(s: &Sushy, base: url::Url) -> RedfishBmc {
    let (u, p) = s.opts.auth.clone().unwrap();
    RedfishBmc::with_retry(
        base,
        Some(format!("/redfish/v1/Systems/{}", s.opts.systems[0].uuid)),
        Credentials::new(u, p),
        &TlsMode::SystemRoots,
        timing(),
        RetryPolicy {
            max_attempts: 3,
            base_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(200),
            max_retry_after: Duration::from_secs(1),
        },
    )
    .unwrap()
}

/// A document as sushy itself serves it (read around the driver).
async fn sushy_get(s: &Sushy, path: &str) -> Value {
    metalherd::bmc::redfish::client::install_crypto_provider();
    let (u, p) = s.opts.auth.clone().unwrap();
    reqwest::Client::new()
        .get(format!("{}{}", s.base(), path.trim_start_matches('/')))
        .basic_auth(u, Some(p))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn cd_path(s: &Sushy) -> String {
    format!(
        "/redfish/v1/Systems/{}/VirtualMedia/Cd",
        s.opts.systems[0].uuid
    )
}

/// POSTs the proxy passed on, by path.
fn posts(proxy: &BmcProxy) -> Vec<String> {
    proxy
        .log()
        .into_iter()
        .filter(|(m, _, _)| m == "POST")
        .map(|(_, p, _)| p)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sushy_takes_the_iso_url_boots_the_cd_once_and_ejects_it() {
    let files = Files::serve(iso_files());
    let s = Sushy::start(SushyOptions::default());
    let proxy = BmcProxy::start(s.base()).await;
    let bmc = sushy_bmc(&s, proxy.base());
    let url = files.url(&format!("/vmedia/{TOKEN}/boot.iso"));

    bmc.insert_media(&url).await.unwrap();
    // sushy fetched the image during the POST, once.
    assert_eq!(
        files.fetches(&format!("/vmedia/{TOKEN}/boot.iso")),
        1,
        "{:?}\n{}",
        files.seen.lock().unwrap(),
        s.log()
    );
    let cd = sushy_get(&s, &cd_path(&s)).await;
    assert_eq!(cd["Inserted"], true, "{cd:#}");
    assert_eq!(cd["Image"], url.as_str());
    assert_eq!(cd["ImageName"], "boot.iso");
    assert_eq!(cd["WriteProtected"], true);
    // The action target from the resource, with the body the schema wants.
    let insert = format!("{}/Actions/VirtualMedia.InsertMedia", cd_path(&s));
    assert_eq!(posts(&proxy), vec![insert.clone()]);
    let (_, _, body) = proxy
        .bodies()
        .into_iter()
        .find(|(m, _, _)| m == "POST")
        .unwrap();
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"Image": url, "Inserted": true, "WriteProtected": true,
                           "TransferProtocolType": "HTTP"})
    );

    // Boot once from the CD: sushy's fake driver takes the target and
    // reads it back (as Continuous: its built-in quirk entry covers that).
    bmc.set_boot_once(BootDevice::Cd, FirmwareMode::Uefi)
        .await
        .unwrap();
    let sys = sushy_get(
        &s,
        &format!("/redfish/v1/Systems/{}", s.opts.systems[0].uuid),
    )
    .await;
    assert_eq!(sys["Boot"]["BootSourceOverrideTarget"], "Cd", "{sys:#}");

    // Another image into the full drive: ejected first, then inserted.
    let second = files.url(&format!("/vmedia/{TOKEN}/second.iso"));
    bmc.insert_media(&second).await.unwrap();
    let eject = format!("{}/Actions/VirtualMedia.EjectMedia", cd_path(&s));
    assert_eq!(
        posts(&proxy),
        vec![insert.clone(), eject.clone(), insert.clone()]
    );
    assert_eq!(sushy_get(&s, &cd_path(&s)).await["Image"], second.as_str());

    bmc.eject_media().await.unwrap();
    let cd = sushy_get(&s, &cd_path(&s)).await;
    assert_eq!(cd["Inserted"], false, "{cd:#}");
    assert_eq!(cd["Image"], "");
    // Ejecting the empty drive is fine, and sends nothing.
    bmc.eject_media().await.unwrap();
    assert_eq!(posts(&proxy).len(), 4, "{:?}", posts(&proxy));
    bmc.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cd_is_found_through_the_manager_when_the_system_links_none() {
    let files = Files::serve(iso_files());
    let s = Sushy::start(SushyOptions::default());
    let proxy = BmcProxy::start(s.base()).await;
    // The System's own link is gone (its template writes `"VirtualMedia": {`;
    // no other document sushy serves has that text).
    proxy.add(Rule::new(
        Some(reqwest::Method::GET),
        "/redfish/v1/Systems/",
        Fault::Rewrite(vec![(
            "\"VirtualMedia\": {".into(),
            "\"HiddenVirtualMedia\": {".into(),
        )]),
    ));
    let system = format!("/redfish/v1/Systems/{}", s.opts.systems[0].uuid);
    let (u, p) = s.opts.auth.clone().unwrap();
    metalherd::bmc::redfish::client::install_crypto_provider();
    let seen: Value = reqwest::Client::new()
        .get(format!(
            "{}{}",
            proxy.base(),
            system.trim_start_matches('/')
        ))
        .basic_auth(u, Some(p))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(seen.get("VirtualMedia").is_none(), "{seen:#}");

    let bmc = sushy_bmc(&s, proxy.base());
    let url = files.url(&format!("/vmedia/{TOKEN}/boot.iso"));
    bmc.insert_media(&url).await.unwrap();
    let asked: Vec<String> = proxy.log().into_iter().map(|(_, p, _)| p).collect();
    assert!(
        asked
            .iter()
            .any(|p| p == &format!("/redfish/v1/Managers/{}", s.opts.systems[0].uuid)),
        "the Manager was asked: {asked:?}"
    );
    assert_eq!(sushy_get(&s, &cd_path(&s)).await["Inserted"], true);
    bmc.eject_media().await.unwrap();
    assert_eq!(sushy_get(&s, &cd_path(&s)).await["Inserted"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_the_bmc_cannot_fetch_fails_the_insert_without_showing_the_token() {
    let files = Files::serve(iso_files());
    let s = Sushy::start(SushyOptions::default());
    let bmc = sushy_bmc(&s, s.base());
    // The server answers 404: sushy says 400 "Cannot download".
    let missing = files.url(&format!("/vmedia/{TOKEN}/gone.iso?sig=q9z8"));
    let e = bmc.insert_media(&missing).await.unwrap_err();
    assert!(
        matches!(e, BmcError::Http { status: 400, .. }),
        "{e:?}\n{}",
        s.log()
    );
    // Nobody listens: sushy quotes the URL it failed on; the error does not.
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let nowhere = format!("http://127.0.0.1:{closed}/vmedia/{TOKEN}/boot.iso?sig=q9z8");
    let e = bmc.insert_media(&nowhere).await.unwrap_err();
    let text = e.to_string();
    // Not even the part before a cut (sushy's text is longer than the
    // 200 bytes an error keeps).
    assert!(
        !text.contains(&TOKEN[..6]) && !text.contains("q9z8"),
        "{text}"
    );
    assert!(text.contains("/.../boot.iso"), "{text}");
    assert!(matches!(e, BmcError::Http { .. }), "{e:?}");
    // Nothing was left in the drive.
    let cd = sushy_get(&s, &cd_path(&s)).await;
    assert_eq!(cd["Inserted"], false, "{cd:#}");
    // Only http(s) URLs are sent at all.
    let e = bmc
        .insert_media("nfs://10.0.0.1/boot.iso")
        .await
        .unwrap_err();
    assert!(matches!(e, BmcError::Config(_)), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bmc_without_virtual_media_says_so_and_its_override_can_be_cleared() {
    // The stand-in has no VirtualMedia anywhere, and no Manager.
    let srv = RedfishServer::start(ServerOptions::default()).await;
    let bmc = RedfishBmc::new(
        srv.base(),
        None,
        Credentials::new("root", "calvin-9d2e"),
        &TlsMode::SystemRoots,
        timing(),
    )
    .unwrap();
    let e = bmc
        .insert_media("http://10.0.0.1:8080/vmedia/t/boot.iso")
        .await
        .unwrap_err();
    assert!(matches!(e, BmcError::Unsupported { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("does not support virtual media: the System has no VirtualMedia collection"),
        "{text}"
    );
    let e = bmc.eject_media().await.unwrap_err();
    assert!(matches!(e, BmcError::Unsupported { .. }), "{e:?}");

    // hw-test puts back "no override" by clearing it; the stand-in keeps
    // Boot in a settings object that wants If-Match.
    bmc.set_boot_once(BootDevice::Network, FirmwareMode::Uefi)
        .await
        .unwrap();
    bmc.disable_boot_override().await.unwrap();
    assert_eq!(srv.sim.lock().unwrap().boot.1, "Disabled");
    bmc.close().await.unwrap();
}
