//! Records unknown clients as `DiscoveredMachine` objects (name
//! `mac-<12 hex>`), from a background task fed by a bounded channel: the
//! packet path only does a non-blocking send and counts a full queue.
//! A client seen again within [`REFRESH`] is not written again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::policy::Discovered;
use crate::api::{DiscoveredMachine, DiscoveredMachineSpec};
use crate::store::{DEFAULT_NAMESPACE, Store, StoreError, TypedStore};

/// How often a client that keeps asking has its `lastSeen` refreshed.
pub const REFRESH: Duration = Duration::from_secs(60);

/// Object name for a MAC: `mac-525400123456`.
pub fn object_name(mac: &[u8; 6]) -> String {
    format!("mac-{}", hex::encode(mac))
}

fn arch_name(a: u16) -> String {
    use super::config::arch::*;
    match a {
        X86_BIOS => "x86-bios".into(),
        EFI_IA32 => "efi-ia32".into(),
        EFI_BC | EFI_X86_64 => "efi-x86_64".into(),
        EFI_ARM64 => "efi-arm64".into(),
        HTTP_X86 => "http-x86".into(),
        HTTP_X86_64 => "http-x86_64".into(),
        HTTP_ARM64 => "http-arm64".into(),
        n => format!("arch-{n}"),
    }
}

/// Create the object, or refresh `lastSeen` (and what changed) on an existing one.
pub async fn record(store: &dyn Store, d: &Discovered, now: Timestamp) -> Result<(), StoreError> {
    let name = object_name(&d.mac);
    let spec = DiscoveredMachineSpec {
        mac_address: super::packet::mac_str(&d.mac),
        architecture: d.arch.map(arch_name),
        vendor_class: d.vendor_class.clone(),
        address: d.address.map(|a| a.to_string()),
        first_seen: now,
        last_seen: now,
    };
    for _ in 0..5 {
        match store
            .get_obj::<DiscoveredMachine>(DEFAULT_NAMESPACE, &name)
            .await
        {
            Ok(mut cur) => {
                cur.spec = DiscoveredMachineSpec {
                    first_seen: cur.spec.first_seen,
                    architecture: spec.architecture.clone().or(cur.spec.architecture),
                    vendor_class: spec.vendor_class.clone().or(cur.spec.vendor_class),
                    address: spec.address.clone().or(cur.spec.address),
                    ..spec.clone()
                };
                match store.update_obj(&cur).await {
                    Err(e) if e.is_conflict() => continue,
                    r => return r.map(|_| ()),
                }
            }
            Err(e) if e.is_not_found() => {
                let mut obj = DiscoveredMachine::new(&name, spec.clone());
                obj.metadata.namespace = Some(DEFAULT_NAMESPACE.into());
                match store.create_obj(&obj).await {
                    Err(StoreError::AlreadyExists { .. }) => continue,
                    r => return r.map(|_| ()),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Start the recorder task; returns the sender the driver uses.
pub fn spawn(store: Arc<dyn Store>, cancel: CancellationToken) -> mpsc::Sender<Discovered> {
    let (tx, mut rx) = mpsc::channel::<Discovered>(1024);
    tokio::spawn(async move {
        let mut seen: HashMap<([u8; 6], Option<std::net::Ipv4Addr>), Instant> = HashMap::new();
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
                tracing::warn!(mac = %super::packet::mac_str(&d.mac), error = %e, "cannot record discovered machine");
            }
        }
    });
    tx
}
