//! An in-memory [`TargetCluster`] for controller tests. Nodes live in a map;
//! reads (`get_node`) are always allowed, but every change (cordon,
//! uncordon, drain, delete) must have been announced with [`FakeCluster::expect`]
//! in the order it happens. Anything else is answered with
//! [`ClusterError::Unexpected`] and remembered, so [`FakeCluster::verify`]
//! fails the test even when the code under test swallowed the error.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use super::{ClusterError, DrainOptions, DrainReport, NodeState, TargetCluster};

/// A changing call, as the fake records and expects it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    Cordon(String),
    Uncordon(String),
    Drain(String),
    DeleteNode(String),
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Call::Cordon(n) => write!(f, "cordon({n})"),
            Call::Uncordon(n) => write!(f, "uncordon({n})"),
            Call::Drain(n) => write!(f, "drain({n})"),
            Call::DeleteNode(n) => write!(f, "delete_node({n})"),
        }
    }
}

#[derive(Default)]
struct Inner {
    nodes: BTreeMap<String, NodeState>,
    expected: VecDeque<(Call, Option<ClusterError>)>,
    calls: Vec<Call>,
    unexpected: Vec<String>,
}

/// The in-memory target cluster.
#[derive(Default)]
pub struct FakeCluster {
    inner: Mutex<Inner>,
}

impl FakeCluster {
    pub fn new() -> FakeCluster {
        FakeCluster::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A test that panicked while holding the lock has failed already.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Add or replace a Node.
    pub fn set_node(&self, node: NodeState) {
        self.lock().nodes.insert(node.name.clone(), node);
    }

    pub fn remove_node(&self, name: &str) {
        self.lock().nodes.remove(name);
    }

    pub fn node(&self, name: &str) -> Option<NodeState> {
        self.lock().nodes.get(name).cloned()
    }

    /// Expect `call` next; it succeeds (and changes the nodes accordingly).
    pub fn expect(&self, call: Call) {
        self.lock().expected.push_back((call, None));
    }

    /// Expect `call` next and answer it with `err`.
    pub fn expect_err(&self, call: Call, err: ClusterError) {
        self.lock().expected.push_back((call, Some(err)));
    }

    /// Every changing call made so far, in order (expected or not).
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// `Ok` when every expected call happened and nothing else did.
    pub fn verify(&self) -> Result<(), String> {
        let g = self.lock();
        let mut problems = g.unexpected.clone();
        problems.extend(
            g.expected
                .iter()
                .map(|(c, _)| format!("expected {c} never happened")),
        );
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }

    /// Check `call` against the next expectation; on a match apply `effect`.
    fn take(&self, call: Call, effect: impl FnOnce(&mut Inner)) -> Result<(), ClusterError> {
        let mut g = self.lock();
        g.calls.push(call.clone());
        match g.expected.front() {
            Some((want, _)) if *want == call => {
                if let Some((_, Some(err))) = g.expected.pop_front() {
                    return Err(err);
                }
                effect(&mut g);
                Ok(())
            }
            other => {
                let expected = other.map_or("nothing".to_string(), |(c, _)| c.to_string());
                g.unexpected
                    .push(format!("unexpected {call} (expected {expected})"));
                Err(ClusterError::Unexpected {
                    call: call.to_string(),
                    expected,
                })
            }
        }
    }
}

fn not_found(name: &str) -> ClusterError {
    ClusterError::NodeNotFound {
        node: name.to_string(),
    }
}

#[async_trait]
impl TargetCluster for FakeCluster {
    async fn get_node(&self, name: &str) -> Result<Option<NodeState>, ClusterError> {
        Ok(self.node(name))
    }

    async fn cordon(&self, name: &str) -> Result<(), ClusterError> {
        let mut found = false;
        self.take(Call::Cordon(name.into()), |g| {
            if let Some(n) = g.nodes.get_mut(name) {
                n.unschedulable = true;
                found = true;
            }
        })?;
        if found { Ok(()) } else { Err(not_found(name)) }
    }

    async fn uncordon(&self, name: &str) -> Result<(), ClusterError> {
        let mut found = false;
        self.take(Call::Uncordon(name.into()), |g| {
            if let Some(n) = g.nodes.get_mut(name) {
                n.unschedulable = false;
                found = true;
            }
        })?;
        if found { Ok(()) } else { Err(not_found(name)) }
    }

    async fn drain(&self, name: &str, _opts: &DrainOptions) -> Result<DrainReport, ClusterError> {
        self.take(Call::Drain(name.into()), |_| {})?;
        Ok(DrainReport::default())
    }

    async fn delete_node(&self, name: &str) -> Result<(), ClusterError> {
        self.take(Call::DeleteNode(name.into()), |g| {
            g.nodes.remove(name);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> NodeState {
        NodeState {
            name: name.into(),
            ready: true,
            ..NodeState::default()
        }
    }

    #[tokio::test]
    async fn expected_calls_change_the_nodes() {
        let c = FakeCluster::new();
        c.set_node(node("n1"));
        c.expect(Call::Cordon("n1".into()));
        c.expect(Call::Drain("n1".into()));
        c.expect(Call::DeleteNode("n1".into()));
        c.cordon("n1").await.unwrap();
        assert!(c.node("n1").unwrap().unschedulable);
        c.drain("n1", &DrainOptions::default()).await.unwrap();
        c.delete_node("n1").await.unwrap();
        assert_eq!(c.get_node("n1").await.unwrap(), None);
        c.verify().unwrap();
    }

    #[tokio::test]
    async fn unexpected_call_fails_and_is_remembered() {
        let c = FakeCluster::new();
        c.set_node(node("n1"));
        c.expect(Call::Cordon("n1".into()));
        let err = c.delete_node("n1").await.unwrap_err();
        assert!(matches!(err, ClusterError::Unexpected { .. }), "{err}");
        assert!(c.node("n1").is_some(), "an unexpected call changes nothing");
        let problems = c.verify().unwrap_err();
        assert!(
            problems.contains("unexpected delete_node(n1)"),
            "{problems}"
        );
        assert!(problems.contains("cordon(n1) never happened"), "{problems}");
    }

    #[tokio::test]
    async fn scripted_error_is_returned() {
        let c = FakeCluster::new();
        c.expect_err(
            Call::Drain("n1".into()),
            ClusterError::DrainTimeout {
                node: "n1".into(),
                after: std::time::Duration::from_secs(1),
                blocking: vec!["default/web-0".into()],
            },
        );
        let err = c.drain("n1", &DrainOptions::default()).await.unwrap_err();
        assert_eq!(err.reason(), "DrainTimeout");
        assert!(err.to_string().contains("default/web-0"));
        c.verify().unwrap();
    }

    #[tokio::test]
    async fn cordon_of_absent_node_is_not_found() {
        let c = FakeCluster::new();
        c.expect(Call::Cordon("ghost".into()));
        let err = c.cordon("ghost").await.unwrap_err();
        assert!(matches!(err, ClusterError::NodeNotFound { .. }));
    }
}
