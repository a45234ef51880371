//! A boot HTTP server on loopback over the embedded store, its directory
//! fed by the store and its recorder writing boot steps, for tests of the
//! boot endpoints over real sockets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metalherd::directory::{BootRecorder, Directory};
use metalherd::http::boot::config::BootConfig;
use metalherd::http::boot::{self, BootDeps, BootMetrics, BootState, TokenKey};
use metalherd::store::Store;
use metalherd::store::embedded::EmbeddedStore;
use tokio_util::sync::CancellationToken;

pub struct Server {
    pub url: String,
    pub store: Arc<dyn Store>,
    pub directory: Directory,
    pub key: TokenKey,
    pub assets: std::path::PathBuf,
    _dir: Option<tempfile::TempDir>,
    cancel: CancellationToken,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// A boot server over a store of its own, in a temporary directory.
pub async fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&dir.path().join("s.redb")).unwrap());
    let mut s = start_on(store, &dir.path().join("data")).await;
    s._dir = Some(dir);
    s
}

/// A boot server over `store` with `data` as its data directory (assets
/// in `data/assets`); it stops when the returned value is dropped.
pub async fn start_on(store: Arc<dyn Store>, data: &std::path::Path) -> Server {
    let assets = data.join("assets");
    std::fs::create_dir_all(&assets).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let cfg = BootConfig {
        listen: Some(addr.to_string()),
        assets_dir: Some(assets.clone()),
        wait_seconds: Some(5),
        ..Default::default()
    };
    let settings = cfg.settings(data).unwrap();
    let cancel = CancellationToken::new();
    let directory = Directory::new();
    tokio::spawn(directory.clone().run(store.clone(), cancel.clone()));
    let state = Arc::new(
        BootState::new(
            settings,
            BootDeps {
                store: store.clone(),
                directory: directory.clone(),
                recorder: BootRecorder::spawn(store.clone(), cancel.clone()),
                ignition: Arc::new(boot::ignition::MinimalIgnition),
                leases: None,
                metrics: BootMetrics::default(),
            },
        )
        .unwrap(),
    );
    let key = state.key.clone();
    tokio::spawn(boot::serve(listener, state, cancel.clone()));
    Server {
        url: format!("http://{addr}"),
        store,
        directory,
        key,
        assets,
        _dir: None,
        cancel,
    }
}

pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

pub async fn wait_known(s: &Server, mac: [u8; 6], boot: Option<&str>) {
    for _ in 0..200 {
        if let Some(e) = s.directory.by_mac(&mac) {
            match (&e.intent, boot) {
                (metalherd::directory::BootIntent::Install { boot_id, .. }, Some(b))
                    if boot_id == b =>
                {
                    return;
                }
                (_, None) => return,
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("directory never saw the machine");
}

/// A client whose connections come from `ip` (any 127.0.0.0/8 address is
/// this host's): another host on the boot network, as the server sees it.
pub fn client_from(ip: &str) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .local_address(ip.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap()
}
