//! `metalherd serve` for DHCP tests: Machines are written into the
//! embedded store file before the server starts, the server runs inside the
//! server namespace, and the store is read back after it stops.

use std::path::{Path, PathBuf};
use std::time::Duration;

use metalherd::store::TypedStore;

use super::netns::Netns;
use super::proc::{ChildGuard, wait_for};

pub fn store_path(data_dir: &Path) -> PathBuf {
    data_dir.join(metalherd::app::STORE_FILE)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Create objects in the (closed) store of `data_dir`.
pub fn seed<T: metalherd::store::Object>(data_dir: &Path, objs: &[T]) {
    std::fs::create_dir_all(data_dir).unwrap();
    let s = metalherd::store::embedded::EmbeddedStore::open(&store_path(data_dir)).unwrap();
    rt().block_on(async {
        for o in objs {
            s.create_obj(o).await.unwrap();
        }
    });
}

/// List objects of a kind from the (closed) store of `data_dir`.
pub fn list<T: metalherd::store::Object>(data_dir: &Path) -> Vec<T> {
    let s = metalherd::store::embedded::EmbeddedStore::open(&store_path(data_dir)).unwrap();
    rt().block_on(async { s.list_obj::<T>(&Default::default()).await.unwrap() })
}

/// Start `metalherd serve` in `ns` and wait until DHCP is bound.
pub fn start(ns: &Netns, config: &Path, data_dir: &Path, log: &Path) -> ChildGuard {
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
        if text.contains("dhcp server bound") {
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
        "metalherd serve did not bind DHCP: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    g
}
