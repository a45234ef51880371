//! Records the clients the DHCP server reports as unknown
//! ([`DiscoveredClient`]) as `DiscoveredMachine` objects (name
//! `mac-<12 hex>`), from a background task reading the channel the DHCP
//! server sends on. A client seen again within [`REFRESH`] is not written
//! again. The composition root connects the two; DHCP never sees the store.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Instant;

use jiff::Timestamp;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::api::{DiscoveredMachine, DiscoveredMachineSpec};
use crate::dhcp::discovery::{DiscoveredClient, REFRESH, object_name};
use crate::store::modify::{Target, modify_obj};
use crate::store::{DEFAULT_NAMESPACE, Store, StoreError};

/// Create the object, or refresh `lastSeen` (and what changed) on an existing one.
pub async fn record(
    store: &dyn Store,
    d: &DiscoveredClient,
    now: Timestamp,
) -> Result<(), StoreError> {
    let name = object_name(&d.mac);
    let spec = DiscoveredMachineSpec {
        mac_address: crate::api::MacAddr(d.mac).to_string(),
        architecture: d.architecture.clone(),
        vendor_class: d.vendor_class.clone(),
        address: d.address.map(|a| a.to_string()),
        first_seen: now,
        last_seen: now,
    };
    modify_obj::<DiscoveredMachine>(
        store,
        DEFAULT_NAMESPACE,
        &name,
        Target::ObjectOrCreate,
        |cur| {
            Ok(Some(match cur {
                Some(mut cur) => {
                    cur.spec = DiscoveredMachineSpec {
                        first_seen: cur.spec.first_seen,
                        architecture: spec.architecture.clone().or(cur.spec.architecture),
                        vendor_class: spec.vendor_class.clone().or(cur.spec.vendor_class),
                        address: spec.address.clone().or(cur.spec.address),
                        ..spec.clone()
                    };
                    cur
                }
                None => {
                    let mut obj = DiscoveredMachine::new(&name, spec.clone());
                    obj.metadata.namespace = Some(DEFAULT_NAMESPACE.into());
                    obj
                }
            }))
        },
    )
    .await
    .map(|_| ())
}

/// Start the recorder task; returns the sender to give the DHCP server.
pub fn spawn(store: Arc<dyn Store>, cancel: CancellationToken) -> mpsc::Sender<DiscoveredClient> {
    let (tx, mut rx) = mpsc::channel::<DiscoveredClient>(1024);
    tokio::spawn(async move {
        let mut seen: HashMap<([u8; 6], Option<Ipv4Addr>), Instant> = HashMap::new();
        loop {
            let d = tokio::select! {
                _ = cancel.cancelled() => return,
                d = rx.recv() => match d { Some(d) => d, None => return },
            };
            let key = (d.mac, d.address);
            if seen.get(&key).is_some_and(|t| t.elapsed() < REFRESH) {
                continue;
            }
            if seen.len() > 100_000 {
                seen.retain(|_, t| t.elapsed() < REFRESH);
            }
            seen.insert(key, Instant::now());
            if let Err(e) = record(store.as_ref(), &d, Timestamp::now()).await {
                tracing::warn!(mac = %crate::api::MacAddr(d.mac), error = %e, "cannot record discovered machine");
            }
        }
    });
    tx
}
