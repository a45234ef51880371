//! The MachineSet controller's view of the Machines: parsed once as they
//! change, fed by the store's reflector ([`crate::store::reflect`]: list,
//! watch from the list's version, list again when the watch ends), so a set
//! reconcile reads its namespace's Machines from memory instead of listing
//! and parsing every one of them from the store.
//!
//! The view may lag the store. That is safe for what the set does with it:
//! it only plans from it; every claim, pin and release reads its Machine
//! from the store again and writes at that resourceVersion (a conflict
//! means a retry, never a double claim). So that a set is not confused by
//! its own writes before the watch brings them back, the reconciler hands
//! each written Machine to [`MachineCache::put`]; an entry is only ever
//! replaced by a newer resourceVersion, so a late watch event cannot undo
//! it, and a deletion is remembered (until the next list) so a write's
//! answer taken after it cannot bring the Machine back.
//!
//! A reconcile waits for [`MachineCache::synced`] (the first complete
//! list) before it reads: an empty view before that would look like an
//! empty pool.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::api::{Kind, Machine};
use crate::store::reflect::{Reflected, reflect};
use crate::store::{ListOptions, Store, WatchEvent, key_of, resource_version_of};

/// One cached Machine and the resourceVersion it was read at (`None` when
/// the store's versions are not numbers: then the latest arrival wins).
#[derive(Clone, Debug)]
struct Entry {
    version: Option<u64>,
    machine: Arc<Machine>,
}

impl Entry {
    fn new(machine: Machine) -> Self {
        let version = machine
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok());
        Entry {
            version,
            machine: Arc::new(machine),
        }
    }

    /// Whether `self` is known to be newer than a version of the same
    /// object (never, when either version is not a number).
    fn newer_than(&self, version: Option<u64>) -> bool {
        matches!((self.version, version), (Some(mine), Some(theirs)) if mine > theirs)
    }
}

/// Namespace → name → Machine.
type Namespaces = HashMap<String, BTreeMap<String, Entry>>;

#[derive(Default)]
struct View {
    machines: Namespaces,
    /// Deleted since the last list, with the deletion's version: a write's
    /// answer that arrives after the deletion must not bring it back.
    gone: HashMap<(String, String), u64>,
}

/// Parsed Machines of every namespace, kept in step with the store.
pub struct MachineCache {
    view: RwLock<View>,
    synced: watch::Sender<bool>,
}

impl Default for MachineCache {
    fn default() -> Self {
        MachineCache {
            view: RwLock::new(View::default()),
            synced: watch::Sender::new(false),
        }
    }
}

impl MachineCache {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Wait until the first complete list is in.
    pub async fn synced(&self) {
        let mut rx = self.synced.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Whether the first complete list is in.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Every Machine of `namespace`, by name.
    pub fn machines(&self, namespace: &str) -> Vec<Arc<Machine>> {
        let Ok(v) = self.view.read() else {
            return Vec::new();
        };
        v.machines
            .get(namespace)
            .map(|ms| ms.values().map(|e| e.machine.clone()).collect())
            .unwrap_or_default()
    }

    /// One cached Machine.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Machine>> {
        let v = self.view.read().ok()?;
        v.machines
            .get(namespace)?
            .get(name)
            .map(|e| e.machine.clone())
    }

    /// Take a Machine as the store returned it after a write (or as the
    /// watch brought it): kept unless the cache already has a newer one.
    pub fn put(&self, machine: Machine) {
        let ns = machine
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let Some(name) = machine.metadata.name.clone() else {
            return;
        };
        let e = Entry::new(machine);
        let Ok(mut v) = self.view.write() else {
            return;
        };
        let key = (ns, name);
        if let Some(deleted) = v.gone.get(&key) {
            if e.version.is_some_and(|n| n <= *deleted) {
                return;
            }
            v.gone.remove(&key);
        }
        let (ns, name) = key;
        let ms = v.machines.entry(ns).or_default();
        match ms.get(&name) {
            Some(old) if old.newer_than(e.version) => {}
            _ => {
                ms.insert(name, e);
            }
        }
    }

    /// Apply what the reflector saw.
    pub fn apply(&self, r: &Reflected) {
        match r {
            Reflected::Listed(items) => self.replace_all(items),
            Reflected::Changed(WatchEvent::Deleted(v)) => self.remove(v),
            Reflected::Changed(WatchEvent::Added(v) | WatchEvent::Modified(v)) => {
                match Machine::deserialize(v) {
                    Ok(m) => self.put(m),
                    Err(e) => tracing::warn!(error = %e, "cannot read a changed Machine"),
                }
            }
        }
    }

    /// A complete list replaces the view; an entry newer than its listed
    /// version (our own write, taken before the list was read) stays.
    fn replace_all(&self, items: &[Value]) {
        let mut fresh = Namespaces::new();
        for v in items {
            let (ns, name) = key_of(v);
            match Machine::deserialize(v) {
                Ok(m) => {
                    fresh.entry(ns).or_default().insert(name, Entry::new(m));
                }
                Err(e) => tracing::warn!(error = %e, "cannot read a listed Machine"),
            }
        }
        let Ok(mut v) = self.view.write() else {
            return;
        };
        for (ns, ms) in fresh.iter_mut() {
            for (name, e) in ms.iter_mut() {
                if let Some(old) = v.machines.get(ns).and_then(|o| o.get(name))
                    && old.newer_than(e.version)
                {
                    *e = old.clone();
                }
            }
        }
        *v = View {
            machines: fresh,
            gone: HashMap::new(),
        };
        drop(v);
        self.synced.send_replace(true);
    }

    /// A deleted Machine leaves the view (unless a newer version of the
    /// name was taken meanwhile: created again), and is remembered as gone
    /// at that version until the next list.
    fn remove(&self, obj: &Value) {
        let (ns, name) = key_of(obj);
        let version = resource_version_of(obj).and_then(|s| s.parse().ok());
        let Ok(mut v) = self.view.write() else {
            return;
        };
        if let Some(ms) = v.machines.get_mut(&ns)
            && ms.get(&name).is_some_and(|old| !old.newer_than(version))
        {
            ms.remove(&name);
        }
        if let Some(n) = version {
            v.gone.insert((ns, name), n);
        }
    }

    /// Keep the view in step with the store until `cancel` fires, calling
    /// `changed` with each listed or changed object after the view has
    /// taken it (so whatever it wakes reads at least that change).
    pub async fn run(
        self: Arc<Self>,
        store: Arc<dyn Store>,
        relist_delay: Duration,
        cancel: CancellationToken,
        changed: impl Fn(&Value),
    ) {
        reflect(
            store.as_ref(),
            Kind::Machine,
            &ListOptions::default(),
            relist_delay,
            &cancel,
            |r| {
                self.apply(&r);
                match &r {
                    Reflected::Listed(items) => items.iter().for_each(&changed),
                    Reflected::Changed(ev) => changed(ev.object()),
                }
            },
        )
        .await;
    }
}

#[cfg(test)]
mod tests;
