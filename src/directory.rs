//! The boot directory: an in-memory index from MAC (and IP) to what the
//! network boot services need to know about a Machine, fed by a store watch
//! so DHCP, TFTP and HTTP never wait on a store call per packet. Also the
//! [`BootRecorder`] (in `recorder`), which appends boot-history steps to
//! Machines off the hot path.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ipnet::Ipv4Net;
use tokio_util::sync::CancellationToken;

use crate::api::{BootPurpose, Kind, MacAddr, Machine, MachinePhase};
use crate::store::reflect::{Reflected, reflect};
use crate::store::typed::from_value;
use crate::store::{ListOptions, Store, WatchEvent};

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
    /// The firmware enforces Secure Boot (`spec.secureBoot`, else what the
    /// BMC reported): its network boot starts with a signed loader.
    pub secure_boot: bool,
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
            secure_boot: m.spec.secure_boot.unwrap_or_else(|| {
                status
                    .inventory
                    .as_ref()
                    .and_then(|i| i.secure_boot)
                    .unwrap_or(false)
            }),
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

mod recorder;
pub use recorder::{
    BootRecorder, HOLD, WARN_EVERY, append_boot_event, append_boot_events, insert_boot_events,
    trim_history,
};

#[cfg(test)]
mod tests;
