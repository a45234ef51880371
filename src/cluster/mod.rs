//! The target Kubernetes cluster: Node lookup, cordon, uncordon, drain by
//! eviction and Node deletion, behind the [`TargetCluster`] trait.
//!
//! [`kube::KubeCluster`] implements it with kube-rs for a kubeconfig;
//! [`fake::FakeCluster`] is the in-memory double for controller tests. The
//! drain algorithm itself ([`drain`]) is shared: it needs only "list the pods
//! on a node" and "evict one pod".
//!
//! This module knows nothing about Machines or the store; it never imports
//! `controller`.

pub mod drain;
pub mod fake;
pub mod kube;

#[cfg(test)]
mod tests;

use std::time::Duration;

use async_trait::async_trait;

pub use drain::{DrainOptions, DrainReport, PodSummary};

/// What metalherd needs to know about a Node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeState {
    pub name: String,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// `status.nodeInfo.kubeletVersion`, `v1.33.2`.
    pub kubelet_version: String,
    /// `status.nodeInfo.containerRuntimeVersion`, `containerd://2.0.5`.
    pub container_runtime_version: String,
    /// `status.nodeInfo.osImage`, `Flatcar Container Linux by Kinvolk 4230.2.3`.
    pub os_image: String,
    pub kernel_version: String,
}

/// What can go wrong talking to the target cluster. Messages name the node
/// or pod, never credentials from the kubeconfig.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    #[error("cannot use kubeconfig {path}: {detail}")]
    Kubeconfig { path: String, detail: String },
    #[error("{op} {target}: API server answered {code} {reason}: {message}")]
    Api {
        op: &'static str,
        target: String,
        code: u16,
        reason: String,
        message: String,
    },
    #[error("{op} {target}: {detail}")]
    Transport {
        op: &'static str,
        target: String,
        detail: String,
    },
    #[error("node {node} not found")]
    NodeNotFound { node: String },
    #[error("draining node {node} timed out after {after:?}; still blocked: {}", blocking.join(", "))]
    DrainTimeout {
        node: String,
        after: Duration,
        /// `namespace/name` of each pod that could not be evicted (or had
        /// not terminated) by the deadline.
        blocking: Vec<String>,
    },
    /// A test double got a call it was not told to expect.
    #[error("unexpected call {call}; expected {expected}")]
    Unexpected { call: String, expected: String },
}

impl ClusterError {
    /// A short CamelCase reason for conditions, events and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            ClusterError::Kubeconfig { .. } => "KubeconfigInvalid",
            ClusterError::Api { .. } => "ClusterApiError",
            ClusterError::Transport { .. } => "ClusterUnreachable",
            ClusterError::NodeNotFound { .. } => "NodeNotFound",
            ClusterError::DrainTimeout { .. } => "DrainTimeout",
            ClusterError::Unexpected { .. } => "UnexpectedCall",
        }
    }
}

/// Node operations on the cluster a Machine joins. Every operation is
/// idempotent: cordoning a cordoned node, deleting an absent one, or
/// draining an empty one succeeds.
#[async_trait]
pub trait TargetCluster: Send + Sync + 'static {
    /// The Node, or `None` when it does not exist.
    async fn get_node(&self, name: &str) -> Result<Option<NodeState>, ClusterError>;
    /// Mark the Node unschedulable.
    async fn cordon(&self, name: &str) -> Result<(), ClusterError>;
    /// Mark the Node schedulable again.
    async fn uncordon(&self, name: &str) -> Result<(), ClusterError>;
    /// Evict every pod on the Node except DaemonSet-owned and mirror pods,
    /// honouring PodDisruptionBudgets, and wait for them to go; a budget
    /// that still blocks at `opts.timeout` gives [`ClusterError::DrainTimeout`].
    async fn drain(&self, name: &str, opts: &DrainOptions) -> Result<DrainReport, ClusterError>;
    /// Delete the Node object (absent is fine).
    async fn delete_node(&self, name: &str) -> Result<(), ClusterError>;
}
