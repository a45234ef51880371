//! The runner: drives a [`Reconciler`] over a keyed work queue. Keys come in
//! through a [`QueueHandle`] (fed by store watches, see [`super::feed`], or
//! by anything else that knows a key needs a look); the runner de-duplicates
//! them, runs at most `concurrency` reconciles at once (a Semaphore) and
//! never two for the same key, requeues periodically, backs off per key on
//! errors, and on cancellation lets in-flight reconciles finish within a
//! grace period.
//!
//! The queue rules live in [`super::queue`]; this file only owns tasks,
//! timers and metrics. It knows nothing about Machines or stores.

use std::collections::HashMap;
use std::fmt::{Debug, Display};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use super::queue::{Backoff, Requeue};
use super::queue::{Finished, WorkQueue};

/// What a key type needs to be queued.
pub trait QueueKey: Clone + Eq + Hash + Ord + Debug + Display + Send + Sync + 'static {}
impl<T: Clone + Eq + Hash + Ord + Debug + Display + Send + Sync + 'static> QueueKey for T {}

/// Brings one object (named by its key) towards what it should be.
/// Level-triggered: it reads current state itself and must be safe to call
/// again at any time, including after being cancelled half-way.
pub trait Reconciler: Send + Sync + 'static {
    type Key: QueueKey;
    type Error: Display + Send + 'static;
    /// Controller name for spans, logs and metric labels (`machine`).
    fn name(&self) -> &'static str;
    fn reconcile(
        &self,
        key: &Self::Key,
    ) -> impl Future<Output = Result<Requeue, Self::Error>> + Send;
}

/// Runner settings.
#[derive(Clone, Copy, Debug)]
pub struct RunnerConfig {
    /// Reconciles running at once (at least 1).
    pub concurrency: usize,
    /// How often every key is looked at again after a success.
    pub resync: Duration,
    pub backoff: Backoff,
    /// How long in-flight reconciles may take to finish after cancellation.
    pub shutdown_grace: Duration,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        RunnerConfig {
            concurrency: 16,
            resync: Duration::from_secs(300),
            backoff: Backoff::default(),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// Sends keys to a runner. Cheap to clone; never blocks.
#[derive(Clone, Debug)]
pub struct QueueHandle<K> {
    tx: mpsc::UnboundedSender<K>,
}

impl<K> QueueHandle<K> {
    /// A handle and the receiving end, for feeding something other than a
    /// [`Runner`] (tests, fan-in).
    pub fn channel() -> (QueueHandle<K>, mpsc::UnboundedReceiver<K>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (QueueHandle { tx }, rx)
    }

    /// Ask for a reconcile of `key` as soon as possible. Asks while the
    /// runner is gone are dropped (there is no one left to do them).
    pub fn enqueue(&self, key: K) {
        let _ = self.tx.send(key);
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

/// Runner metrics; register once, share between runners.
#[derive(Clone, Debug, Default)]
pub struct RunnerMetrics {
    reconciles: Family<ResultLabels, Counter>,
    queued: Family<ControllerLabels, Gauge>,
    running: Family<ControllerLabels, Gauge>,
}

impl RunnerMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "reconciles",
            "Reconciles finished, by controller and result (ok, error, panic)",
            self.reconciles.clone(),
        );
        registry.register(
            "reconcile_queue_depth",
            "Keys waiting in a controller's work queue",
            self.queued.clone(),
        );
        registry.register(
            "reconciles_running",
            "Reconciles in flight",
            self.running.clone(),
        );
    }

    /// Reconciles of `controller` that ended with `result`.
    pub fn count(&self, controller: &'static str, result: &'static str) -> u64 {
        self.reconciles
            .get_or_create(&ResultLabels { controller, result })
            .get()
    }
}

/// Runs one reconciler until cancelled.
pub struct Runner<R: Reconciler> {
    reconciler: Arc<R>,
    config: RunnerConfig,
    tx: mpsc::UnboundedSender<R::Key>,
    rx: mpsc::UnboundedReceiver<R::Key>,
    metrics: RunnerMetrics,
}

impl<R: Reconciler> Runner<R> {
    pub fn new(reconciler: Arc<R>, config: RunnerConfig) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Runner {
            reconciler,
            config,
            tx,
            rx,
            metrics: RunnerMetrics::default(),
        }
    }

    pub fn with_metrics(mut self, metrics: RunnerMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn handle(&self) -> QueueHandle<R::Key> {
        QueueHandle {
            tx: self.tx.clone(),
        }
    }

    /// Work the queue until `cancel` fires, then give in-flight reconciles
    /// `shutdown_grace` to finish and abort the rest.
    pub async fn run(mut self, cancel: CancellationToken) {
        let name = self.reconciler.name();
        let labels = ControllerLabels { controller: name };
        let mut queue = WorkQueue::new(self.config.backoff, self.config.resync);
        let permits = Arc::new(Semaphore::new(self.config.concurrency.max(1)));
        let mut tasks: JoinSet<Result<Requeue, R::Error>> = JoinSet::new();
        let mut keys: HashMap<tokio::task::Id, R::Key> = HashMap::new();
        loop {
            let now = Instant::now();
            // Take every ask already waiting, so a burst of asks for one key
            // becomes one reconcile rather than one plus a dirty rerun.
            while let Ok(key) = self.rx.try_recv() {
                queue.schedule(key, now);
            }
            while queue.next_due().is_some_and(|t| t <= now) {
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    break;
                };
                let Some(key) = queue.pop(now) else { break };
                let r = self.reconciler.clone();
                let k = key.clone();
                let span = tracing::info_span!("reconcile", controller = name, key = %key);
                let task = async move {
                    let _permit = permit;
                    r.reconcile(&k).await
                };
                let h = tasks.spawn(task.instrument(span));
                keys.insert(h.id(), key);
            }
            self.metrics
                .queued
                .get_or_create(&labels)
                .set(i64::try_from(queue.queued()).unwrap_or(i64::MAX));
            self.metrics
                .running
                .get_or_create(&labels)
                .set(i64::try_from(queue.running()).unwrap_or(i64::MAX));
            // With every permit taken, a due key must wait for a finish, not
            // a timer (which would fire at once and spin).
            let wake = queue.next_due().filter(|_| permits.available_permits() > 0);
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                Some(done) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                    let (id, how, result) = match done {
                        Ok((id, Ok(r))) => (id, Finished::Ok(r), "ok"),
                        Ok((id, Err(e))) => {
                            if let Some(k) = keys.get(&id) {
                                tracing::warn!(controller = name, key = %k, error = %e, "reconcile failed");
                            }
                            (id, Finished::Failed, "error")
                        }
                        Err(je) => {
                            tracing::error!(controller = name, error = %je, "reconcile panicked");
                            (je.id(), Finished::Failed, "panic")
                        }
                    };
                    self.metrics.reconciles.get_or_create(&ResultLabels { controller: name, result }).inc();
                    if let Some(k) = keys.remove(&id) {
                        queue.finish(k, how, Instant::now());
                    }
                }
                Some(key) = self.rx.recv() => queue.schedule(key, Instant::now()),
                _ = tokio::time::sleep_until(wake.unwrap_or(now)), if wake.is_some() => {}
            }
        }
        let drain = async { while tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(self.config.shutdown_grace, drain)
            .await
            .is_err()
        {
            tracing::warn!(
                controller = name,
                left = tasks.len(),
                "reconciles still running at shutdown; aborting them"
            );
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod store_tests;
