//! DHCPv6 lease persistence: a snapshot (`dhcp6-leases.snapshot`, written
//! whole through the atomic writer) and a journal (`dhcp6-leases.journal`)
//! that every batch of lease writes is appended to with one `pwrite`
//! before the replies that depend on it are sent. Blocking file I/O; no
//! sockets, no DHCP decisions. The format is in `journal`.
//!
//! What a crash loses follows `leaseSync`, as for DHCPv4: `batch` flushes
//! the journal in the background every interval (a crash of metalherd
//! loses nothing a client was told; a power loss at most the last
//! interval), `always` flushes before the replies go out.
//!
//! Compaction: at start (after recovery) and when the journal has grown
//! past its limit, the live leases are written as a snapshot of the next
//! generation and the journal starts over at that generation. A crash
//! between the two leaves a newer snapshot beside an older journal, which
//! then no longer counts: the snapshot holds all it said.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::journal::{self, HEADER_LEN, JOURNAL_MAGIC, RECORD_LEN, SNAPSHOT_MAGIC, Stop};
use super::lease::{Lease6, LeaseWrite6};
use crate::dhcp::lease_store::LeaseSync;

/// File names inside the data directory.
pub const SNAPSHOT_FILE: &str = "dhcp6-leases.snapshot";
pub const JOURNAL_FILE: &str = "dhcp6-leases.journal";
/// Journal records before a compaction (about 12 MiB).
pub const MAX_RECORDS: usize = 1 << 17;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Lease6StoreError {
    #[error("DHCPv6 lease file {path}: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// What recovery found.
#[derive(Debug, Default)]
pub struct Recovered6 {
    pub leases: Vec<Lease6>,
    /// Journal records replayed over the snapshot.
    pub replayed: usize,
    /// The journal ended in a torn or corrupt record.
    pub torn: bool,
    /// The snapshot is unreadable or damaged (not written by this format,
    /// or corrupted on disk): the leases in and after the damage are lost.
    pub snapshot_damaged: bool,
}

pub struct Lease6Store {
    dir: PathBuf,
    journal: Arc<File>,
    generation: u32,
    /// Next write offset in the journal.
    pos: u64,
    sync: LeaseSync,
}

fn read_or_empty(path: &Path) -> Result<Vec<u8>, Lease6StoreError> {
    match std::fs::read(path) {
        Ok(b) => Ok(b),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(Lease6StoreError::File {
            path: path.to_path_buf(),
            source,
        }),
    }
}

impl Lease6Store {
    /// Recover the leases of `dir` (snapshot, then the journal of the same
    /// generation), and compact them into a fresh snapshot and journal.
    pub fn open(
        dir: &Path,
        sync: LeaseSync,
    ) -> Result<(Lease6Store, Recovered6), Lease6StoreError> {
        let snap = read_or_empty(&dir.join(SNAPSHOT_FILE))?;
        let jpath = dir.join(JOURNAL_FILE);
        let jbytes = read_or_empty(&jpath)?;
        let mut map: HashMap<_, Lease6> = HashMap::new();
        let (g, puts, _, snap_stop) = journal::replay(SNAPSHOT_MAGIC, &snap);
        journal::apply(&mut map, puts);
        let generation = g.unwrap_or(0);
        let mut rec = Recovered6 {
            snapshot_damaged: !snap.is_empty() && snap_stop != Stop::End,
            ..Recovered6::default()
        };
        let (jg, writes, _, stop) = journal::replay(JOURNAL_MAGIC, &jbytes);
        if jg == Some(generation) {
            rec.replayed = writes.len();
            rec.torn = stop == Stop::Corrupt;
            journal::apply(&mut map, writes);
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&jpath)
            .map_err(|source| Lease6StoreError::File {
                path: jpath.clone(),
                source,
            })?;
        let mut store = Lease6Store {
            dir: dir.to_path_buf(),
            journal: Arc::new(file),
            generation,
            pos: HEADER_LEN as u64,
            sync,
        };
        rec.leases = map.into_values().collect();
        store.compact(rec.leases.iter())?;
        Ok((store, rec))
    }

    fn err(&self, name: &str, source: io::Error) -> Lease6StoreError {
        Lease6StoreError::File {
            path: self.dir.join(name),
            source,
        }
    }

    pub fn sync_mode(&self) -> LeaseSync {
        self.sync
    }

    /// The journal, for the background flush in `batch` mode.
    pub fn sync_handle(&self) -> Arc<File> {
        self.journal.clone()
    }

    /// Whether the journal has grown past its limit.
    pub fn wants_compaction(&self) -> bool {
        self.pos >= (HEADER_LEN + MAX_RECORDS * RECORD_LEN) as u64
    }

    /// Journal `writes` (and flush them in `always` mode).
    pub fn append(&mut self, writes: &[LeaseWrite6]) -> Result<(), Lease6StoreError> {
        if writes.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::with_capacity(writes.len() * RECORD_LEN);
        for w in writes {
            journal::encode(self.generation, w, &mut buf);
        }
        self.journal
            .write_all_at(&buf, self.pos)
            .map_err(|e| self.err(JOURNAL_FILE, e))?;
        self.pos += buf.len() as u64;
        if self.sync == LeaseSync::Always {
            self.journal
                .sync_data()
                .map_err(|e| self.err(JOURNAL_FILE, e))?;
        }
        Ok(())
    }

    /// Write `leases` as the next generation's snapshot and start the
    /// journal over.
    pub fn compact<'a>(
        &mut self,
        leases: impl Iterator<Item = &'a Lease6>,
    ) -> Result<(), Lease6StoreError> {
        let next = self.generation.wrapping_add(1);
        let snap = journal::snapshot(next, leases);
        crate::private_file::replace(&self.dir.join(SNAPSHOT_FILE), &snap)
            .map_err(|e| self.err(SNAPSHOT_FILE, e))?;
        let j = &self.journal;
        j.set_len(0)
            .and_then(|()| j.write_all_at(&journal::header(JOURNAL_MAGIC, next), 0))
            .and_then(|()| j.sync_all())
            .map_err(|e| self.err(JOURNAL_FILE, e))?;
        self.generation = next;
        self.pos = HEADER_LEN as u64;
        Ok(())
    }

    /// Flush the journal (clean shutdown).
    pub fn close(self) -> Result<(), Lease6StoreError> {
        self.journal
            .sync_data()
            .map_err(|e| self.err(JOURNAL_FILE, e))
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use super::*;
    use crate::dhcp::lease::ClientKey;
    use crate::dhcp::v6::lease::State6;

    fn lease(n: u16, expires: u64) -> Lease6 {
        Lease6 {
            addr: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, n),
            owner: ClientKey([n as u8; 16]),
            iaid: 1,
            duid: ClientKey([n as u8; 16]),
            mac: None,
            boot: false,
            expires,
            state: State6::Bound,
        }
    }

    #[test]
    fn a_reopen_recovers_journaled_writes_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, rec) = Lease6Store::open(dir.path(), LeaseSync::Always).unwrap();
        assert!(rec.leases.is_empty());
        s.append(&[LeaseWrite6::Put(lease(1, 9)), LeaseWrite6::Put(lease(2, 9))])
            .unwrap();
        s.append(&[LeaseWrite6::Delete(lease(1, 9).addr)]).unwrap();
        drop(s); // as a kill would: no close
        let (mut s, rec) = Lease6Store::open(dir.path(), LeaseSync::Always).unwrap();
        assert_eq!(rec.leases, vec![lease(2, 9)]);
        assert_eq!(rec.replayed, 3);
        // Recovery compacted: the next open replays nothing.
        s.append(&[LeaseWrite6::Put(lease(3, 9))]).unwrap();
        let j = dir.path().join(JOURNAL_FILE);
        let mut b = std::fs::read(&j).unwrap();
        let last = b.len() - 5;
        b[last] ^= 1;
        std::fs::write(&j, &b).unwrap();
        let (_, rec) = Lease6Store::open(dir.path(), LeaseSync::Always).unwrap();
        assert!(rec.torn);
        assert!(!rec.snapshot_damaged);
        assert_eq!(rec.leases, vec![lease(2, 9)]);
        // A damaged snapshot is said, not silently taken as empty.
        let snap = dir.path().join(SNAPSHOT_FILE);
        let mut b = std::fs::read(&snap).unwrap();
        b[3] ^= 1;
        std::fs::write(&snap, &b).unwrap();
        let (_, rec) = Lease6Store::open(dir.path(), LeaseSync::Always).unwrap();
        assert!(rec.snapshot_damaged);
    }

    #[test]
    fn a_newer_snapshot_beside_an_older_journal_wins() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Lease6Store::open(dir.path(), LeaseSync::Always).unwrap();
        s.append(&[LeaseWrite6::Put(lease(1, 9))]).unwrap();
        // A compaction that crashed after the snapshot, before the journal
        // restarted: write the snapshot only.
        let snap = journal::snapshot(s.generation + 1, [lease(1, 9), lease(4, 9)].iter());
        std::fs::write(dir.path().join(SNAPSHOT_FILE), snap).unwrap();
        drop(s);
        let (_, rec) = Lease6Store::open(dir.path(), LeaseSync::Always).unwrap();
        let mut got: Vec<u16> = rec.leases.iter().map(|l| l.addr.segments()[7]).collect();
        got.sort();
        assert_eq!((got, rec.replayed), (vec![1, 4], 0));
    }
}
