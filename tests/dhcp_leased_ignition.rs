//! Story: a Machine without a reserved address (no spec.network.address)
//! gets a stable address from the DHCP range and fetches its Ignition from
//! that address; the same token from another address is refused. The DHCP
//! server and the boot HTTP server run in-process inside the server
//! namespace, sharing the DHCP server's lease view as `serve` wires it; a
//! real busybox udhcpc leases the address and curl fetches the config.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::bootlab;
use common::dhcp_clients;
use common::netns::VethPair;
use metalherd::api::Machine;
use metalherd::dhcp::server::BoundServer;
use metalherd::dhcp::{DhcpConfig, DhcpSettings};
use metalherd::directory::{BootRecorder, Directory};
use metalherd::http::boot::config::BootConfig;
use metalherd::http::boot::{self, BootDeps, BootMetrics, BootState, LeaseLookup};
use metalherd::store::Store;
use metalherd::store::embedded::EmbeddedStore;
use tokio_util::sync::CancellationToken;

const MAC: &str = "52:54:00:00:10:01";
const MAC_BYTES: [u8; 6] = [0x52, 0x54, 0, 0, 0x10, 0x01];

struct Services {
    cancel: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Services {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Store, directory, DHCP and boot HTTP in the server namespace; returns
/// the Ignition token minted for the machine's boot.
fn start(pair: &VethPair, dir: &std::path::Path) -> (Services, String) {
    let yaml = format!(
        "interface: {}\nsubnets:\n- subnet: 10.78.0.0/24\n  ranges: [{{start: 10.78.0.100, end: 10.78.0.150}}]\n  router: 10.78.0.1\n",
        pair.server_if
    );
    let settings =
        DhcpSettings::try_from(serde_yaml::from_str::<DhcpConfig>(&yaml).unwrap()).unwrap();
    let cancel = CancellationToken::new();
    let (tx, rx) = std::sync::mpsc::channel();
    let (c, dir) = (cancel.clone(), dir.to_path_buf());
    let thread = dhcp_clients::in_netns(&pair.server.name, move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let store: Arc<dyn Store> =
                Arc::new(EmbeddedStore::open(&dir.join("store.redb")).unwrap());
            let directory = Directory::new();
            tokio::spawn(directory.clone().run(store.clone(), c.clone()));
            std::fs::write(dir.join("k"), b"kernel").unwrap();
            std::fs::write(dir.join("i"), b"initrd").unwrap();
            let class = bootlab::class(
                "workers",
                bootlab::file_artifact(&dir.join("k")),
                bootlab::file_artifact(&dir.join("i")),
                &["console=ttyS0"],
            );
            metalherd::store::TypedStore::create_obj(store.as_ref(), &class)
                .await
                .unwrap();
            let mut m = bootlab::machine("leased", MAC, "unused", "workers");
            m.spec.network.as_mut().unwrap().address = None;
            let m: Machine = bootlab::create_booting(store.as_ref(), &m, "boot-1").await;
            for _ in 0..250 {
                if directory.by_mac(&MAC_BYTES).is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(
                directory.by_mac(&MAC_BYTES).is_some(),
                "directory knows the machine"
            );

            let bound = BoundServer::bind(settings, &dir.join("data"))
                .await
                .unwrap();
            let view = bound.lease_view();
            let recorder = BootRecorder::spawn(store.clone(), c.clone());
            tokio::spawn(bound.serve(
                directory.clone(),
                Some(metalherd::discovery::spawn(store.clone(), c.clone())),
                recorder.clone(),
                Default::default(),
                c.clone(),
            ));
            let listener = tokio::net::TcpListener::bind("10.78.0.1:8080")
                .await
                .unwrap();
            let boot_settings = BootConfig {
                listen: Some("10.78.0.1:8080".into()),
                assets_dir: Some(dir.join("assets")),
                wait_seconds: Some(5),
                ..Default::default()
            }
            .settings(&dir.join("data"))
            .unwrap();
            let state = Arc::new(
                BootState::new(
                    boot_settings,
                    BootDeps {
                        store: store.clone(),
                        directory,
                        recorder,
                        ignition: Arc::new(boot::ignition::MinimalIgnition),
                        leases: Some(Arc::new(view) as Arc<dyn LeaseLookup>),
                        metrics: BootMetrics::default(),
                    },
                )
                .unwrap(),
            );
            let token = state.key.mint(m.metadata.uid.as_deref().unwrap(), "boot-1");
            tokio::spawn(boot::serve(listener, state, c.clone()));
            tx.send(token).unwrap();
            c.cancelled().await;
        });
    });
    let token = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("services start");
    (
        Services {
            cancel,
            thread: Some(thread),
        },
        token,
    )
}

/// curl the Ignition URL from `src` inside the client namespace; the status.
fn fetch(pair: &VethPair, src: &str, token: &str) -> String {
    let curl = common::require_tool("curl");
    let url = format!("http://10.78.0.1:8080/ignition?mac=52-54-00-00-10-01&token={token}");
    let out = pair
        .client
        .command(curl.to_str().unwrap())
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ])
        .args(["--interface", src, &url])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn machine_with_only_a_leased_address_fetches_its_ignition_from_it() {
    let pair = VethPair::new("10.78.0.1/24", None);
    pair.client
        .exec(&["ip", "link", "set", "dev", &pair.client_if, "address", MAC]);
    let dir = tempfile::tempdir().unwrap();
    let (_services, token) = start(&pair, dir.path());

    let env = dhcp_clients::udhcpc(&pair.client.name, &pair.client_if, dir.path(), &[])
        .expect("udhcpc got a lease");
    let ip = env.get("ip").cloned().expect("leased address");
    assert!(ip.starts_with("10.78.0.1"), "a pool address: {env:?}");
    // udhcpc's script only reports; configure the lease, plus a second
    // address on the same link that the machine did not lease.
    pair.client.exec(&[
        "ip",
        "addr",
        "add",
        &format!("{ip}/24"),
        "dev",
        &pair.client_if,
    ]);
    pair.client.exec(&[
        "ip",
        "addr",
        "add",
        "10.78.0.200/24",
        "dev",
        &pair.client_if,
    ]);

    assert_eq!(
        fetch(&pair, "10.78.0.200", &token),
        "403",
        "from an address it did not lease"
    );
    assert_eq!(
        fetch(&pair, &ip, &token),
        "200",
        "from its leased address {ip}"
    );
}
