//! The boot recorder: appends the boot services' steps to Machines'
//! `status.bootHistory` without making the caller wait, in as few store
//! writes as a boot allows (in Kubernetes mode each write is an API call).
//!
//! A machine's steps are held for up to [`HOLD`] from the first one and go
//! out together, so the handful of steps a boot makes within seconds (DHCP,
//! TFTP, the iPXE script) cost one write, and a client repeating a request
//! costs at most one write per [`HOLD`]. A write that changes the machine's
//! boot record anyway (Ignition served, a call-home) takes the held steps
//! along ([`BootRecorder::take`]), so most boots' early steps cost no write
//! of their own. Authenticated steps ([`crate::api::BootStep::is_authenticated`])
//! are written at once, with whatever is held for that machine, and have a
//! queue of their own: a flood of requests anyone can make never drops a
//! call-home.
//!
//! Also carries the boot services' Warning events about Machines
//! ([`BootRecorder::warn`]), each (Machine, reason) at most once per
//! [`WARN_EVERY`].

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::api::{BOOT_HISTORY_LIMIT, BootEvent, Kind, Machine};
use crate::store::events::{EventType, Regarding, record};
use crate::store::modify::{Target, modify_obj};
use crate::store::{Store, StoreError};

/// How long a machine's unauthenticated steps wait for more of the same
/// boot before they are written (the lag a boot's timeline can show).
pub const HOLD: Duration = Duration::from_secs(3);
/// The shortest interval between two Warning events of one reason about
/// one Machine (repeats within it are not written; Events fold repeats
/// into a count anyway).
pub const WARN_EVERY: Duration = Duration::from_secs(60);
/// Keys remembered for [`WARN_EVERY`] at most; past it the memory starts over.
const WARNED_MAX: usize = 4096;
/// How long the writer may take for what is held when it ends.
const LAST_WRITE: Duration = Duration::from_secs(5);
/// Machines the writer takes at once.
const RECORD_BATCH: usize = 1024;
/// Machines whose steps the writer writes at once.
const RECORD_CONCURRENCY: usize = 16;

/// (namespace, name) of a Machine.
type Key = (String, String);
/// (namespace, name, reason) of a warning.
type WarnKey = (String, String, &'static str);

/// A Warning event to record about a Machine.
struct Warn {
    namespace: String,
    name: String,
    reason: &'static str,
    message: String,
}

/// Records boot steps and warnings; cheap to clone, never blocks.
#[derive(Clone)]
pub struct BootRecorder {
    /// Steps not yet written, per machine. A machine has an entry only
    /// while a write of it is scheduled (or a caller took it).
    held: Arc<std::sync::Mutex<HashMap<Key, Vec<BootEvent>>>>,
    /// Machines to write once their hold is over, in order of that time.
    later_tx: mpsc::Sender<(Key, Instant)>,
    /// Machines to write at once (an authenticated step came).
    now_tx: mpsc::Sender<Key>,
    warn_tx: mpsc::Sender<Warn>,
    /// When each (namespace, name, reason) was last warned about.
    warned: Arc<std::sync::Mutex<HashMap<WarnKey, Instant>>>,
    dropped: Arc<AtomicU64>,
}

impl BootRecorder {
    /// Start the writer tasks; they end when every recorder clone is
    /// dropped or `cancel` fires, the step writer after writing what is
    /// held.
    pub fn spawn(store: Arc<dyn Store>, cancel: CancellationToken) -> BootRecorder {
        let mut tasks = tokio::task::JoinSet::new();
        let recorder = Self::spawn_in(store, cancel, &mut tasks);
        tasks.detach_all();
        recorder
    }

    /// [`Self::spawn`], with the writer tasks in `tasks`, so a shutdown
    /// that waits for them lets the step writer write what is held.
    pub fn spawn_in(
        store: Arc<dyn Store>,
        cancel: CancellationToken,
        tasks: &mut tokio::task::JoinSet<()>,
    ) -> BootRecorder {
        let (later_tx, later_rx) = mpsc::channel(4096);
        let (now_tx, now_rx) = mpsc::channel(1024);
        let (warn_tx, warn_rx) = mpsc::channel(256);
        let held = Arc::default();
        tasks.spawn(write_warnings(store.clone(), warn_rx, cancel.clone()));
        let writer = Writer {
            store,
            held: Arc::clone(&held),
            later_rx,
            now_rx,
            waiting: None,
        };
        tasks.spawn(writer.run(cancel));
        BootRecorder {
            held,
            later_tx,
            now_tx,
            warn_tx,
            warned: Arc::default(),
            dropped: Arc::default(),
        }
    }

    /// A recorder whose steps go nowhere (tests of protocol code).
    pub fn discard() -> BootRecorder {
        let (later_tx, _rx) = mpsc::channel(1);
        let (now_tx, _rx) = mpsc::channel(1);
        let (warn_tx, _rx) = mpsc::channel(1);
        BootRecorder {
            held: Arc::default(),
            later_tx,
            now_tx,
            warn_tx,
            warned: Arc::default(),
            dropped: Arc::default(),
        }
    }

    /// Record a Warning event about a Machine, unless the same reason was
    /// recorded for it within [`WARN_EVERY`]. Never blocks.
    pub fn warn(&self, namespace: &str, name: &str, reason: &'static str, message: &str) {
        let now = Instant::now();
        let key = (namespace.to_string(), name.to_string(), reason);
        {
            let Ok(mut warned) = self.warned.lock() else {
                return;
            };
            if warned
                .get(&key)
                .is_some_and(|t| now.duration_since(*t) < WARN_EVERY)
            {
                return;
            }
            if warned.len() >= WARNED_MAX {
                warned.clear();
            }
            warned.insert(key, now);
        }
        let w = Warn {
            namespace: namespace.to_string(),
            name: name.to_string(),
            reason,
            message: message.to_string(),
        };
        if self.warn_tx.try_send(w).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Record a step: held for up to [`HOLD`], or written at once when it
    /// is authenticated. Never blocks; a step that cannot be queued is
    /// dropped and counted, and so are the oldest unauthenticated steps of
    /// a machine holding more than a history keeps.
    pub fn record(&self, namespace: &str, name: &str, ev: BootEvent) {
        let key = (namespace.to_string(), name.to_string());
        let Ok(mut held) = self.held.lock() else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let scheduled = held.contains_key(&key);
        let queued = if ev.step.is_authenticated() {
            // Already scheduled: it goes out at the latest with that write.
            self.now_tx.try_send(key.clone()).is_ok() || scheduled
        } else {
            scheduled
                || self
                    .later_tx
                    .try_send((key.clone(), Instant::now() + HOLD))
                    .is_ok()
        };
        if !queued {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let evs = held.entry(key).or_default();
        evs.push(ev);
        let before = evs.len();
        trim_history(evs, BOOT_HISTORY_LIMIT);
        let trimmed = (before - evs.len()) as u64;
        if trimmed > 0 {
            self.dropped.fetch_add(trimmed, Ordering::Relaxed);
        }
    }

    /// Take a machine's held steps, for a caller about to write its status
    /// anyway (the scheduled write then finds nothing). What the caller
    /// does not write goes back through [`Self::give_back`].
    pub fn take(&self, namespace: &str, name: &str) -> Vec<BootEvent> {
        let key = (namespace.to_string(), name.to_string());
        self.held
            .lock()
            .ok()
            .and_then(|mut h| h.remove(&key))
            .unwrap_or_default()
    }

    /// Steps taken with [`Self::take`] and not written: record them again.
    pub fn give_back(&self, namespace: &str, name: &str, evs: Vec<BootEvent>) {
        for ev in evs {
            self.record(namespace, name, ev);
        }
    }

    /// Steps dropped because a queue was full or closed, or pushed out of
    /// a machine's held steps.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

async fn write_warnings(
    store: Arc<dyn Store>,
    mut rx: mpsc::Receiver<Warn>,
    cancel: CancellationToken,
) {
    loop {
        let w = tokio::select! {
            _ = cancel.cancelled() => return,
            w = rx.recv() => w,
        };
        let Some(w) = w else { return };
        let about = Regarding {
            kind: Kind::Machine,
            namespace: w.namespace,
            name: w.name,
            uid: None,
        };
        if let Err(e) = record(
            store.as_ref(),
            &about,
            EventType::Warning,
            w.reason,
            &w.message,
        )
        .await
        {
            tracing::warn!(machine = %format!("{}/{}", about.namespace, about.name), error = %e, "cannot record a warning");
        }
    }
}

/// The task that writes held steps when they are due.
struct Writer {
    store: Arc<dyn Store>,
    held: Arc<std::sync::Mutex<HashMap<Key, Vec<BootEvent>>>>,
    later_rx: mpsc::Receiver<(Key, Instant)>,
    now_rx: mpsc::Receiver<Key>,
    /// The next machine whose hold is not over yet.
    waiting: Option<(Key, Instant)>,
}

impl Writer {
    async fn run(mut self, cancel: CancellationToken) {
        loop {
            let first = tokio::select! {
                biased;
                _ = cancel.cancelled() => None,
                k = self.now_rx.recv() => k,
                k = Self::due(&mut self.waiting, &mut self.later_rx) => k,
            };
            let Some(first) = first else {
                // Shutting down, or every recorder is gone: write what is
                // held (for a bounded time), then end.
                let all: BTreeSet<Key> = self
                    .held
                    .lock()
                    .map(|h| h.keys().cloned().collect())
                    .unwrap_or_default();
                if tokio::time::timeout(LAST_WRITE, self.write(all))
                    .await
                    .is_err()
                {
                    tracing::warn!("boot steps still held at shutdown were not all written");
                }
                return;
            };
            let mut keys = BTreeSet::from([first]);
            while keys.len() < RECORD_BATCH
                && let Ok(k) = self.now_rx.try_recv()
            {
                keys.insert(k);
            }
            let now = Instant::now();
            while keys.len() < RECORD_BATCH {
                if let Some((_, at)) = &self.waiting {
                    if *at > now {
                        break;
                    }
                    if let Some((k, _)) = self.waiting.take() {
                        keys.insert(k);
                    }
                }
                match self.later_rx.try_recv() {
                    Ok(next) => self.waiting = Some(next),
                    Err(_) => break,
                }
            }
            self.write(keys).await;
        }
    }

    /// The next machine whose hold is over (waiting for it); `None` when
    /// the queue closed with nothing waiting.
    async fn due(
        waiting: &mut Option<(Key, Instant)>,
        rx: &mut mpsc::Receiver<(Key, Instant)>,
    ) -> Option<Key> {
        let (key, at) = match waiting.take() {
            Some(w) => w,
            None => rx.recv().await?,
        };
        *waiting = Some((key, at));
        tokio::time::sleep_until(at).await;
        waiting.take().map(|(k, _)| k)
    }

    async fn write(&self, keys: BTreeSet<Key>) {
        use futures::StreamExt;
        let batch: Vec<(Key, Vec<BootEvent>)> = match self.held.lock() {
            Ok(mut held) => keys
                .into_iter()
                .filter_map(|k| held.remove(&k).map(|evs| (k, evs)))
                .collect(),
            Err(_) => return,
        };
        let store = self.store.as_ref();
        futures::stream::iter(batch)
            .for_each_concurrent(RECORD_CONCURRENCY, |((ns, name), mut evs)| async move {
                // A machine's steps in the order they happened, whichever
                // way they came.
                evs.sort_by_key(|e| e.time);
                if let Err(e) = append_boot_events(store, &ns, &name, &evs).await {
                    tracing::warn!(machine = %format!("{ns}/{name}"), error = %e, "cannot record boot steps");
                }
            })
            .await;
    }
}

/// Append one step to a Machine's `status.bootHistory` (keeping the last
/// [`BOOT_HISTORY_LIMIT`]), retrying on conflicts.
pub async fn append_boot_event(
    store: &dyn Store,
    namespace: &str,
    name: &str,
    ev: BootEvent,
) -> Result<(), StoreError> {
    append_boot_events(store, namespace, name, std::slice::from_ref(&ev)).await
}

/// Append steps, in order, to a Machine's `status.bootHistory` in one
/// status update (keeping the last [`BOOT_HISTORY_LIMIT`]), retrying on
/// conflicts.
pub async fn append_boot_events(
    store: &dyn Store,
    namespace: &str,
    name: &str,
    evs: &[BootEvent],
) -> Result<(), StoreError> {
    modify_obj::<Machine>(store, namespace, name, Target::Status, |m| {
        let Some(mut m) = m else { return Ok(None) };
        let st = m.status.get_or_insert_with(Default::default);
        insert_boot_events(&mut st.boot_history, evs);
        Ok(Some(m))
    })
    .await
    .map(|_| ())
}

pub use crate::api::boot::{insert_boot_events, trim_history};

#[cfg(test)]
mod tests;
