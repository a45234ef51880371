//! The lease checkpoint: every lease in its own redb file
//! (`<data-dir>/dhcp-leases.redb`). Blocking calls: the lease store runs
//! them on a blocking thread. A batch of [`LeaseWrite`]s is one fsync'd
//! transaction. Lease writes reach this file through the journal
//! (`lease_store`), which checkpoints into it in the background; no reply
//! waits for it.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::lease::{ClientKey, Lease, LeaseState, LeaseWrite};

const LEASES: TableDefinition<u32, &[u8]> = TableDefinition::new("leases");
/// mac, expires, state, client key.
const RECORD_LEN: usize = 31;
/// Records written before leases had a client key (keyed by mac).
const OLD_RECORD_LEN: usize = 15;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseDbError {
    #[error("lease database {path}: {message}")]
    Db { path: PathBuf, message: String },
}

pub struct LeaseDb {
    db: Database,
    path: PathBuf,
}

fn encode(l: &Lease) -> [u8; RECORD_LEN] {
    let mut b = [0u8; RECORD_LEN];
    b[..6].copy_from_slice(&l.mac);
    b[6..14].copy_from_slice(&l.expires.to_be_bytes());
    b[14] = l.state.to_u8();
    b[15..].copy_from_slice(&l.client.0);
    b
}

fn decode(ip: u32, b: &[u8]) -> Option<Lease> {
    if b.len() != RECORD_LEN && b.len() != OLD_RECORD_LEN {
        return None;
    }
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&b[..6]);
    let mut e = [0u8; 8];
    e.copy_from_slice(&b[6..14]);
    let client = match b.get(15..31) {
        Some(k) => {
            let mut c = [0u8; 16];
            c.copy_from_slice(k);
            ClientKey(c)
        }
        None => ClientKey::from_mac(&mac),
    };
    Some(Lease {
        ip: Ipv4Addr::from(ip),
        mac,
        client,
        expires: u64::from_be_bytes(e),
        state: LeaseState::from_u8(b[14])?,
    })
}

impl LeaseDb {
    pub fn open(path: &Path) -> Result<LeaseDb, LeaseDbError> {
        let e = |m: String| LeaseDbError::Db {
            path: path.to_path_buf(),
            message: m,
        };
        let db = Database::create(path).map_err(|x| e(x.to_string()))?;
        let me = LeaseDb {
            db,
            path: path.to_path_buf(),
        };
        // Make sure the table exists so reads never fail on a fresh file.
        me.apply(&[])?;
        Ok(me)
    }

    fn err(&self, m: impl ToString) -> LeaseDbError {
        LeaseDbError::Db {
            path: self.path.clone(),
            message: m.to_string(),
        }
    }

    /// Every persisted lease (undecodable records are skipped).
    pub fn load(&self) -> Result<Vec<Lease>, LeaseDbError> {
        let tx = self.db.begin_read().map_err(|x| self.err(x))?;
        let t = tx.open_table(LEASES).map_err(|x| self.err(x))?;
        let mut out = Vec::new();
        for item in t.iter().map_err(|x| self.err(x))? {
            let (k, v) = item.map_err(|x| self.err(x))?;
            if let Some(l) = decode(k.value(), v.value()) {
                out.push(l);
            }
        }
        Ok(out)
    }

    /// Commit `writes` in one durable transaction.
    pub fn apply(&self, writes: &[LeaseWrite]) -> Result<(), LeaseDbError> {
        let tx = self.db.begin_write().map_err(|x| self.err(x))?;
        {
            let mut t = tx.open_table(LEASES).map_err(|x| self.err(x))?;
            for w in writes {
                match w {
                    LeaseWrite::Put(l) => {
                        t.insert(u32::from(l.ip), encode(l).as_slice())
                            .map_err(|x| self.err(x))?;
                    }
                    LeaseWrite::Delete(ip) => {
                        t.remove(u32::from(*ip)).map_err(|x| self.err(x))?;
                    }
                }
            }
        }
        tx.commit().map_err(|x| self.err(x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l.redb");
        let l = Lease {
            ip: Ipv4Addr::new(10, 0, 0, 9),
            mac: [2, 0, 0, 0, 0, 9],
            client: ClientKey::from_client_id(b"client-9").unwrap(),
            expires: 12345,
            state: LeaseState::Bound,
        };
        {
            let db = LeaseDb::open(&p).unwrap();
            db.apply(&[LeaseWrite::Put(l)]).unwrap();
            db.apply(&[
                LeaseWrite::Put(Lease {
                    ip: Ipv4Addr::new(10, 0, 0, 10),
                    ..l
                }),
                LeaseWrite::Delete(Ipv4Addr::new(10, 0, 0, 10)),
            ])
            .unwrap();
        }
        let db = LeaseDb::open(&p).unwrap();
        assert_eq!(db.load().unwrap(), vec![l]);
    }

    #[test]
    fn old_records_are_keyed_by_mac() {
        let l = decode(0x0a00_0009, &[2, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 5, 1]).unwrap();
        assert_eq!(l.client, ClientKey::from_mac(&[2, 0, 0, 0, 0, 9]));
        assert_eq!(l.expires, 5);
        assert_eq!(l.state, LeaseState::Bound);
    }
}
