//! Story: "declare a Machine with its BMC Secret": the connector reads the
//! Secret from the store and hands out the right driver — Redfish (against
//! the Redfish test server) or IPMI (against pyghmi's fake BMC, suite 17 by
//! default, 3 when the Machine asks).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::ipmi_emulators::{PASSWORD, PyghmiBmc, USER};
use common::redfish_server::{RedfishServer, ServerOptions};
use metalherd::api::{Kind, Machine};
use metalherd::bmc::{BmcConnector, PowerState, StoreConnector, Timing};
use metalherd::store::Store;
use metalherd::store::embedded::EmbeddedStore;
use serde_json::json;

fn sim_timing() -> Timing {
    Timing {
        power_deadline: Duration::from_secs(20),
        poll_interval: Duration::from_millis(50),
        request_timeout: Duration::from_secs(5),
    }
}

async fn store_with_secret(dir: &std::path::Path, user: &str, pw: &str) -> Arc<dyn Store> {
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&dir.join("db")).unwrap());
    store
        .create(
            Kind::Secret,
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "rack1-bmc", "namespace": "default"},
                "stringData": {"username": user, "password": pw}}),
        )
        .await
        .unwrap();
    store
}

async fn machine(store: &Arc<dyn Store>, name: &str, bmc: serde_json::Value) -> Machine {
    let m = json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"bmc": bmc}});
    serde_json::from_value(store.create(Kind::Machine, m).await.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connector_reads_the_machines_secret_from_the_store() {
    let opts = ServerOptions::default();
    let pw = opts.password.clone();
    let srv = RedfishServer::start(opts).await;
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_secret(dir.path(), "root", &pw).await;
    let machine = machine(
        &store,
        "rack1-u7",
        json!({"address": format!("redfish+http://127.0.0.1:{}/redfish/v1/Systems/1", srv.port),
               "credentialsSecretRef": {"name": "rack1-bmc"}}),
    )
    .await;
    let connector = StoreConnector::new(store.clone(), sim_timing());
    let bmc = connector.connect(&machine).await.unwrap();
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    bmc.close().await.unwrap();
    assert_eq!(srv.counters().logouts, 1);

    // A Machine whose Secret is missing: a config error naming the Secret.
    let mut orphan = machine.clone();
    orphan.spec.bmc.credentials_secret_ref.name = "nope".into();
    let e = connector.connect(&orphan).await.err().unwrap();
    assert_eq!(e.reason(), "BmcConfigError");
    assert!(e.to_string().contains("nope"), "{e}");
    assert!(!e.to_string().contains(&pw));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connector_gives_ipmi_machines_the_ipmi_driver() {
    let emu = PyghmiBmc::start(true);
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_secret(dir.path(), USER, PASSWORD).await;
    let connector = StoreConnector::new(store.clone(), sim_timing());
    // No cipherSuite: 17.
    let m17 = machine(
        &store,
        "ipmi-17",
        json!({"address": format!("ipmi://127.0.0.1:{}", emu.port),
               "credentialsSecretRef": {"name": "rack1-bmc"}}),
    )
    .await;
    let bmc = connector.connect(&m17).await.unwrap();
    let st = bmc.power_state().await.unwrap();
    assert!(matches!(st, PowerState::On | PowerState::Off), "{st:?}");
    bmc.close().await.unwrap();
    // Suite 3 when the Machine asks for it.
    let m3 = machine(
        &store,
        "ipmi-3",
        json!({"address": format!("ipmi://127.0.0.1:{}", emu.port),
               "credentialsSecretRef": {"name": "rack1-bmc"}, "cipherSuite": 3}),
    )
    .await;
    let bmc = connector.connect(&m3).await.unwrap();
    assert_eq!(bmc.power_state().await.unwrap(), st);
    bmc.close().await.unwrap();
}
