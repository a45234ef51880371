//! Read one consistent [`Snapshot`] from a store.
//!
//! From a store that is running (a server's API, a cluster): a list per
//! kind cannot be one transaction, so the lists are read in passes until
//! two consecutive passes agree object for object (same uids and
//! resourceVersions, none added or gone). Every object then held the
//! version exported from its read in the first of the two passes to its
//! read in the second, and all first reads come before all second ones:
//! the snapshot is the state at that moment between the passes (up to an
//! object created and deleted again entirely between its two reads, which
//! neither pass can see).
//!
//! From a stopped data directory: one read transaction on the store file
//! ([`crate::store::embedded::snapshot`]), consistent by construction.
//!
//! What is exported: Machines, MachineClasses, MachineSets,
//! DiscoveredMachines, Secrets and, when asked, the Events about those
//! objects. From a cluster ([`ExportOptions::cluster`]) only the Secrets
//! of namespaces that hold metalherd objects are taken; service-account
//! tokens never (the cluster mints those itself).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::objects::{describe, uid, unsettled};
use super::{BackupError, Snapshot};
use crate::api::Kind;
use crate::store::{ListOptions, Store, key_of, resource_version_of};

/// How many passes a running store gets to hold still for two in a row.
pub const MAX_PASSES: usize = 10;

/// metalherd's own kinds (the CRDs).
const OWN: [Kind; 4] = [
    Kind::Machine,
    Kind::MachineClass,
    Kind::MachineSet,
    Kind::DiscoveredMachine,
];

/// What to export.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExportOptions {
    /// Also the Events about the exported objects.
    pub events: bool,
    /// Export objects that are not settled too ([`unsettled`]).
    pub force: bool,
    /// The source is a cluster, not a standalone store: Secrets only from
    /// namespaces that hold metalherd objects.
    pub cluster: bool,
}

/// (kind, namespace, name) -> (uid, resourceVersion): what two passes
/// compare.
type Versions = BTreeMap<(Kind, String, String), (String, String)>;

fn versions(items: &[(Kind, Value)]) -> Versions {
    items
        .iter()
        .map(|(k, o)| {
            let (ns, name) = key_of(o);
            let v = (
                uid(o).unwrap_or_default().to_string(),
                resource_version_of(o).unwrap_or_default().to_string(),
            );
            ((*k, ns, name), v)
        })
        .collect()
}

async fn one_pass(store: &dyn Store, opts: ExportOptions) -> Result<Snapshot, BackupError> {
    let all = ListOptions::default();
    let mut items = Vec::new();
    let mut resource_version = String::new();
    for kind in OWN {
        let list = store
            .list(kind, &all)
            .await
            .map_err(BackupError::store(format!("list {}", kind.plural())))?;
        resource_version = list.resource_version;
        items.extend(list.items.into_iter().map(|o| (kind, o)));
    }
    let namespaces: BTreeSet<String> = items.iter().map(|(_, o)| key_of(o).0).collect();
    // A standalone store's Secrets are all metalherd's, in any namespace; a
    // cluster's are taken only from the namespaces holding metalherd
    // objects, without the service-account tokens the cluster mints.
    let secret_scopes: Vec<ListOptions> = if opts.cluster {
        namespaces
            .iter()
            .map(|ns| ListOptions::namespace(ns))
            .collect()
    } else {
        vec![all.clone()]
    };
    for scope in &secret_scopes {
        let list = store
            .list(Kind::Secret, scope)
            .await
            .map_err(BackupError::store("list secrets"))?;
        items.extend(
            list.items
                .into_iter()
                .filter(|s| {
                    s.get("type").and_then(Value::as_str)
                        != Some("kubernetes.io/service-account-token")
                })
                .map(|o| (Kind::Secret, o)),
        );
    }
    if opts.events {
        let about: BTreeSet<String> = items
            .iter()
            .filter_map(|(_, o)| uid(o))
            .map(str::to_string)
            .collect();
        for ns in &namespaces {
            let list = store
                .list(Kind::Event, &ListOptions::namespace(ns))
                .await
                .map_err(BackupError::store(format!("list events in {ns}")))?;
            items.extend(
                list.items
                    .into_iter()
                    .filter(|e| {
                        e.pointer("/involvedObject/uid")
                            .and_then(Value::as_str)
                            .is_some_and(|u| about.contains(u))
                    })
                    .map(|o| (Kind::Event, o)),
            );
        }
    }
    Ok(Snapshot {
        resource_version,
        items,
    })
}

/// A snapshot of a running store: passes until two agree.
pub async fn from_store(store: &dyn Store, opts: ExportOptions) -> Result<Snapshot, BackupError> {
    let mut last = one_pass(store, opts).await?;
    for _ in 1..MAX_PASSES {
        let next = one_pass(store, opts).await?;
        if versions(&next.items) == versions(&last.items) {
            return settle(next, opts);
        }
        last = next;
    }
    Err(BackupError::NotQuiet { passes: MAX_PASSES })
}

/// A snapshot of a stopped data directory's store file.
pub fn from_stopped(path: &std::path::Path, opts: ExportOptions) -> Result<Snapshot, BackupError> {
    let (resource_version, mut items) = crate::store::embedded::snapshot::read_all(path)
        .map_err(BackupError::store(format!("read {}", path.display())))?;
    if !opts.events {
        items.retain(|(k, _)| *k != Kind::Event);
    }
    settle(
        Snapshot {
            resource_version,
            items,
        },
        opts,
    )
}

/// Refuse a snapshot with unsettled objects (unless forced), and put the
/// items in a stable order (kind, namespace, name) so two exports of the
/// same objects are the same file.
fn settle(mut snap: Snapshot, opts: ExportOptions) -> Result<Snapshot, BackupError> {
    if !opts.force {
        let busy: Vec<String> = snap
            .items
            .iter()
            .filter_map(|(k, o)| {
                unsettled(*k, o).map(|why| format!("  {}: {why}", describe(*k, o)))
            })
            .collect();
        if !busy.is_empty() {
            return Err(BackupError::Unsettled(busy));
        }
    }
    snap.items.sort_by_key(|(k, o)| {
        let order = super::objects::IMPORT_ORDER.iter().position(|x| x == k);
        (order, key_of(o))
    });
    Ok(snap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;
    use serde_json::json;

    async fn seeded() -> MemoryStore {
        let s = MemoryStore::new();
        s.create(
            Kind::Secret,
            json!({"metadata": {"name": "bmc"}, "stringData": {"password": "x"}}),
        )
        .await
        .unwrap();
        let m = s
            .create(
                Kind::Machine,
                json!({"metadata": {"name": "m1"}, "spec": {"bmc": {"address": "ipmi://10.0.0.1", "credentialsSecretRef": {"name": "bmc"}}}}),
            )
            .await
            .unwrap();
        let mut m2 = m.clone();
        m2["status"] = json!({"phase": "Provisioning"});
        s.update_status(Kind::Machine, m2).await.unwrap();
        s
    }

    #[tokio::test]
    async fn refuses_machines_in_a_boot_and_lists_them() {
        let s = seeded().await;
        let e = from_store(&s, ExportOptions::default()).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "these objects are in the middle of something a move would break (retry when they have settled, or pass --force):\n  machine default/m1: phase Provisioning"
        );
        let snap = from_store(
            &s,
            ExportOptions {
                force: true,
                events: false,
                cluster: false,
            },
        )
        .await
        .unwrap();
        let kinds: Vec<Kind> = snap.items.iter().map(|(k, _)| *k).collect();
        assert_eq!(kinds, vec![Kind::Secret, Kind::Machine]);
        assert_eq!(snap.items[1].1["status"]["phase"], "Provisioning");
    }

    #[tokio::test]
    async fn from_a_cluster_only_the_secrets_beside_metalherd_objects() {
        let s = seeded().await;
        for (ns, name, ty) in [
            ("kube-system", "other-app", "Opaque"),
            ("default", "sa-token", "kubernetes.io/service-account-token"),
        ] {
            s.create(
                Kind::Secret,
                json!({"metadata": {"name": name, "namespace": ns}, "type": ty, "data": {}}),
            )
            .await
            .unwrap();
        }
        let names = |snap: &Snapshot| -> Vec<String> {
            snap.items
                .iter()
                .filter(|(k, _)| *k == Kind::Secret)
                .map(|(_, o)| key_of(o).1)
                .collect()
        };
        let opts = ExportOptions {
            force: true,
            events: false,
            cluster: true,
        };
        assert_eq!(names(&from_store(&s, opts).await.unwrap()), ["bmc"]);
        let standalone = ExportOptions {
            cluster: false,
            ..opts
        };
        assert_eq!(
            names(&from_store(&s, standalone).await.unwrap()),
            ["bmc", "other-app"]
        );
    }

    #[test]
    fn two_passes_compare_uids_and_versions() {
        let a = vec![(
            Kind::Secret,
            json!({"metadata": {"name": "s", "uid": "1", "resourceVersion": "5"}}),
        )];
        let mut b = a.clone();
        assert_eq!(versions(&a), versions(&b));
        b[0].1["metadata"]["resourceVersion"] = json!("6");
        assert_ne!(versions(&a), versions(&b));
    }
}
