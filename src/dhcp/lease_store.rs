//! Lease persistence: a write-ahead journal in front of the redb checkpoint
//! (`lease_db`). Owns the two journal files (`dhcp-leases.journal.0`/`.1`
//! in the data directory), their rotation, background checkpoints into
//! redb, and recovery at start. Blocking file I/O; no sockets, no DHCP
//! decisions. The format is in `journal`.
//!
//! Each batch of lease writes is encoded and written to the active journal
//! with one `pwrite` **before** the replies that depend on it are sent.
//! What that guarantees depends on [`LeaseSync`]:
//!
//! - `batch` (default): the write is in the kernel's page cache when the
//!   ACK leaves, so a crash of metalherd itself (panic, OOM kill,
//!   `kill -9`) loses nothing a client was told. A background task
//!   `fdatasync`s the journals every `intervalMs`: a power loss or kernel
//!   crash can lose the leases ACKed in the last interval (at most
//!   `intervalMs` plus one sync), so a client may then be told its address
//!   is free after a reboot of the appliance. Kea's memfile never syncs.
//! - `always`: the journal is `fdatasync`ed before the replies are sent;
//!   a power loss loses nothing that was ACKed. Costs one flush per batch.
//!
//! The journal files are preallocated (written with zeros) so a sync only
//! flushes data, and are reused: when the active one is half full, appends
//! move to the other (with a new generation in its header) and the writes
//! of the first are checkpointed into redb by a background thread. A file
//! is only reused once its checkpoint has committed, so the journals stay
//! bounded. Recovery at start: redb's leases, then both journals' records
//! replayed in generation order (replay is idempotent; it stops at a torn
//! or corrupt record), then one checkpoint and fresh journals.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::journal::{self, HEADER_LEN, RECORD_LEN};
use super::lease::{Lease, LeaseWrite};
use super::lease_db::{LeaseDb, LeaseDbError};

/// File name of the redb checkpoint inside the data directory.
pub const LEASE_FILE: &str = crate::datadir::DHCP_LEASE_FILE;
/// File names of the two journals inside the data directory.
pub const JOURNAL_FILES: [&str; 2] = crate::datadir::DHCP_JOURNAL_FILES;
/// Records per journal file by default (3 MiB each).
pub const DEFAULT_RECORDS: usize = 65_536;

/// When the journal is flushed to stable storage (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseSync {
    /// In the background every `interval`; kill -9 safe, not power-loss safe.
    Batch { interval: Duration },
    /// Before every reply that depends on the write; power-loss safe.
    Always,
}

impl Default for LeaseSync {
    fn default() -> Self {
        LeaseSync::Batch {
            interval: Duration::from_millis(1000),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseStoreError {
    #[error("lease journal {path}: {source}")]
    Journal {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{0}")]
    Db(#[from] LeaseDbError),
    #[error("lease checkpoint thread failed")]
    Checkpoint,
}

struct JournalFile {
    file: Arc<File>,
    path: PathBuf,
    /// Next write offset.
    pos: usize,
    /// Generation named in the header.
    generation: u32,
}

impl JournalFile {
    fn err(&self, source: io::Error) -> LeaseStoreError {
        LeaseStoreError::Journal {
            path: self.path.clone(),
            source,
        }
    }

    fn start(&mut self, generation: u32) -> Result<(), LeaseStoreError> {
        self.file
            .write_all_at(&journal::header(generation), 0)
            .map_err(|e| self.err(e))?;
        self.pos = HEADER_LEN;
        self.generation = generation;
        Ok(())
    }
}

/// Open (creating and preallocating) a journal file and read its bytes.
fn open_journal(path: &Path, len: usize) -> Result<(JournalFile, Vec<u8>), LeaseStoreError> {
    let e = |source| LeaseStoreError::Journal {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(e)?;
    let bytes = std::fs::read(path).map_err(e)?;
    if bytes.len() < len {
        // Real zeros, not a sparse hole: a later fdatasync then flushes
        // data only, no block allocation.
        let zeros = vec![0u8; 64 << 10];
        let mut at = bytes.len();
        while at < len {
            let n = zeros.len().min(len - at);
            file.write_all_at(&zeros[..n], at as u64).map_err(e)?;
            at += n;
        }
        file.sync_all().map_err(e)?;
    }
    Ok((
        JournalFile {
            file: Arc::new(file),
            path: path.to_path_buf(),
            pos: HEADER_LEN,
            generation: 0,
        },
        bytes,
    ))
}

/// A background checkpoint and the writes it commits.
type Checkpoint = (JoinHandle<Result<(), LeaseDbError>>, Arc<Vec<LeaseWrite>>);

/// The journals plus the redb checkpoint; owned by one task.
pub struct LeaseStore {
    db: Arc<LeaseDb>,
    files: [JournalFile; 2],
    active: usize,
    next_generation: u32,
    /// Bytes per journal file.
    capacity: usize,
    /// Writes in the active journal (not yet handed to a checkpoint).
    pending: Vec<LeaseWrite>,
    /// The checkpoint of the other journal, while it runs.
    checkpoint: Option<Checkpoint>,
    sync: LeaseSync,
    buf: Vec<u8>,
    /// Checkpoints committed (for metrics).
    pub checkpoints: u64,
}

/// What recovery found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovered {
    pub leases: Vec<Lease>,
    /// Journal records replayed on top of the checkpoint.
    pub replayed: usize,
    /// Journals whose replay stopped at a torn or corrupt record.
    pub torn: usize,
}

impl LeaseStore {
    /// Open the checkpoint and the journals in `dir`, replay, checkpoint
    /// what was replayed, and start fresh journals. Blocking.
    pub fn open(
        dir: &Path,
        records_per_file: usize,
        sync: LeaseSync,
    ) -> Result<(LeaseStore, Recovered), LeaseStoreError> {
        let db = LeaseDb::open(&dir.join(LEASE_FILE))?;
        let capacity = HEADER_LEN + records_per_file.max(16) * RECORD_LEN;
        let (f0, b0) = open_journal(&dir.join(JOURNAL_FILES[0]), capacity)?;
        let (f1, b1) = open_journal(&dir.join(JOURNAL_FILES[1]), capacity)?;
        let mut found = [journal::replay(&b0), journal::replay(&b1)];
        found.sort_by_key(|r| r.generation);
        let mut rec = Recovered::default();
        let mut writes = Vec::new();
        for r in &found {
            rec.torn += usize::from(r.stop == journal::Stop::Corrupt);
            writes.extend_from_slice(&r.writes);
        }
        rec.replayed = writes.len();
        if !writes.is_empty() {
            db.apply(&writes)?;
        }
        rec.leases = db.load()?;
        let newest = found.iter().filter_map(|r| r.generation).max().unwrap_or(0);
        let mut store = LeaseStore {
            db: Arc::new(db),
            files: [f0, f1],
            active: 0,
            next_generation: newest.wrapping_add(1),
            capacity,
            pending: Vec::new(),
            checkpoint: None,
            sync,
            buf: Vec::new(),
            checkpoints: 0,
        };
        // Both journals start over only now that their records are in redb.
        store.restart_both()?;
        Ok((store, rec))
    }

    fn restart_both(&mut self) -> Result<(), LeaseStoreError> {
        for i in [1, 0] {
            let g = self.take_generation();
            self.files[i].start(g)?;
            let f = &self.files[i];
            f.file.sync_data().map_err(|e| f.err(e))?;
        }
        self.active = 0;
        Ok(())
    }

    fn take_generation(&mut self) -> u32 {
        let g = self.next_generation.max(1);
        self.next_generation = g.wrapping_add(1);
        g
    }

    /// Handles for the background syncer (batch mode).
    pub fn sync_handles(&self) -> [Arc<File>; 2] {
        [self.files[0].file.clone(), self.files[1].file.clone()]
    }

    pub fn sync_mode(&self) -> LeaseSync {
        self.sync
    }

    /// Wait for a running checkpoint; if it failed, commit its writes here.
    fn finish_checkpoint(&mut self) -> Result<(), LeaseStoreError> {
        if let Some((h, writes)) = self.checkpoint.take() {
            let ok = matches!(h.join(), Ok(Ok(())));
            if !ok {
                tracing::warn!("lease checkpoint failed; retrying before the journal is reused");
                self.db.apply(&writes)?;
            }
            self.checkpoints += 1;
        }
        Ok(())
    }

    /// Move appends to the other journal and checkpoint this one's writes
    /// in the background.
    fn rotate(&mut self) -> Result<(), LeaseStoreError> {
        self.finish_checkpoint()?;
        let other = 1 - self.active;
        let g = self.take_generation();
        self.files[other].start(g)?;
        self.active = other;
        let writes = Arc::new(std::mem::take(&mut self.pending));
        let (db, w) = (self.db.clone(), writes.clone());
        let h = std::thread::Builder::new()
            .name("lease-checkpoint".into())
            .spawn(move || db.apply(&w))
            .map_err(|e| LeaseStoreError::Journal {
                path: self.files[other].path.clone(),
                source: e,
            })?;
        self.checkpoint = Some((h, writes));
        Ok(())
    }

    fn room(&self) -> usize {
        (self.capacity - self.files[self.active].pos) / RECORD_LEN
    }

    /// Journal `writes` (one `pwrite` per batch, more only when a journal
    /// fills up); in `always` mode also `fdatasync` before returning.
    pub fn append(&mut self, writes: &[LeaseWrite]) -> Result<(), LeaseStoreError> {
        let mut rest = writes;
        while !rest.is_empty() {
            if self.room() == 0 {
                self.rotate()?;
            }
            let n = rest.len().min(self.room());
            let (now, later) = rest.split_at(n);
            let g = self.files[self.active].generation;
            self.buf.clear();
            for w in now {
                journal::encode(g, w, &mut self.buf);
            }
            let f = &mut self.files[self.active];
            f.file
                .write_all_at(&self.buf, f.pos as u64)
                .map_err(|e| f.err(e))?;
            f.pos += self.buf.len();
            if self.sync == LeaseSync::Always {
                f.file.sync_data().map_err(|e| f.err(e))?;
            }
            self.pending.extend_from_slice(now);
            rest = later;
        }
        // Rotate early, while the other journal's checkpoint (if any) has
        // had half a journal's time to finish.
        let half = (self.capacity - HEADER_LEN) / 2;
        if self.files[self.active].pos - HEADER_LEN >= half
            && self
                .checkpoint
                .as_ref()
                .is_none_or(|(h, _)| h.is_finished())
        {
            self.rotate()?;
        }
        Ok(())
    }

    /// Clean shutdown: checkpoint everything and start both journals
    /// empty, so the next start replays nothing.
    pub fn close(mut self) -> Result<(), LeaseStoreError> {
        self.finish_checkpoint()?;
        let w = std::mem::take(&mut self.pending);
        self.db.apply(&w)?;
        self.restart_both()
    }
}

impl Drop for LeaseStore {
    /// Wait for a running checkpoint, so the redb file is closed when the
    /// store is gone (a reopen in the same process would otherwise fail).
    fn drop(&mut self) {
        if let Some((h, _)) = self.checkpoint.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::dhcp::lease::{ClientKey, LeaseState};

    fn put(n: u32) -> LeaseWrite {
        let mac = [2, 0, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8];
        LeaseWrite::Put(Lease {
            ip: Ipv4Addr::from(0x0a00_0000 + n),
            mac,
            client: ClientKey::from_mac(&mac),
            expires: 5000,
            state: LeaseState::Bound,
        })
    }

    fn ips(r: &Recovered) -> Vec<u32> {
        let mut v: Vec<u32> = r.leases.iter().map(|l| u32::from(l.ip)).collect();
        v.sort();
        v
    }

    #[test]
    fn journaled_writes_survive_a_crash_without_close() {
        let d = tempfile::tempdir().unwrap();
        {
            let (mut s, r) = LeaseStore::open(d.path(), 64, LeaseSync::default()).unwrap();
            assert!(r.leases.is_empty());
            s.append(&[put(1), put(2)]).unwrap();
            s.append(&[LeaseWrite::Delete(Ipv4Addr::from(0x0a00_0001)), put(3)])
                .unwrap();
            // Dropped without close: what a kill -9 leaves behind.
        }
        let (s, r) = LeaseStore::open(d.path(), 64, LeaseSync::default()).unwrap();
        assert_eq!(ips(&r), vec![0x0a00_0002, 0x0a00_0003]);
        assert_eq!(r.replayed, 4);
        drop(s);
        // Recovery checkpointed and started fresh journals: nothing to replay.
        let (_, r) = LeaseStore::open(d.path(), 64, LeaseSync::Always).unwrap();
        assert_eq!((r.replayed, r.leases.len()), (0, 2));
    }

    #[test]
    fn rotation_keeps_journals_bounded_and_loses_nothing() {
        let d = tempfile::tempdir().unwrap();
        {
            let (mut s, _) = LeaseStore::open(d.path(), 16, LeaseSync::default()).unwrap();
            // 500 writes through 16-record journals: many rotations and
            // checkpoints, and one batch larger than a journal.
            for n in 0..400 {
                s.append(&[put(n)]).unwrap();
            }
            let big: Vec<LeaseWrite> = (400..500).map(put).collect();
            s.append(&big).unwrap();
            assert!(s.checkpoints > 10);
        }
        for f in JOURNAL_FILES {
            let len = std::fs::metadata(d.path().join(f)).unwrap().len();
            assert_eq!(len as usize, HEADER_LEN + 16 * RECORD_LEN);
        }
        let (_, r) = LeaseStore::open(d.path(), 16, LeaseSync::default()).unwrap();
        assert_eq!(
            ips(&r),
            (0..500).map(|n| 0x0a00_0000 + n).collect::<Vec<_>>()
        );
    }

    #[test]
    fn torn_tail_is_tolerated_at_start() {
        let d = tempfile::tempdir().unwrap();
        {
            let (mut s, _) = LeaseStore::open(d.path(), 64, LeaseSync::default()).unwrap();
            s.append(&[put(1), put(2), put(3)]).unwrap();
        }
        // Tear the third record of journal 0 (the active one).
        let p = d.path().join(JOURNAL_FILES[0]);
        let mut b = std::fs::read(&p).unwrap();
        let third = HEADER_LEN + 2 * RECORD_LEN;
        b[third + 30..third + RECORD_LEN].fill(0xaa);
        std::fs::write(&p, &b).unwrap();
        let (_, r) = LeaseStore::open(d.path(), 64, LeaseSync::default()).unwrap();
        assert_eq!(ips(&r), vec![0x0a00_0001, 0x0a00_0002]);
        assert_eq!(r.torn, 1);
    }

    #[test]
    fn close_checkpoints_everything() {
        let d = tempfile::tempdir().unwrap();
        let (mut s, _) = LeaseStore::open(d.path(), 64, LeaseSync::Always).unwrap();
        s.append(&[put(7)]).unwrap();
        s.close().unwrap();
        let (_, r) = LeaseStore::open(d.path(), 64, LeaseSync::default()).unwrap();
        assert_eq!((r.replayed, ips(&r)), (0, vec![0x0a00_0007]));
    }
}
