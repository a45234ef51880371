//! The boot directory: an in-memory index from MAC (and IP) to what the
//! network boot services need to know about a Machine, fed by a store watch
//! so DHCP, TFTP and HTTP never wait on a store call per packet. Also the
//! [`BootRecorder`] (in `recorder`), which appends boot-history steps to
//! Machines off the hot path.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
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
    /// Reserved IPv4 address with its subnet, from `spec.network.address`
    /// when that is an IPv4 address (what DHCPv4 reserves).
    pub address: Option<Ipv4Net>,
    /// `spec.network.gateway` when it is an IPv4 address.
    pub gateway: Option<Ipv4Addr>,
    /// The IPv4 addresses among `spec.network.dns`.
    pub dns: Vec<Ipv4Addr>,
    /// Reserved IPv6 address with its prefix, from `spec.network.address`
    /// when that is an IPv6 address (a Machine has one address: then
    /// `address` is `None`).
    pub address6: Option<Ipv6Net>,
    /// `spec.network.gateway` when it is an IPv6 address.
    pub gateway6: Option<Ipv6Addr>,
    /// The IPv6 addresses among `spec.network.dns`.
    pub dns6: Vec<Ipv6Addr>,
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
        let address = net.address.as_deref().and_then(|a| a.parse::<IpNet>().ok());
        let gateway = net
            .gateway
            .as_deref()
            .and_then(|a| a.parse::<IpAddr>().ok());
        let dns: Vec<IpAddr> = net.dns.iter().filter_map(|d| d.parse().ok()).collect();
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
            address: match address {
                Some(IpNet::V4(n)) => Some(n),
                _ => None,
            },
            gateway: match gateway {
                Some(IpAddr::V4(g)) => Some(g),
                _ => None,
            },
            dns: dns
                .iter()
                .filter_map(|d| match d {
                    IpAddr::V4(d) => Some(*d),
                    IpAddr::V6(_) => None,
                })
                .collect(),
            address6: match address {
                Some(IpNet::V6(n)) => Some(n),
                _ => None,
            },
            gateway6: match gateway {
                Some(IpAddr::V6(g)) => Some(g),
                _ => None,
            },
            dns6: dns
                .iter()
                .filter_map(|d| match d {
                    IpAddr::V6(d) => Some(*d),
                    IpAddr::V4(_) => None,
                })
                .collect(),
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
    by_ip6: HashMap<Ipv6Addr, Arc<MachineEntry>>,
}

impl Index {
    fn insert(&mut self, e: MachineEntry) {
        let e = Arc::new(e);
        self.by_mac.insert(e.mac, e.clone());
        if let Some(a) = e.address {
            self.by_ip.insert(a.addr(), e.clone());
        }
        if let Some(a) = e.address6 {
            self.by_ip6.insert(a.addr(), e.clone());
        }
        self.by_key.insert((e.namespace.clone(), e.name.clone()), e);
    }
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

    /// The Machine whose reserved IPv6 address is `ip`.
    pub fn by_ip6(&self, ip: &Ipv6Addr) -> Option<Arc<MachineEntry>> {
        self.inner.read().ok()?.by_ip6.get(ip).cloned()
    }

    /// The Machine whose reserved address is a peer's address, either
    /// family; an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, how a
    /// dual-stack `[::]` socket sees IPv4 clients) is looked up as IPv4.
    pub fn by_peer(&self, ip: IpAddr) -> Option<Arc<MachineEntry>> {
        match plain_ip(ip) {
            IpAddr::V4(a) => self.by_ip(&a),
            IpAddr::V6(a) => self.by_ip6(&a),
        }
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
            idx.insert(e);
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
                fresh.insert(e);
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
        if let Some(a) = old.address6
            && idx
                .by_ip6
                .get(&a.addr())
                .is_some_and(|e| Arc::ptr_eq(e, &old))
        {
            idx.by_ip6.remove(&a.addr());
        }
    }
}

/// A peer address as the directory keys it: an IPv4-mapped IPv6 address
/// becomes the IPv4 address it carries; anything else is unchanged.
pub fn plain_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

mod recorder;
pub use recorder::{
    BootRecorder, HOLD, WARN_EVERY, append_boot_event, append_boot_events, insert_boot_events,
    trim_history,
};

#[cfg(test)]
mod tests;
