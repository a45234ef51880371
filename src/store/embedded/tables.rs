//! What the embedded store keeps in redb: the three tables, the state the
//! readers and the writer thread share, and the change log (append, prune,
//! read back for watches). No object semantics here.

use std::path::PathBuf;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::api::Kind;
use crate::store::{StoreError, WatchEvent};

/// `kind \0 namespace \0 name` -> object JSON.
pub(super) const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
/// resourceVersion -> change record JSON (`{"k":kind,"t":type,"o":object}`).
pub(super) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
/// Counters: `rv` (last resourceVersion).
pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// How many changes the log keeps for watch resumption unless told
/// otherwise. Each record holds the whole object, so this bounds the file
/// (a watcher further behind gets `Gone` and lists again, as with
/// Kubernetes' compaction).
pub const LOG_KEEP: u64 = 50_000;
/// Prune the log every this many writes (or every `keep`, if fewer).
const PRUNE_EVERY: u64 = 1_000;

/// A change as broadcast to live watchers.
#[derive(Clone, Debug)]
pub(super) struct Broadcast {
    pub(super) kind: Kind,
    pub(super) rv: u64,
    pub(super) event: WatchEvent,
}

pub(super) struct Inner {
    pub(super) db: Database,
    /// Live changes, sent by the writer thread in resourceVersion order.
    pub(super) tx: broadcast::Sender<Broadcast>,
    pub(super) path: PathBuf,
    /// Changes the log keeps (at least 1).
    pub(super) keep: u64,
}

pub(super) fn backend<E: std::fmt::Display>(e: E) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// The last resourceVersion given out (0 for an empty store).
pub(super) fn last_rv(inner: &Inner) -> Result<u64, StoreError> {
    let r = inner.db.begin_read().map_err(backend)?;
    let meta = r.open_table(META).map_err(backend)?;
    Ok(meta
        .get("rv")
        .map_err(backend)?
        .map(|g| g.value())
        .unwrap_or(0))
}

pub(super) fn append_log(
    log: &mut redb::Table<u64, &[u8]>,
    kind: Kind,
    rv: u64,
    ev: &WatchEvent,
) -> Result<(), StoreError> {
    let rec = serde_json::json!({"k": kind.as_str(), "t": ev.type_str(), "o": ev.object()});
    let bytes = serde_json::to_vec(&rec).map_err(backend)?;
    log.insert(rv, bytes.as_slice()).map_err(backend)?;
    Ok(())
}

/// Trim the log to its last `keep` changes once per `PRUNE_EVERY` writes
/// (or `keep`, if fewer) (when a commit that took the
/// version from `from` to `rv` crossed a multiple of it).
pub(super) fn prune(
    log: &mut redb::Table<u64, &[u8]>,
    from: u64,
    rv: u64,
    keep: u64,
) -> Result<(), StoreError> {
    let every = PRUNE_EVERY.min(keep).max(1);
    if rv / every != from / every && rv > keep {
        let cut = rv - keep;
        log.retain_in(..cut, |_, _| false).map_err(backend)?;
    }
    Ok(())
}

/// Log records after `from` (exclusive), in order, for one kind; `Gone`
/// when the log no longer reaches back to `from`.
pub(super) fn read_log(
    inner: &Inner,
    kind: Kind,
    from: u64,
) -> Result<Vec<(u64, WatchEvent)>, StoreError> {
    let r = inner.db.begin_read().map_err(backend)?;
    let log = r.open_table(LOG).map_err(backend)?;
    let meta = r.open_table(META).map_err(backend)?;
    let last = meta
        .get("rv")
        .map_err(backend)?
        .map(|g| g.value())
        .unwrap_or(0);
    if from < last {
        let oldest = log
            .first()
            .map_err(backend)?
            .map(|(k, _)| k.value())
            .unwrap_or(last + 1);
        if from + 1 < oldest {
            return Err(StoreError::Gone {
                requested: from.to_string(),
                oldest: oldest.to_string(),
            });
        }
    }
    let mut out = Vec::new();
    for item in log.range(from + 1..).map_err(backend)? {
        let (k, v) = item.map_err(backend)?;
        let rec: Value = serde_json::from_slice(v.value()).map_err(backend)?;
        if rec.get("k").and_then(Value::as_str) != Some(kind.as_str()) {
            continue;
        }
        let obj = rec.get("o").cloned().unwrap_or(Value::Null);
        let ev = match rec.get("t").and_then(Value::as_str) {
            Some("ADDED") => WatchEvent::Added(obj),
            Some("DELETED") => WatchEvent::Deleted(obj),
            _ => WatchEvent::Modified(obj),
        };
        out.push((k.value(), ev));
    }
    Ok(out)
}
