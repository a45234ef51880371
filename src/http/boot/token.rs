//! Per-boot tokens: `HMAC-SHA256(key, machine uid | boot id)`, hex. The key
//! is random, kept in `<data-dir>/boot-token.key` (mode 0600), so nothing
//! secret is stored in a Machine's status: the token is recomputed from the
//! uid and `status.boot.id` whenever it is checked. No network here.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::Sha256;

const KEY_LEN: usize = 32;
/// Name of the key file inside the data directory.
pub const KEY_FILE: &str = crate::datadir::BOOT_TOKEN_KEY_FILE;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenKeyError {
    #[error("boot token key {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "boot token key {path} has {len} bytes, expected {KEY_LEN}; remove it to make a new one"
    )]
    Length { path: PathBuf, len: usize },
}

/// The HMAC key. `Debug` never prints it.
#[derive(Clone)]
pub struct TokenKey {
    key: [u8; KEY_LEN],
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(<redacted>)")
    }
}

impl TokenKey {
    /// A key from bytes (tests).
    pub fn from_bytes(key: [u8; KEY_LEN]) -> TokenKey {
        TokenKey { key }
    }

    /// Read `<data_dir>/boot-token.key`, creating it (0600, random) when
    /// absent. A key readable by others is tightened to 0600.
    pub fn load_or_create(data_dir: &Path) -> Result<TokenKey, TokenKeyError> {
        Self::load_or_create_once(data_dir, true)
    }

    /// One read-or-create; `retry`: when another process creates the file
    /// between our read and our create, read theirs (once: a file that
    /// keeps vanishing is an error, not a loop).
    fn load_or_create_once(data_dir: &Path, retry: bool) -> Result<TokenKey, TokenKeyError> {
        let path = data_dir.join(KEY_FILE);
        let io = |source| TokenKeyError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(data_dir).map_err(io)?;
        match std::fs::read(&path) {
            Ok(bytes) => {
                let meta = std::fs::metadata(&path).map_err(io)?;
                if meta.permissions().mode() & 0o077 != 0 {
                    tracing::warn!(path = %path.display(), "boot token key was readable by others; setting mode 0600");
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                        .map_err(io)?;
                }
                let key: [u8; KEY_LEN] =
                    bytes
                        .as_slice()
                        .try_into()
                        .map_err(|_| TokenKeyError::Length {
                            path: path.clone(),
                            len: bytes.len(),
                        })?;
                Ok(TokenKey { key })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key: [u8; KEY_LEN] = rand::random();
                match crate::private_file::create_new(&path, &key) {
                    Ok(()) => Ok(TokenKey { key }),
                    // Another process created it first: theirs is the key.
                    Err(e) if retry && e.kind() == std::io::ErrorKind::AlreadyExists => {
                        Self::load_or_create_once(data_dir, false)
                    }
                    Err(e) => Err(io(e)),
                }
            }
            Err(e) => Err(io(e)),
        }
    }

    fn mac(&self, uid: &str, boot_id: &str) -> Hmac<Sha256> {
        // new_from_slice accepts any key length for HMAC; the fallback is
        // unreachable but keeps this panic-free.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| <Hmac<Sha256> as Mac>::new(&Default::default()));
        // Length-prefix the uid so no two (uid, boot id) pairs share an input.
        m.update(&(uid.len() as u64).to_be_bytes());
        m.update(uid.as_bytes());
        m.update(boot_id.as_bytes());
        m
    }

    /// The token for one boot of one machine (64 hex characters).
    pub fn mint(&self, uid: &str, boot_id: &str) -> String {
        hex::encode(self.mac(uid, boot_id).finalize().into_bytes())
    }

    /// Constant-time check of a presented token.
    pub fn verify(&self, uid: &str, boot_id: &str, token: &str) -> bool {
        let Ok(raw) = hex::decode(token) else {
            return false;
        };
        self.mac(uid, boot_id).verify_slice(&raw).is_ok()
    }
}

/// Whether a query value looks like a token at all (64 hex characters).
pub fn is_token_shaped(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mint_and_verify() {
        let k = TokenKey::from_bytes([7; 32]);
        let t = k.mint("uid-1", "boot-1");
        assert!(is_token_shaped(&t));
        assert!(k.verify("uid-1", "boot-1", &t));
        assert!(!k.verify("uid-1", "boot-2", &t));
        assert!(!k.verify("uid-2", "boot-1", &t));
        assert!(!k.verify("uid-1", "boot-1", "zz"));
        // The separator keeps (uid, boot) pairs apart.
        assert_ne!(k.mint("ab", "c"), k.mint("a", "bc"));
    }

    #[test]
    fn key_file_is_private_and_stable() {
        let d = tempfile::tempdir().unwrap();
        let a = TokenKey::load_or_create(d.path()).unwrap();
        let mode = std::fs::metadata(d.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let b = TokenKey::load_or_create(d.path()).unwrap();
        assert_eq!(a.mint("u", "b"), b.mint("u", "b"));
        assert_eq!(format!("{a:?}"), "TokenKey(<redacted>)");
    }
}
