//! The in-memory store: the [`Store`] double tests use instead of hand-made
//! fakes, with the same semantics as every backend (it takes them from
//! [`super::semantics`] and passes the shared suite in `tests.rs`):
//! resourceVersion conflicts, generations, finalizers, label selectors,
//! watches that resume from a version and answer `Gone` once the change log
//! no longer reaches back that far.
//!
//! [`Faults`] wraps any store to script failures: the next call of an
//! operation fails with a given error, or every open watch ends with one.
//!
//! Nothing is persisted. One mutex guards the objects, the change log and
//! the live broadcast, so a watch that subscribes under it misses nothing.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};

use super::semantics::{self, Change};
use super::{Deleted, ListOptions, ObjectList, Store, StoreError, WatchEvent, WatchStream, key_of};
use crate::api::Kind;

/// Changes kept for watch resumption unless told otherwise.
const LOG_KEEP: usize = 10_000;

type Key = (&'static str, String, String);

struct State {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    /// `(resourceVersion, kind, event)`, oldest first, at most `keep`.
    log: VecDeque<(u64, Kind, WatchEvent)>,
    keep: usize,
}

impl State {
    /// Changes of `kind` after `from`; `Gone` when the log starts later.
    fn since(&self, kind: Kind, from: u64) -> Result<Vec<(u64, WatchEvent)>, StoreError> {
        let oldest = self.log.front().map_or(self.rv + 1, |(rv, _, _)| *rv);
        if from < self.rv && from + 1 < oldest {
            return Err(StoreError::Gone {
                requested: from.to_string(),
                oldest: oldest.to_string(),
            });
        }
        Ok(self
            .log
            .iter()
            .filter(|(rv, k, _)| *rv > from && *k == kind)
            .map(|(rv, _, ev)| (*rv, ev.clone()))
            .collect())
    }
}

/// A [`Store`] kept in process memory. Cheap to clone (clones share).
#[derive(Clone)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    tx: broadcast::Sender<(u64, Kind, WatchEvent)>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::with_log_limit(LOG_KEEP)
    }

    /// A store whose change log keeps only the last `keep` changes (a
    /// watch from further back gets `Gone`).
    pub fn with_log_limit(keep: usize) -> MemoryStore {
        let (tx, _) = broadcast::channel(1024);
        MemoryStore {
            state: Arc::new(Mutex::new(State {
                rv: 0,
                objects: BTreeMap::new(),
                log: VecDeque::new(),
                keep: keep.max(1),
            })),
            tx,
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>, StoreError> {
        self.state
            .lock()
            .map_err(|_| StoreError::Backend("memory store poisoned".into()))
    }

    /// Apply one write decided by `semantics` from the current object.
    fn write(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        decide: impl FnOnce(Option<Value>, u64) -> Result<Change, StoreError>,
    ) -> Result<Value, StoreError> {
        let mut st = self.lock()?;
        let key: Key = (kind.as_str(), ns.to_string(), name.to_string());
        let next = st.rv + 1;
        let (result, event) = match decide(st.objects.get(&key).cloned(), next)? {
            Change::Unchanged(v) => return Ok(v),
            Change::Put { object, event } => {
                st.objects.insert(key, object.clone());
                (object.clone(), event.into_event(object))
            }
            Change::Remove { last } => {
                st.objects.remove(&key);
                (last.clone(), WatchEvent::Deleted(last))
            }
        };
        st.rv = next;
        st.log.push_back((next, kind, event.clone()));
        while st.log.len() > st.keep {
            st.log.pop_front();
        }
        // No receivers is fine: nobody is watching.
        let _ = self.tx.send((next, kind, event));
        Ok(result)
    }
}

fn parse_rv(s: &str) -> Result<u64, StoreError> {
    s.parse()
        .map_err(|_| StoreError::BadResourceVersion(s.to_string()))
}

fn not_found(kind: Kind, ns: &str, name: &str) -> StoreError {
    StoreError::NotFound {
        kind,
        namespace: ns.to_string(),
        name: name.to_string(),
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Value, StoreError> {
        let key: Key = (kind.as_str(), namespace.to_string(), name.to_string());
        self.lock()?
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(kind, namespace, name))
    }

    async fn list(&self, kind: Kind, opts: &ListOptions) -> Result<ObjectList, StoreError> {
        let st = self.lock()?;
        let items = st
            .objects
            .iter()
            .filter(|((k, ns, _), _)| {
                *k == kind.as_str() && opts.namespace.as_ref().is_none_or(|want| want == ns)
            })
            .filter(|(_, v)| opts.selector.matches(v))
            .map(|(_, v)| v.clone())
            .collect();
        Ok(ObjectList {
            items,
            resource_version: st.rv.to_string(),
        })
    }

    async fn create(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        let obj = semantics::prepare_input(kind, obj)?;
        let (ns, name) = key_of(&obj);
        self.write(kind, &ns, &name, |cur, rv| {
            semantics::create(kind, cur, obj, rv)
        })
    }

    async fn update(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        let obj = semantics::prepare_input(kind, obj)?;
        let (ns, name) = key_of(&obj);
        self.write(kind, &ns, &name, |cur, rv| {
            semantics::update(kind, cur, obj, rv)
        })
    }

    async fn update_status(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        let (ns, name) = key_of(&obj);
        self.write(kind, &ns, &name, |cur, rv| {
            semantics::update_status(kind, cur, obj, rv)
        })
    }

    async fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<Deleted, StoreError> {
        let mut marked = false;
        let v = self.write(kind, namespace, name, |cur, rv| {
            let ch = semantics::delete(kind, namespace, name, cur, rv)?;
            marked = matches!(ch, Change::Put { .. } | Change::Unchanged(_));
            Ok(ch)
        })?;
        Ok(if marked {
            Deleted::Marked(v)
        } else {
            Deleted::Gone(v)
        })
    }

    async fn watch(
        &self,
        kind: Kind,
        opts: &ListOptions,
        from: Option<&str>,
    ) -> Result<WatchStream, StoreError> {
        let from = from.map(parse_rv).transpose()?;
        // Subscribe and read the backlog under one lock: writes broadcast
        // under it too, so nothing falls between them.
        let (live, backlog, from) = {
            let st = self.lock()?;
            let from = from.unwrap_or(st.rv);
            (self.tx.subscribe(), st.since(kind, from)?, from)
        };
        let state = self.state.clone();
        Ok(super::replay::serve(
            opts.clone(),
            from,
            backlog,
            live,
            move |(rv, k, ev)| (k == kind).then_some((rv, ev)),
            move |seen| {
                let caught = match state.lock() {
                    Ok(st) => st.since(kind, seen),
                    Err(_) => Err(StoreError::Backend("memory store poisoned".into())),
                };
                std::future::ready(caught)
            },
        ))
    }
}

/// Store operations a [`Faults`] script can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Get,
    List,
    Create,
    Update,
    UpdateStatus,
    Delete,
    Watch,
}

type MakeError = Box<dyn Fn() -> StoreError + Send + Sync>;

/// A store that passes every call to `inner` except those scripted to
/// fail. Records where each watch started from.
pub struct Faults {
    inner: Arc<dyn Store>,
    next: Mutex<VecDeque<(Op, StoreError)>>,
    watched_from: Mutex<Vec<Option<String>>>,
    /// Fires to end every open watch with the error it carries.
    breaker: broadcast::Sender<Arc<MakeError>>,
}

impl Faults {
    pub fn new(inner: Arc<dyn Store>) -> Faults {
        Faults {
            inner,
            next: Mutex::new(VecDeque::new()),
            watched_from: Mutex::new(Vec::new()),
            breaker: broadcast::channel(16).0,
        }
    }

    /// The next call of `op` (after any already scripted for it) fails
    /// with `err` without reaching the inner store.
    pub fn fail_next(&self, op: Op, err: StoreError) {
        if let Ok(mut q) = self.next.lock() {
            q.push_back((op, err));
        }
    }

    /// End every watch open now with the error `make` builds.
    pub fn break_watches(&self, make: impl Fn() -> StoreError + Send + Sync + 'static) {
        let _ = self.breaker.send(Arc::new(Box::new(make)));
    }

    /// The `from` of every watch call so far, in order.
    pub fn watched_from(&self) -> Vec<Option<String>> {
        self.watched_from
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default()
    }

    fn scripted(&self, op: Op) -> Result<(), StoreError> {
        let Ok(mut q) = self.next.lock() else {
            return Ok(());
        };
        match q.iter().position(|(o, _)| *o == op) {
            Some(i) => match q.remove(i) {
                Some((_, e)) => Err(e),
                None => Ok(()),
            },
            None => Ok(()),
        }
    }
}

#[async_trait]
impl Store for Faults {
    async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Value, StoreError> {
        self.scripted(Op::Get)?;
        self.inner.get(kind, namespace, name).await
    }
    async fn list(&self, kind: Kind, opts: &ListOptions) -> Result<ObjectList, StoreError> {
        self.scripted(Op::List)?;
        self.inner.list(kind, opts).await
    }
    async fn create(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        self.scripted(Op::Create)?;
        self.inner.create(kind, obj).await
    }
    async fn update(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        self.scripted(Op::Update)?;
        self.inner.update(kind, obj).await
    }
    async fn update_status(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        self.scripted(Op::UpdateStatus)?;
        self.inner.update_status(kind, obj).await
    }
    async fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<Deleted, StoreError> {
        self.scripted(Op::Delete)?;
        self.inner.delete(kind, namespace, name).await
    }
    async fn watch(
        &self,
        kind: Kind,
        opts: &ListOptions,
        from: Option<&str>,
    ) -> Result<WatchStream, StoreError> {
        if let Ok(mut w) = self.watched_from.lock() {
            w.push(from.map(str::to_string));
        }
        self.scripted(Op::Watch)?;
        let mut breaker = self.breaker.subscribe();
        let mut inner = self.inner.watch(kind, opts, from).await?;
        let stream = async_stream_lite(move |tx| async move {
            loop {
                tokio::select! {
                    ev = inner.next() => match ev {
                        Some(ev) => if tx.send(ev).await.is_err() { return },
                        None => return,
                    },
                    b = breaker.recv() => {
                        if let Ok(make) = b {
                            let _ = tx.send(Err(make())).await;
                        }
                        return;
                    }
                }
            }
        });
        Ok(stream)
    }
}

/// A stream fed by a task that sends into a channel (the task ends when
/// the stream is dropped and its next send fails).
fn async_stream_lite<F, Fut>(body: F) -> WatchStream
where
    F: FnOnce(mpsc::Sender<Result<WatchEvent, StoreError>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(body(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}
