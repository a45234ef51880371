//! The boot directory: an in-memory index from MAC (and IP) to what the
//! network boot services need to know about a Machine, fed by a store watch
//! so DHCP, TFTP and HTTP never wait on a store call per packet. Also the
//! [`BootRecorder`], which appends boot-history steps to Machines off the
//! hot path.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ipnet::Ipv4Net;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::api::{
    BOOT_HISTORY_LIMIT, BootEvent, BootPurpose, Kind, MacAddr, Machine, MachinePhase,
};
use crate::store::events::{EventType, Regarding, record};
use crate::store::modify::{Target, modify_obj};
use crate::store::reflect::{Reflected, reflect};
use crate::store::typed::from_value;
use crate::store::{ListOptions, Store, StoreError, WatchEvent};

/// What a Machine should do when it network-boots now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BootIntent {
    /// A network boot of the live OS with this boot's id: install or
    /// reimage (the live OS gets the install config), or deprovision (it
    /// gets the wipe config: the config follows the purpose).
    Install {
        boot_id: String,
        purpose: BootPurpose,
    },
    /// Provisioned and not being reimaged: boot from the local disk.
    LocalDisk,
    /// Known, but nothing to do (no class, or waiting): no OS is served.
    Idle,
}

/// The boot-relevant view of one Machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineEntry {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub mac: [u8; 6],
    /// Reserved address with its subnet, from `spec.network.address`.
    pub address: Option<Ipv4Net>,
    pub gateway: Option<Ipv4Addr>,
    pub dns: Vec<Ipv4Addr>,
    pub hostname: Option<String>,
    pub domain: Option<String>,
    pub phase: MachinePhase,
    pub intent: BootIntent,
}

impl MachineEntry {
    /// Build the entry for a Machine; `None` when it has no usable boot MAC.
    pub fn from_machine(m: &Machine) -> Option<MachineEntry> {
        let mac = m
            .spec
            .boot_mac_address
            .as_deref()?
            .parse::<MacAddr>()
            .ok()?
            .octets();
        let net = m.spec.network.clone().unwrap_or_default();
        let status = m.status.clone().unwrap_or_default();
        let phase = status.phase.unwrap_or_default();
        let intent = match &status.boot {
            Some(b) if b.completed_at.is_none() => BootIntent::Install {
                boot_id: b.id.clone(),
                purpose: b.purpose,
            },
            _ if matches!(phase, MachinePhase::Provisioned | MachinePhase::Ready) => {
                BootIntent::LocalDisk
            }
            _ => BootIntent::Idle,
        };
        Some(MachineEntry {
            namespace: m
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: m.metadata.name.clone().unwrap_or_default(),
            uid: m.metadata.uid.clone().unwrap_or_default(),
            mac,
            address: net.address.as_deref().and_then(|a| a.parse().ok()),
            gateway: net.gateway.as_deref().and_then(|a| a.parse().ok()),
            dns: net.dns.iter().filter_map(|d| d.parse().ok()).collect(),
            hostname: net.hostname.clone().or_else(|| m.metadata.name.clone()),
            domain: net.domain.clone(),
            phase,
            intent,
        })
    }
}

#[derive(Default)]
struct Index {
    by_key: HashMap<(String, String), Arc<MachineEntry>>,
    by_mac: HashMap<[u8; 6], Arc<MachineEntry>>,
    by_ip: HashMap<Ipv4Addr, Arc<MachineEntry>>,
}

/// Shared, cheap-to-clone index of Machines for the boot services.
#[derive(Clone, Default)]
pub struct Directory {
    inner: Arc<RwLock<Index>>,
}

impl Directory {
    pub fn new() -> Directory {
        Directory::default()
    }

    pub fn by_mac(&self, mac: &[u8; 6]) -> Option<Arc<MachineEntry>> {
        self.inner.read().ok()?.by_mac.get(mac).cloned()
    }

    pub fn by_ip(&self, ip: &Ipv4Addr) -> Option<Arc<MachineEntry>> {
        self.inner.read().ok()?.by_ip.get(ip).cloned()
    }

    pub fn by_name(&self, namespace: &str, name: &str) -> Option<Arc<MachineEntry>> {
        self.inner
            .read()
            .ok()?
            .by_key
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    pub fn len(&self) -> usize {
        self.inner.read().map(|i| i.by_key.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Insert or replace the entry for a Machine (removes it when the
    /// Machine has no usable boot MAC any more).
    pub fn upsert(&self, m: &Machine) {
        let key = (
            m.metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            m.metadata.name.clone().unwrap_or_default(),
        );
        let Ok(mut idx) = self.inner.write() else {
            return;
        };
        remove_key(&mut idx, &key);
        if let Some(e) = MachineEntry::from_machine(m) {
            let e = Arc::new(e);
            idx.by_mac.insert(e.mac, e.clone());
            if let Some(a) = e.address {
                idx.by_ip.insert(a.addr(), e.clone());
            }
            idx.by_key.insert(key, e);
        }
    }

    pub fn remove(&self, namespace: &str, name: &str) {
        if let Ok(mut idx) = self.inner.write() {
            remove_key(&mut idx, &(namespace.to_string(), name.to_string()));
        }
    }

    /// Keep the index in step with the store until cancelled, through the
    /// store's reflector (list, watch from the list's version, list again
    /// when the watch ends).
    pub async fn run(self, store: Arc<dyn Store>, cancel: CancellationToken) {
        reflect(
            store.as_ref(),
            Kind::Machine,
            &ListOptions::default(),
            Duration::from_millis(500),
            &cancel,
            |r| match r {
                Reflected::Listed(items) => self.replace_all(items),
                Reflected::Changed(ev) => self.apply(&ev),
            },
        )
        .await;
    }

    /// Replace the whole index with these Machines.
    fn replace_all(&self, items: Vec<serde_json::Value>) {
        let mut fresh = Index::default();
        for v in items {
            if let Ok(m) = from_value::<Machine>(v)
                && let Some(e) = MachineEntry::from_machine(&m)
            {
                let e = Arc::new(e);
                fresh.by_mac.insert(e.mac, e.clone());
                if let Some(a) = e.address {
                    fresh.by_ip.insert(a.addr(), e.clone());
                }
                fresh
                    .by_key
                    .insert((e.namespace.clone(), e.name.clone()), e);
            }
        }
        if let Ok(mut idx) = self.inner.write() {
            *idx = fresh;
        }
    }

    fn apply(&self, ev: &WatchEvent) {
        let deleted = matches!(ev, WatchEvent::Deleted(_));
        if let Ok(m) = from_value::<Machine>(ev.object().clone()) {
            if deleted {
                let (ns, name) = crate::store::key_of(ev.object());
                self.remove(&ns, &name);
            } else {
                self.upsert(&m);
            }
        }
    }
}

fn remove_key(idx: &mut Index, key: &(String, String)) {
    if let Some(old) = idx.by_key.remove(key) {
        if idx
            .by_mac
            .get(&old.mac)
            .is_some_and(|e| Arc::ptr_eq(e, &old))
        {
            idx.by_mac.remove(&old.mac);
        }
        if let Some(a) = old.address
            && idx
                .by_ip
                .get(&a.addr())
                .is_some_and(|e| Arc::ptr_eq(e, &old))
        {
            idx.by_ip.remove(&a.addr());
        }
    }
}

/// Appends boot-history steps to Machines without making the caller wait:
/// `record` never blocks (a full queue drops the step and counts it;
/// authenticated steps have a queue of their own, so a flood of requests
/// anyone can make never drops a call-home), and a
/// background task writes them with conflict retries. The task takes every
/// step already queued at once and writes each machine's steps in one
/// status update, several machines at a time, so a boot storm's history
/// keeps up with it (steps of one machine keep their order).
///
/// It also carries the boot services' Warning events about Machines
/// ([`BootRecorder::warn`]), each (Machine, reason) at most once per
/// [`WARN_EVERY`], so a client repeating its request cannot turn into a
/// store write per packet.
#[derive(Clone)]
pub struct BootRecorder {
    tx: mpsc::Sender<(String, String, BootEvent)>,
    /// Authenticated steps ([`crate::api::BootStep::is_authenticated`]) wait here, so
    /// a flood of unauthenticated ones filling `tx` cannot drop them.
    auth_tx: mpsc::Sender<(String, String, BootEvent)>,
    warn_tx: mpsc::Sender<Warn>,
    /// When each (namespace, name, reason) was last warned about.
    warned: Arc<std::sync::Mutex<HashMap<WarnKey, tokio::time::Instant>>>,
    dropped: Arc<std::sync::atomic::AtomicU64>,
}

/// (namespace, name, reason) of a warning.
type WarnKey = (String, String, &'static str);

/// A Warning event to record about a Machine.
struct Warn {
    namespace: String,
    name: String,
    reason: &'static str,
    message: String,
}

/// The shortest interval between two Warning events of one reason about
/// one Machine (repeats within it are not written; Events fold repeats
/// into a count anyway).
pub const WARN_EVERY: Duration = Duration::from_secs(60);
/// Keys remembered for [`WARN_EVERY`] at most; past it the memory starts over.
const WARNED_MAX: usize = 4096;

impl BootRecorder {
    /// Start the writer task; it ends when every recorder clone is dropped
    /// or `cancel` fires.
    pub fn spawn(store: Arc<dyn Store>, cancel: CancellationToken) -> BootRecorder {
        let (tx, mut rx) = mpsc::channel::<(String, String, BootEvent)>(4096);
        let (auth_tx, mut auth_rx) = mpsc::channel::<(String, String, BootEvent)>(1024);
        let (warn_tx, mut warn_rx) = mpsc::channel::<Warn>(256);
        let (st, c) = (store.clone(), cancel.clone());
        tokio::spawn(async move {
            loop {
                let w = tokio::select! {
                    _ = c.cancelled() => return,
                    w = warn_rx.recv() => w,
                };
                let Some(w) = w else { return };
                let about = Regarding {
                    kind: Kind::Machine,
                    namespace: w.namespace,
                    name: w.name,
                    uid: None,
                };
                if let Err(e) = record(
                    st.as_ref(),
                    &about,
                    EventType::Warning,
                    w.reason,
                    &w.message,
                )
                .await
                {
                    tracing::warn!(machine = %format!("{}/{}", about.namespace, about.name), error = %e, "cannot record a warning");
                }
            }
        });
        tokio::spawn(async move {
            use futures::StreamExt;
            loop {
                // Authenticated steps first; either queue closing ends it.
                let item = tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return,
                    i = auth_rx.recv() => i,
                    i = rx.recv() => i,
                };
                let Some(first) = item else { return };
                let mut batch: BTreeMap<(String, String), Vec<BootEvent>> = BTreeMap::new();
                let mut next = Some(first);
                let mut taken = 0;
                while let Some((ns, name, ev)) = next {
                    batch.entry((ns, name)).or_default().push(ev);
                    taken += 1;
                    next = if taken < RECORD_BATCH {
                        auth_rx.try_recv().or_else(|_| rx.try_recv()).ok()
                    } else {
                        None
                    };
                }
                // A machine's steps in the order they happened, whichever
                // queue they came through.
                for evs in batch.values_mut() {
                    evs.sort_by_key(|e| e.time);
                }
                let store = store.as_ref();
                futures::stream::iter(batch)
                    .for_each_concurrent(RECORD_CONCURRENCY, |((ns, name), evs)| async move {
                        if let Err(e) = append_boot_events(store, &ns, &name, &evs).await {
                            tracing::warn!(machine = %format!("{ns}/{name}"), error = %e, "cannot record boot steps");
                        }
                    })
                    .await;
            }
        });
        BootRecorder {
            tx,
            auth_tx,
            warn_tx,
            warned: Arc::default(),
            dropped: Arc::default(),
        }
    }

    /// A recorder whose steps go nowhere (tests of protocol code).
    pub fn discard() -> BootRecorder {
        let (tx, _rx) = mpsc::channel(1);
        let (auth_tx, _rx) = mpsc::channel(1);
        let (warn_tx, _rx) = mpsc::channel(1);
        BootRecorder {
            tx,
            auth_tx,
            warn_tx,
            warned: Arc::default(),
            dropped: Arc::default(),
        }
    }

    /// Record a Warning event about a Machine, unless the same reason was
    /// recorded for it within [`WARN_EVERY`]. Never blocks.
    pub fn warn(&self, namespace: &str, name: &str, reason: &'static str, message: &str) {
        let now = tokio::time::Instant::now();
        let key = (namespace.to_string(), name.to_string(), reason);
        {
            let Ok(mut warned) = self.warned.lock() else {
                return;
            };
            if warned
                .get(&key)
                .is_some_and(|t| now.duration_since(*t) < WARN_EVERY)
            {
                return;
            }
            if warned.len() >= WARNED_MAX {
                warned.clear();
            }
            warned.insert(key, now);
        }
        let w = Warn {
            namespace: namespace.to_string(),
            name: name.to_string(),
            reason,
            message: message.to_string(),
        };
        if self.warn_tx.try_send(w).is_err() {
            self.dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    pub fn record(&self, namespace: &str, name: &str, ev: BootEvent) {
        let queue = if ev.step.is_authenticated() {
            &self.auth_tx
        } else {
            &self.tx
        };
        if queue
            .try_send((namespace.to_string(), name.to_string(), ev))
            .is_err()
        {
            self.dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Steps dropped because the queue was full or closed.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Steps the recorder takes off its queue at once.
const RECORD_BATCH: usize = 1024;
/// Machines whose steps the recorder writes at once.
const RECORD_CONCURRENCY: usize = 16;

/// Append one step to a Machine's `status.bootHistory` (keeping the last
/// [`BOOT_HISTORY_LIMIT`]), retrying on conflicts.
pub async fn append_boot_event(
    store: &dyn Store,
    namespace: &str,
    name: &str,
    ev: BootEvent,
) -> Result<(), StoreError> {
    append_boot_events(store, namespace, name, std::slice::from_ref(&ev)).await
}

/// Append steps, in order, to a Machine's `status.bootHistory` in one
/// status update (keeping the last [`BOOT_HISTORY_LIMIT`]), retrying on
/// conflicts.
pub async fn append_boot_events(
    store: &dyn Store,
    namespace: &str,
    name: &str,
    evs: &[BootEvent],
) -> Result<(), StoreError> {
    modify_obj::<Machine>(store, namespace, name, Target::Status, |m| {
        let Some(mut m) = m else { return Ok(None) };
        let st = m.status.get_or_insert_with(Default::default);
        insert_boot_events(&mut st.boot_history, evs);
        Ok(Some(m))
    })
    .await
    .map(|_| ())
}

/// Add steps to a history in time order (a step noted directly with its
/// call-home may be written before earlier steps still in the recorder's
/// queue), keeping the last [`BOOT_HISTORY_LIMIT`].
pub fn insert_boot_events(h: &mut Vec<BootEvent>, evs: &[BootEvent]) {
    for ev in evs {
        let at = h.partition_point(|e| e.time <= ev.time);
        h.insert(at, ev.clone());
    }
    trim_history(h, BOOT_HISTORY_LIMIT);
}

/// Keep at most `limit` steps: the oldest unauthenticated ones go first,
/// so requests anyone can make never push a boot's Ignition or call-home
/// steps out; only when those alone are over the limit do the oldest of
/// them go.
pub fn trim_history(h: &mut Vec<BootEvent>, limit: usize) {
    let mut excess = h.len().saturating_sub(limit);
    if excess == 0 {
        return;
    }
    h.retain(|e| {
        if excess > 0 && !e.step.is_authenticated() {
            excess -= 1;
            false
        } else {
            true
        }
    });
    let n = h.len();
    if n > limit {
        h.drain(..n - limit);
    }
}

#[cfg(test)]
mod tests;
