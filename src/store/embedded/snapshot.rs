//! Read every object of a store file that no server has open, without
//! writing to it: redb's read-only mode and one read transaction, so the
//! objects are those of one committed version (`metalherd export
//! --stopped`). The file stays as it was; a file a running server holds is
//! refused (redb's lock), with a message that says to stop it or export
//! through its API.

use std::path::Path;

use redb::{ReadOnlyDatabase, ReadableDatabase, ReadableTable};
use serde_json::Value;

use super::tables::{META, OBJECTS, backend};
use crate::api::Kind;
use crate::store::StoreError;

/// Every object in the file, with the kind its key names, and the store's
/// last resourceVersion.
pub fn read_all(path: &Path) -> Result<(String, Vec<(Kind, Value)>), StoreError> {
    if !path.exists() {
        return Err(StoreError::Backend(format!(
            "no store file at {} (is this a metalherd data directory?)",
            path.display()
        )));
    }
    let db = ReadOnlyDatabase::open(path).map_err(|e| {
        StoreError::Backend(format!(
            "cannot open {} read-only: {e}. If `metalherd serve` runs on it, stop it, or export from it while it runs (without --stopped)",
            path.display()
        ))
    })?;
    let r = db.begin_read().map_err(backend)?;
    let rv = match r.open_table(META) {
        Ok(meta) => meta
            .get("rv")
            .map_err(backend)?
            .map(|g| g.value())
            .unwrap_or(0),
        Err(redb::TableError::TableDoesNotExist(_)) => 0,
        Err(e) => return Err(backend(e)),
    };
    let t = match r.open_table(OBJECTS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok((rv.to_string(), Vec::new())),
        Err(e) => return Err(backend(e)),
    };
    let mut out = Vec::new();
    for item in t.iter().map_err(backend)? {
        let (k, v) = item.map_err(backend)?;
        let key = k.value();
        let kind_name = key.split('\0').next().unwrap_or_default();
        let kind = Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == kind_name)
            .ok_or_else(|| {
                StoreError::Malformed(format!("store key of unknown kind {kind_name:?}"))
            })?;
        let obj: Value = serde_json::from_slice(v.value())
            .map_err(|e| StoreError::Malformed(format!("{kind} in {}: {e}", path.display())))?;
        out.push((kind, obj));
    }
    Ok((rv.to_string(), out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::store::embedded::EmbeddedStore;
    use serde_json::json;

    #[tokio::test]
    async fn reads_what_a_closed_store_holds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        {
            let s = EmbeddedStore::open(&path).unwrap();
            s.create(
                Kind::Secret,
                json!({"metadata": {"name": "a"}, "data": {"k": "dg=="}}),
            )
            .await
            .unwrap();
        }
        // Dropping the store joins its writer thread and closes the file.
        let (rv, objs) = read_all(&path).unwrap();
        assert_eq!(rv, "1");
        assert_eq!(objs.len(), 1);
        assert_eq!(objs[0].0, Kind::Secret);
        assert_eq!(objs[0].1["metadata"]["name"], "a");
    }

    #[test]
    fn a_missing_file_is_named() {
        let e = read_all(Path::new("/nonexistent/metalherd.redb")).unwrap_err();
        assert!(e.to_string().contains("no store file"), "{e}");
    }
}
