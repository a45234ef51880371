//! Records the clients the DHCP server reports as unknown
//! ([`DiscoveredClient`]) as `DiscoveredMachine` objects (name
//! `mac-<12 hex>`), from a background task reading the channel the DHCP
//! server sends on. A client seen again within [`REFRESH`] is not written
//! again. The set is bounded and expires ([`Limits`]): past the cap new
//! clients are not recorded (a flood of random MACs leaves at most the
//! cap), and an object not seen for the TTL is deleted. The composition
//! root connects the two; DHCP never sees the store.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::api::{DiscoveredMachine, DiscoveredMachineSpec};
use crate::dhcp::discovery::{DiscoveredClient, REFRESH, object_name};
use crate::store::modify::{Target, modify_obj};
use crate::store::{DEFAULT_NAMESPACE, ListOptions, Store, StoreError, TypedStore};

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

/// How many DiscoveredMachine objects are kept, and for how long unseen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub cap: usize,
    pub ttl: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            cap: 1024,
            ttl: Duration::from_secs(86_400),
        }
    }
}

/// Delete the DiscoveredMachines not seen within `ttl` of `now`; returns
/// the names of those kept.
pub async fn sweep(
    store: &dyn Store,
    ttl: Duration,
    now: Timestamp,
) -> Result<HashSet<String>, StoreError> {
    let ttl = jiff::SignedDuration::try_from(ttl).unwrap_or(jiff::SignedDuration::MAX);
    let all: Vec<DiscoveredMachine> = store.list_obj(&ListOptions::default()).await?;
    let mut kept = HashSet::new();
    for d in all {
        let name = d.metadata.name.clone().unwrap_or_default();
        if now.duration_since(d.spec.last_seen) > ttl {
            match store
                .delete_obj::<DiscoveredMachine>(DEFAULT_NAMESPACE, &name)
                .await
            {
                Ok(_) => continue,
                Err(e) if e.is_not_found() => continue,
                Err(e) => tracing::warn!(%name, error = %e, "cannot expire discovered machine"),
            }
        }
        kept.insert(name);
    }
    Ok(kept)
}

/// Start the recorder task with the default [`Limits`].
pub fn spawn(store: Arc<dyn Store>, cancel: CancellationToken) -> mpsc::Sender<DiscoveredClient> {
    spawn_with(store, Limits::default(), cancel)
}

/// Start the recorder task; returns the sender to give the DHCP server.
pub fn spawn_with(
    store: Arc<dyn Store>,
    limits: Limits,
    cancel: CancellationToken,
) -> mpsc::Sender<DiscoveredClient> {
    let (tx, mut rx) = mpsc::channel::<DiscoveredClient>(1024);
    tokio::spawn(async move {
        let mut seen: HashMap<([u8; 6], Option<Ipv4Addr>), Instant> = HashMap::new();
        // Names of the objects that exist; refreshed by every sweep.
        let mut known: HashSet<String> = HashSet::new();
        let every = (limits.ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(300));
        let mut tick = tokio::time::interval(every);
        let mut refused = 0u64;
        loop {
            let d = tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {
                    match sweep(store.as_ref(), limits.ttl, Timestamp::now()).await {
                        Ok(k) => known = k,
                        Err(e) => tracing::warn!(error = %e, "cannot sweep discovered machines"),
                    }
                    continue;
                }
                d = rx.recv() => match d { Some(d) => d, None => return },
            };
            let key = (d.mac, d.address);
            if seen.get(&key).is_some_and(|t| t.elapsed() < REFRESH) {
                continue;
            }
            let name = object_name(&d.mac);
            if !known.contains(&name) && known.len() >= limits.cap {
                refused += 1;
                if refused.is_power_of_two() {
                    tracing::warn!(
                        cap = limits.cap,
                        refused,
                        "discovered machines at their cap; not recording more"
                    );
                }
                continue;
            }
            if seen.len() > 100_000 {
                seen.retain(|_, t| t.elapsed() < REFRESH);
            }
            seen.insert(key, Instant::now());
            match record(store.as_ref(), &d, Timestamp::now()).await {
                Ok(()) => {
                    known.insert(name);
                }
                Err(e) => {
                    tracing::warn!(mac = %crate::api::MacAddr(d.mac), error = %e, "cannot record discovered machine");
                }
            }
        }
    });
    tx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::embedded::EmbeddedStore;

    fn client(i: u32) -> DiscoveredClient {
        let b = i.to_be_bytes();
        DiscoveredClient {
            mac: [0x02, 0, b[0], b[1], b[2], b[3]],
            architecture: None,
            vendor_class: None,
            address: None,
        }
    }

    async fn count(store: &dyn Store) -> usize {
        store
            .list_obj::<DiscoveredMachine>(&ListOptions::default())
            .await
            .unwrap()
            .len()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flood_of_macs_leaves_at_most_the_cap_and_old_ones_expire() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(EmbeddedStore::open(&dir.path().join("s.redb")).unwrap());
        let cancel = CancellationToken::new();
        let limits = Limits {
            cap: 5,
            ttl: Duration::from_secs(3600),
        };
        let tx = spawn_with(store.clone(), limits, cancel.clone());
        for i in 0..200 {
            tx.send(client(i)).await.unwrap();
        }
        // A client already recorded is still refreshed at the cap.
        tx.send(client(0)).await.unwrap();
        for _ in 0..100 {
            if count(store.as_ref()).await >= 5 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(count(store.as_ref()).await, 5);
        // Unseen past the TTL: deleted by the sweep.
        let later = Timestamp::now() + jiff::SignedDuration::from_hours(2);
        let kept = sweep(store.as_ref(), limits.ttl, later).await.unwrap();
        assert!(kept.is_empty());
        assert_eq!(count(store.as_ref()).await, 0);
        cancel.cancel();
    }
}
