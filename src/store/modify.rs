//! Read, change, write, and on a conflict read again: the one loop every
//! writer that edits a stored object from its current state goes through.
//! Uses only the [`Store`] trait, so it works on every backend.

use serde_json::Value;

use super::typed::{from_value, to_value};
use super::{Object, Store, StoreError};
use crate::api::Kind;

/// Attempts before a conflict is given back to the caller.
pub const ATTEMPTS: u32 = 10;

/// What the write replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The whole object (`update`); a missing object is `NotFound`.
    Object,
    /// Only its status (`update_status`); a missing object is `NotFound`.
    Status,
    /// The whole object, created when missing (`create`; losing a race to
    /// another creator counts as a conflict).
    ObjectOrCreate,
}

/// Read `kind` `namespace/name`, let `change` edit it, write it; on a
/// conflict, start again from a fresh read, at most `attempts` times.
///
/// `change` gets the current object (`None` only with
/// [`Target::ObjectOrCreate`] when it does not exist) and returns the object
/// to write, or `None` to write nothing. Returns what was written, or
/// `None` when `change` declined. An error from `change` ends the loop.
pub async fn modify<E: From<StoreError>>(
    store: &dyn Store,
    kind: Kind,
    namespace: &str,
    name: &str,
    target: Target,
    attempts: u32,
    mut change: impl FnMut(Option<Value>) -> Result<Option<Value>, E>,
) -> Result<Option<Value>, E> {
    let mut last = None;
    for _ in 0..attempts.max(1) {
        let current = match store.get(kind, namespace, name).await {
            Ok(v) => Some(v),
            Err(e) if e.is_not_found() && target == Target::ObjectOrCreate => None,
            Err(e) => return Err(e.into()),
        };
        let exists = current.is_some();
        let Some(next) = change(current)? else {
            return Ok(None);
        };
        let written = match (target, exists) {
            (Target::Status, _) => store.update_status(kind, next).await,
            (_, true) => store.update(kind, next).await,
            (_, false) => store.create(kind, next).await,
        };
        match written {
            Ok(v) => return Ok(Some(v)),
            Err(e) if e.is_conflict() || matches!(e, StoreError::AlreadyExists { .. }) => {
                last = Some(e)
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(last
        .unwrap_or_else(|| StoreError::Backend("retries exhausted".into()))
        .into())
}

/// [`modify`] with [`ATTEMPTS`] on a typed object.
pub async fn modify_obj<T: Object>(
    store: &dyn Store,
    namespace: &str,
    name: &str,
    target: Target,
    mut change: impl FnMut(Option<T>) -> Result<Option<T>, StoreError>,
) -> Result<Option<T>, StoreError> {
    let written = modify(
        store,
        T::KIND,
        namespace,
        name,
        target,
        ATTEMPTS,
        |cur: Option<Value>| {
            let cur = cur.map(from_value::<T>).transpose()?;
            change(cur)?.map(|t| to_value(&t)).transpose()
        },
    )
    .await?;
    written.map(from_value).transpose()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::api::{DiscoveredMachine, DiscoveredMachineSpec};
    use crate::store::memory::{Faults, MemoryStore, Op};

    fn conflict() -> StoreError {
        StoreError::Conflict {
            kind: Kind::Machine,
            namespace: "default".into(),
            name: "m".into(),
            expected: "1".into(),
            current: "2".into(),
        }
    }

    fn spec(addr: &str) -> DiscoveredMachineSpec {
        DiscoveredMachineSpec {
            mac_address: "52:54:00:00:00:01".into(),
            architecture: None,
            vendor_class: None,
            address: Some(addr.into()),
            first_seen: jiff::Timestamp::UNIX_EPOCH,
            last_seen: jiff::Timestamp::UNIX_EPOCH,
        }
    }

    #[tokio::test]
    async fn creates_when_missing_then_changes_what_is_there_after_a_conflict() {
        let faults = Faults::new(Arc::new(MemoryStore::new()));
        let set = |addr: &'static str| {
            move |cur: Option<DiscoveredMachine>| {
                Ok(Some(match cur {
                    Some(mut d) => {
                        d.spec.address = Some(addr.into());
                        d
                    }
                    None => DiscoveredMachine::new("d", spec(addr)),
                }))
            }
        };
        let made = modify_obj(
            &faults,
            "default",
            "d",
            Target::ObjectOrCreate,
            set("10.0.0.1"),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(made.spec.address.as_deref(), Some("10.0.0.1"));
        faults.fail_next(Op::Update, conflict());
        let mut calls = 0;
        let changed = modify_obj(&faults, "default", "d", Target::ObjectOrCreate, |cur| {
            calls += 1;
            set("10.0.0.2")(cur)
        })
        .await
        .unwrap()
        .unwrap();
        assert_eq!(calls, 2, "read again after the conflict");
        assert_eq!(changed.spec.address.as_deref(), Some("10.0.0.2"));
    }

    #[tokio::test]
    async fn gives_the_conflict_back_after_the_last_attempt() {
        let faults = Faults::new(Arc::new(MemoryStore::new()));
        faults
            .create(
                Kind::DiscoveredMachine,
                serde_json::to_value(DiscoveredMachine::new("d", spec("10.0.0.1"))).unwrap(),
            )
            .await
            .unwrap();
        for _ in 0..3 {
            faults.fail_next(Op::Update, conflict());
        }
        let e = modify(
            &faults,
            Kind::DiscoveredMachine,
            "default",
            "d",
            Target::Object,
            3,
            |cur| {
                Ok::<_, StoreError>(cur.map(|mut v| {
                    v["spec"]["address"] = json!("10.0.0.9");
                    v
                }))
            },
        )
        .await
        .unwrap_err();
        assert!(e.is_conflict(), "{e}");
    }

    #[tokio::test]
    async fn a_missing_object_is_not_created_unless_asked() {
        let store = MemoryStore::new();
        let e = modify_obj::<DiscoveredMachine>(&store, "default", "d", Target::Status, |_| {
            panic!("no object to change")
        })
        .await
        .unwrap_err();
        assert!(e.is_not_found(), "{e}");
    }
}
