//! The DHCP driver in-process (a thread inside the server namespace), with
//! the boot directory filled directly, against real clients: busybox udhcpc
//! and crafted PXE requests. Proves the sockets (SO_BINDTODEVICE, broadcast
//! replies) and the policy together without the rest of `metalherd serve`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::dhcp_clients::{self, Req};
use common::netns::VethPair;
use metalherd::api::{Kind, Machine};
use metalherd::dhcp::server::BoundServer;
use metalherd::dhcp::{DhcpConfig, DhcpSettings};
use metalherd::directory::{BootRecorder, Directory};
use metalherd::store::{Deleted, ListOptions, ObjectList, Store, StoreError, WatchStream};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// These tests keep discovery recording off: no store is needed.
struct NoStore;

#[async_trait]
impl Store for NoStore {
    async fn get(&self, _: Kind, _: &str, _: &str) -> Result<Value, StoreError> {
        Err(StoreError::Backend("no store in this test".into()))
    }
    async fn list(&self, _: Kind, _: &ListOptions) -> Result<ObjectList, StoreError> {
        Err(StoreError::Backend("no store in this test".into()))
    }
    async fn create(&self, _: Kind, _: Value) -> Result<Value, StoreError> {
        Err(StoreError::Backend("no store in this test".into()))
    }
    async fn update(&self, _: Kind, _: Value) -> Result<Value, StoreError> {
        Err(StoreError::Backend("no store in this test".into()))
    }
    async fn update_status(&self, _: Kind, _: Value) -> Result<Value, StoreError> {
        Err(StoreError::Backend("no store in this test".into()))
    }
    async fn delete(&self, _: Kind, _: &str, _: &str) -> Result<Deleted, StoreError> {
        Err(StoreError::Backend("no store in this test".into()))
    }
    async fn watch(
        &self,
        _: Kind,
        _: &ListOptions,
        _: Option<u64>,
    ) -> Result<WatchStream, StoreError> {
        Err(StoreError::Backend("no store in this test".into()))
    }
}

const MAC: &str = "52:54:00:12:34:56";

fn machine() -> Machine {
    serde_yaml::from_str(&format!(
        "apiVersion: metalherd.dev/v1alpha1\nkind: Machine\nmetadata: {{name: rack1-u07, namespace: default}}\n\
         spec:\n  bmc: {{address: 'ipmi://127.0.0.1:623', credentialsSecretRef: {{name: bmc}}}}\n  bootMACAddress: '{MAC}'\n\
         \x20 network: {{address: 10.77.0.7/24, gateway: 10.77.0.1, dns: [10.77.0.53], hostname: rack1-u07, domain: lab.test}}\n"
    ))
    .unwrap()
}

struct Server {
    cancel: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(ns: &str, yaml: &str, directory: Directory, data_dir: &Path) -> Server {
    let c: DhcpConfig = serde_yaml::from_str(yaml).unwrap();
    let settings = DhcpSettings::try_from(c).unwrap();
    let cancel = CancellationToken::new();
    let (tx, rx) = std::sync::mpsc::channel();
    let (c2, dir) = (cancel.clone(), data_dir.to_path_buf());
    let thread = dhcp_clients::in_netns(ns, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let bound = BoundServer::bind(settings, &dir).await;
            let bound = match bound {
                Ok(b) => {
                    tx.send(Ok(())).unwrap();
                    b
                }
                Err(e) => {
                    tx.send(Err(e.to_string())).unwrap();
                    return;
                }
            };
            bound
                .serve(
                    directory,
                    Arc::new(NoStore),
                    BootRecorder::discard(),
                    Default::default(),
                    c2,
                )
                .await
                .unwrap();
        });
    });
    rx.recv().unwrap().expect("dhcp server binds");
    Server {
        cancel,
        thread: Some(thread),
    }
}

fn config(iface: &str, extra: &str) -> String {
    format!(
        "interface: {iface}\nhttpBootUrl: http://10.77.0.1:8080\nsubnets:\n- subnet: 10.77.0.0/24\n  ranges: [{{start: 10.77.0.100, end: 10.77.0.150}}]\n  router: 10.77.0.1\n  dns: [10.77.0.1]\n{extra}"
    )
}

#[test]
fn udhcpc_gets_its_reserved_address_and_pxe_options() {
    let pair = VethPair::new("10.77.0.1/24", None);
    pair.client
        .exec(&["ip", "link", "set", "dev", &pair.client_if, "address", MAC]);
    let dir = tempfile::tempdir().unwrap();
    let directory = Directory::new();
    directory.upsert(&machine());
    let _srv = serve(
        &pair.server.name,
        &config(&pair.server_if, ""),
        directory,
        dir.path(),
    );

    let env = dhcp_clients::udhcpc(
        &pair.client.name,
        &pair.client_if,
        dir.path(),
        &[
            "-V",
            "PXEClient:Arch:00007:UNDI:003016",
            "-x",
            "0x5d:0007",
            "-O",
            "66",
            "-O",
            "67",
        ],
    )
    .expect("udhcpc got a lease");
    assert_eq!(
        env.get("ip").map(String::as_str),
        Some("10.77.0.7"),
        "{env:?}"
    );
    assert_eq!(env.get("router").map(String::as_str), Some("10.77.0.1"));
    assert_eq!(env.get("dns").map(String::as_str), Some("10.77.0.53"));
    assert_eq!(env.get("hostname").map(String::as_str), Some("rack1-u07"));
    assert_eq!(env.get("domain").map(String::as_str), Some("lab.test"));
    assert_eq!(env.get("siaddr").map(String::as_str), Some("10.77.0.1"));
    assert_eq!(env.get("boot_file").map(String::as_str), Some("ipxe.efi"));
    assert_eq!(env.get("bootfile").map(String::as_str), Some("ipxe.efi"));
    assert_eq!(env.get("serverid").map(String::as_str), Some("10.77.0.1"));
}

#[test]
fn crafted_pxe_client_unknown_gets_nothing_without_discovery() {
    let pair = VethPair::new("10.77.0.1/24", None);
    let dir = tempfile::tempdir().unwrap();
    let _srv = serve(
        &pair.server.name,
        &config(&pair.server_if, ""),
        Directory::new(),
        dir.path(),
    );
    let iface = pair.client_if.clone();
    let got = dhcp_clients::in_netns(&pair.client.name, move || {
        let s = dhcp_clients::bound_socket(&iface, Ipv4Addr::UNSPECIFIED, 68);
        let req = Req::new(1, [2, 0, 0, 0, 0, 0x42]).pxe(0);
        dhcp_clients::exchange(
            &s,
            &req,
            SocketAddr::from((Ipv4Addr::BROADCAST, 67)),
            Duration::from_secs(3),
        )
    })
    .join()
    .unwrap();
    assert!(got.is_none(), "an unknown client must get no reply");
}
