//! The embedded store's writer: one thread owns every write transaction.
//! Writes that arrive while a commit is in flight wait together and go into
//! the next transaction, made durable by one commit (group commit), so
//! concurrent writers share one fsync instead of queueing for one each.
//!
//! What a caller sees is unchanged: its write is committed (durable) before
//! its call returns; resourceVersions, the change log and the live
//! broadcast stay in one order; a write whose `decide` refuses it (a
//! conflict) fails alone and changes nothing. If the transaction itself
//! fails, every write in it fails.
//!
//! Owns no object semantics (each job's `decide` closure does) and no
//! reads (those go straight to the database).

use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;

use redb::{ReadableTable, WriteTransaction};
use serde_json::Value;
use tokio::sync::oneshot;

use super::tables::{Broadcast, Inner, LOG, META, OBJECTS, append_log, backend, prune};
use crate::api::Kind;
use crate::store::semantics::Change;
use crate::store::{StoreError, WatchEvent};

/// Most writes one transaction takes (bounds a commit's size and latency).
const MAX_BATCH: usize = 256;

/// The caller's decision: from the current object and the next
/// resourceVersion, the change to make.
pub(super) type Decide =
    Box<dyn FnOnce(Option<Value>, u64) -> Result<Change, StoreError> + Send + 'static>;

struct Job {
    kind: Kind,
    key: String,
    decide: Decide,
    reply: oneshot::Sender<Result<Value, StoreError>>,
}

/// Handle to the writer thread; dropping it stops (and joins) the thread,
/// so the database file is closed when the store is.
pub(super) struct Writer {
    tx: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    pub(super) fn spawn(inner: Arc<Inner>) -> Result<Writer, StoreError> {
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || run(&inner, &rx))
            .map_err(backend)?;
        Ok(Writer {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Apply one write and wait until it is committed.
    pub(super) async fn submit(
        &self,
        kind: Kind,
        key: String,
        decide: Decide,
    ) -> Result<Value, StoreError> {
        let (reply, rx) = oneshot::channel();
        let job = Job {
            kind,
            key,
            decide,
            reply,
        };
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(job).is_ok());
        if !sent {
            return Err(StoreError::Backend("store writer has stopped".into()));
        }
        rx.await
            .map_err(|_| StoreError::Backend("store writer dropped a write".into()))?
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(inner: &Inner, rx: &mpsc::Receiver<Job>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(j) => batch.push(j),
                Err(_) => break,
            }
        }
        commit_batch(inner, batch);
    }
}

type Reply = (
    oneshot::Sender<Result<Value, StoreError>>,
    Result<Value, StoreError>,
);

fn commit_batch(inner: &Inner, batch: Vec<Job>) {
    let mut replies: Vec<Reply> = Vec::with_capacity(batch.len());
    let mut broadcasts: Vec<Broadcast> = Vec::new();
    let committed = inner.db.begin_write().map_err(backend).and_then(|w| {
        apply(&w, batch, inner.keep, &mut replies, &mut broadcasts)?;
        w.commit().map_err(backend)
    });
    match committed {
        Ok(()) => {
            // No receivers is fine: nobody is watching.
            for b in broadcasts {
                let _ = inner.tx.send(b);
            }
            for (to, r) in replies {
                let _ = to.send(r);
            }
        }
        Err(e) => {
            let msg = e.to_string();
            for (to, r) in replies {
                let r = match r {
                    Err(own) => Err(own),
                    Ok(_) => Err(StoreError::Backend(msg.clone())),
                };
                let _ = to.send(r);
            }
        }
    }
}

/// Apply every job of the batch inside `w`, in arrival order: each sees
/// the writes before it. A job refused by its `decide` (or whose stored
/// object does not parse) fails alone; a table error fails the batch (jobs
/// not reached yet are dropped, which their callers see as an error).
fn apply(
    w: &WriteTransaction,
    batch: Vec<Job>,
    keep: u64,
    replies: &mut Vec<Reply>,
    broadcasts: &mut Vec<Broadcast>,
) -> Result<(), StoreError> {
    let mut objects = w.open_table(OBJECTS).map_err(backend)?;
    let mut log = w.open_table(LOG).map_err(backend)?;
    let mut meta = w.open_table(META).map_err(backend)?;
    let first_rv = meta
        .get("rv")
        .map_err(backend)?
        .map(|g| g.value())
        .unwrap_or(0);
    let mut rv = first_rv;
    for job in batch {
        let current: Option<Value> = match objects.get(job.key.as_str()).map_err(backend)? {
            Some(g) => match serde_json::from_slice(g.value()) {
                Ok(v) => Some(v),
                Err(e) => {
                    replies.push((job.reply, Err(backend(e))));
                    continue;
                }
            },
            None => None,
        };
        let next = rv + 1;
        let change = match (job.decide)(current, next) {
            Ok(c) => c,
            Err(e) => {
                replies.push((job.reply, Err(e)));
                continue;
            }
        };
        let (result, event) = match change {
            Change::Unchanged(v) => {
                replies.push((job.reply, Ok(v)));
                continue;
            }
            Change::Put { object, event } => {
                let bytes = serde_json::to_vec(&object).map_err(backend)?;
                objects
                    .insert(job.key.as_str(), bytes.as_slice())
                    .map_err(backend)?;
                let ev = event.into_event(object.clone());
                (object, ev)
            }
            Change::Remove { last } => {
                objects.remove(job.key.as_str()).map_err(backend)?;
                (last.clone(), WatchEvent::Deleted(last))
            }
        };
        append_log(&mut log, job.kind, next, &event)?;
        rv = next;
        broadcasts.push(Broadcast {
            kind: job.kind,
            rv,
            event,
        });
        replies.push((job.reply, Ok(result)));
    }
    if rv != first_rv {
        meta.insert("rv", rv).map_err(backend)?;
        prune(&mut log, first_rv, rv, keep)?;
    }
    Ok(())
}
