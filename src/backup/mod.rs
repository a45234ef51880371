//! `metalherd export` and `metalherd import`: every object of one store,
//! with its status, as one file, and that file recreated in another store.
//! Moving a site from standalone to Kubernetes mode (or back) is an export
//! from one and an import into the other; a backup is an export, its
//! restore an import into an empty data directory.
//!
//! The file is a `v1` `List` (YAML) whose items are the objects exactly as
//! the source store held them, uids and resourceVersions included, so
//! import can rewrite references to the old uids. It holds the Secrets:
//! it is written with mode 0600.
//!
//! Sources and targets are [`Store`]s (a running server reached through
//! its Kubernetes-compatible API, a cluster through a kubeconfig, or a
//! stopped data directory's store file), so the same code serves every
//! direction. This module and its children never parse flags or print:
//! `src/cli/backup.rs` does.

pub mod export;
pub mod import;
pub mod objects;

use serde_json::{Value, json};

use crate::api::Kind;
use crate::store::StoreError;

/// What can go wrong in an export or an import.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupError {
    #[error("{what}: {source}")]
    Store {
        what: String,
        /// Boxed: a store error is large, and this enum travels in every
        /// `Result` of the module.
        #[source]
        source: Box<StoreError>,
    },
    #[error(
        "these objects are in the middle of something a move would break (retry when they have settled, or pass --force):\n{}",
        .0.join("\n")
    )]
    Unsettled(Vec<String>),
    #[error(
        "the objects kept changing: {passes} consecutive reads never agreed. Retry, or stop the controllers (controller.enabled: false) while exporting"
    )]
    NotQuiet { passes: usize },
    #[error("the export file: {0}")]
    Document(String),
    #[error("these objects already exist in the target; import only into a store that lacks them:\n{}", .0.join("\n"))]
    Exists(Vec<String>),
    #[error(
        "the target data directory's store is not empty ({0} objects); a restore goes into an empty one"
    )]
    NotEmpty(usize),
}

impl BackupError {
    fn store(what: impl Into<String>) -> impl FnOnce(StoreError) -> BackupError {
        let what = what.into();
        move |source| BackupError::Store {
            what,
            source: Box::new(source),
        }
    }
}

/// One consistent set of objects.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// The source's resourceVersion the objects were read at (opaque).
    pub resource_version: String,
    pub items: Vec<(Kind, Value)>,
}

impl Snapshot {
    /// The export file's content: a `v1` `List`.
    pub fn to_document(&self) -> Value {
        let items: Vec<Value> = self.items.iter().map(|(_, o)| o.clone()).collect();
        json!({
            "apiVersion": "v1",
            "kind": "List",
            "metadata": {"resourceVersion": self.resource_version},
            "items": items,
        })
    }

    /// Read an export file (YAML or JSON). Every item must name a kind
    /// metalherd keeps.
    pub fn from_document(text: &str) -> Result<Snapshot, BackupError> {
        let doc: Value =
            serde_yaml::from_str(text).map_err(|e| BackupError::Document(e.to_string()))?;
        if doc.get("kind").and_then(Value::as_str) != Some("List") {
            return Err(BackupError::Document(
                "expected a List (what metalherd export writes)".into(),
            ));
        }
        let resource_version = doc
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let mut items = Vec::new();
        for (i, item) in doc
            .get("items")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let kind_name = item.get("kind").and_then(Value::as_str).unwrap_or_default();
            let kind = Kind::ALL
                .into_iter()
                .find(|k| k.as_str() == kind_name)
                .ok_or_else(|| {
                    BackupError::Document(format!("items[{i}]: unknown kind {kind_name:?}"))
                })?;
            if item
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .is_none()
            {
                return Err(BackupError::Document(format!(
                    "items[{i}]: no metadata.name"
                )));
            }
            items.push((kind, item.clone()));
        }
        Ok(Snapshot {
            resource_version,
            items,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_round_trip() {
        let s = Snapshot {
            resource_version: "7".into(),
            items: vec![
                (
                    Kind::Machine,
                    json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
                        "metadata": {"name": "m", "uid": "u"}, "status": {"phase": "Ready"}}),
                ),
                (
                    Kind::Secret,
                    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                        "data": {"k": "dg=="}}),
                ),
            ],
        };
        let text = serde_yaml::to_string(&s.to_document()).unwrap();
        assert_eq!(Snapshot::from_document(&text).unwrap(), s);
    }

    #[test]
    fn unknown_kinds_and_nameless_items_are_refused() {
        let e = Snapshot::from_document("kind: List\nitems:\n- kind: Pod\n  metadata: {name: p}\n")
            .unwrap_err();
        assert!(
            e.to_string().contains("items[0]: unknown kind \"Pod\""),
            "{e}"
        );
        let e = Snapshot::from_document("kind: List\nitems:\n- kind: Secret\n").unwrap_err();
        assert!(e.to_string().contains("no metadata.name"), "{e}");
        assert!(Snapshot::from_document("kind: Machine\n").is_err());
    }
}
