//! The per-boot token key shared by all replicas: a Secret
//! (`metalherd-boot-token-key`, key `key`, 32 bytes) read or created at
//! start, then written to `<data-dir>/boot-token.key` where the boot
//! services read it. Tokens minted by one leader are therefore valid on the
//! next. Two replicas creating it at once: one create wins, the other gets
//! AlreadyExists and reads the winner's key.

use std::path::Path;

use base64::Engine;
use serde_json::json;

use crate::api::Kind;
use crate::store::{Store, StoreError};

pub const SECRET_NAME: &str = "metalherd-boot-token-key";
const KEY_LEN: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum TokenKeyError {
    // The cause is the source, printed after this by the error chain
    // (`error: {e:#}`), not repeated in this message.
    #[error("boot token key Secret {namespace}/{SECRET_NAME}")]
    Store {
        namespace: String,
        #[source]
        source: Box<StoreError>,
    },
    #[error(
        "boot token key Secret {namespace}/{SECRET_NAME} has no 32-byte `key` (found {found}); fix or delete it"
    )]
    Malformed { namespace: String, found: String },
    #[error("cannot write the boot token key to {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The key from a Secret's `data.key`, if it is 32 bytes of base64.
fn key_of(secret: &serde_json::Value) -> Result<[u8; KEY_LEN], String> {
    let b64 = secret["data"]["key"]
        .as_str()
        .ok_or_else(|| "no data.key".to_string())?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| e.to_string())?;
    let len = bytes.len();
    bytes.try_into().map_err(|_| format!("{len} bytes"))
}

/// Read the Secret, or create it with a random key; the create race is
/// settled by the server.
pub async fn load_or_create(
    store: &dyn Store,
    namespace: &str,
) -> Result<[u8; KEY_LEN], TokenKeyError> {
    let err = |source| TokenKeyError::Store {
        namespace: namespace.into(),
        source: Box::new(source),
    };
    let malformed = |found| TokenKeyError::Malformed {
        namespace: namespace.into(),
        found,
    };
    match store.get(Kind::Secret, namespace, SECRET_NAME).await {
        Ok(s) => return key_of(&s).map_err(malformed),
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(err(e)),
    }
    let key: [u8; KEY_LEN] = rand::random();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": SECRET_NAME, "namespace": namespace},
        "data": {"key": base64::engine::general_purpose::STANDARD.encode(key)}});
    match store.create(Kind::Secret, secret).await {
        Ok(_) => Ok(key),
        Err(StoreError::AlreadyExists { .. }) => {
            let s = store
                .get(Kind::Secret, namespace, SECRET_NAME)
                .await
                .map_err(err)?;
            key_of(&s).map_err(malformed)
        }
        Err(e) => Err(err(e)),
    }
}

/// Write the key where the boot services read it (replacing a local one),
/// atomically ([`crate::private_file`]).
pub fn install(key: &[u8; KEY_LEN], data_dir: &Path) -> Result<(), TokenKeyError> {
    let path = data_dir.join(crate::datadir::BOOT_TOKEN_KEY_FILE);
    crate::private_file::replace(&path, key).map_err(|source| TokenKeyError::Io {
        path: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn two_replicas_get_one_key() {
        let store: Arc<dyn Store> = Arc::new(crate::store::memory::MemoryStore::new());
        let (a, b) = tokio::join!(
            load_or_create(&*store, "default"),
            load_or_create(&*store, "default")
        );
        assert_eq!(a.unwrap(), b.unwrap());
        let again = load_or_create(&*store, "default").await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        install(&again, dir.path()).unwrap();
        let path = dir.path().join(crate::datadir::BOOT_TOKEN_KEY_FILE);
        assert_eq!(std::fs::read(&path).unwrap(), again);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[tokio::test]
    async fn a_malformed_secret_is_named() {
        let store = crate::store::memory::MemoryStore::new();
        store
            .create(
                Kind::Secret,
                json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": SECRET_NAME, "namespace": "default"}, "data": {"key": "AAAA"}}),
            )
            .await
            .unwrap();
        let e = load_or_create(&store, "default").await.unwrap_err();
        assert!(e.to_string().contains("3 bytes"), "{e}");
    }
}
