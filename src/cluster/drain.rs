//! Draining a node by eviction, independent of how pods are listed and
//! evicted: which pods to evict (not DaemonSet-owned, not mirror pods),
//! retrying evictions a PodDisruptionBudget refuses (HTTP 429) with
//! exponential backoff, then waiting for the evicted pods to terminate, all
//! within one deadline. Timers are tokio's, so tests run on paused time.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::ClusterError;

/// Deadline and pacing of a drain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainOptions {
    /// The whole drain (evictions plus termination) must finish within this.
    pub timeout: Duration,
    /// First wait after a refused eviction; doubles up to `max_backoff`.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// How often to look whether evicted pods are gone.
    pub poll_interval: Duration,
}

impl Default for DrainOptions {
    fn default() -> Self {
        DrainOptions {
            timeout: Duration::from_secs(600),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            poll_interval: Duration::from_secs(2),
        }
    }
}

/// The drain-relevant facts of one pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSummary {
    pub namespace: String,
    pub name: String,
    /// Owned by a DaemonSet: its controller would recreate it on the node.
    pub daemonset: bool,
    /// A static pod's mirror (annotation `kubernetes.io/config.mirror`):
    /// the API server cannot evict it.
    pub mirror: bool,
}

impl PodSummary {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
    /// Whether a drain evicts this pod.
    pub fn evictable(&self) -> bool {
        !self.daemonset && !self.mirror
    }
}

/// What a drain did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// `namespace/name` of the pods evicted (or already gone).
    pub evicted: Vec<String>,
    /// DaemonSet and mirror pods left on the node.
    pub skipped: Vec<String>,
    /// How many evictions a disruption budget refused before it allowed them.
    pub refusals: u32,
}

/// The answer to one eviction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// Accepted: the pod is being deleted.
    Accepted,
    /// The pod no longer exists.
    Gone,
    /// Refused (HTTP 429), usually by a PodDisruptionBudget.
    Refused { message: String },
}

/// The two cluster calls a drain needs.
#[async_trait]
pub trait PodOps: Send + Sync {
    async fn pods_on_node(&self, node: &str) -> Result<Vec<PodSummary>, ClusterError>;
    async fn evict(&self, pod: &PodSummary) -> Result<Eviction, ClusterError>;
}

/// Drain `node` through `ops`.
pub async fn drain_node(
    ops: &dyn PodOps,
    node: &str,
    opts: &DrainOptions,
) -> Result<DrainReport, ClusterError> {
    let deadline = Instant::now() + opts.timeout;
    let timeout = |blocking: Vec<String>| ClusterError::DrainTimeout {
        node: node.to_string(),
        after: opts.timeout,
        blocking,
    };
    let (mut pending, skipped): (Vec<_>, Vec<_>) = ops
        .pods_on_node(node)
        .await?
        .into_iter()
        .partition(PodSummary::evictable);
    let mut report = DrainReport {
        skipped: skipped.iter().map(PodSummary::key).collect(),
        ..DrainReport::default()
    };
    let mut backoff = opts.initial_backoff;
    while !pending.is_empty() {
        let mut refused = Vec::new();
        for pod in pending {
            match ops.evict(&pod).await? {
                Eviction::Accepted | Eviction::Gone => report.evicted.push(pod.key()),
                Eviction::Refused { message } => {
                    tracing::info!(pod = %pod.key(), %message, "eviction refused; will retry");
                    report.refusals += 1;
                    refused.push(pod);
                }
            }
        }
        pending = refused;
        if pending.is_empty() {
            break;
        }
        if Instant::now() + backoff > deadline {
            return Err(timeout(pending.iter().map(PodSummary::key).collect()));
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(opts.max_backoff);
    }
    // Evictions only start graceful deletion; the node is drained when the
    // evicted pods are actually gone from it.
    if report.evicted.is_empty() {
        return Ok(report);
    }
    let evicted: BTreeSet<&String> = report.evicted.iter().collect();
    loop {
        let left: Vec<String> = ops
            .pods_on_node(node)
            .await?
            .iter()
            .map(PodSummary::key)
            .filter(|k| evicted.contains(k))
            .collect();
        if left.is_empty() {
            return Ok(report);
        }
        if Instant::now() + opts.poll_interval > deadline {
            return Err(timeout(left));
        }
        tokio::time::sleep(opts.poll_interval).await;
    }
}
