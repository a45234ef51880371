//! The Machine reconciler: per key, load the Machine, observe (class, BMC
//! power state, Node, boot slot), `decide`, and hand the plan to the
//! [`Executor`]. Also rebuilds the boot-storm table after a restart.
//!
//! Holds no lifecycle logic (that is `decide`) and performs no step itself
//! (that is the executor); it only gathers what `decide` needs.

use std::sync::Arc;

use jiff::Timestamp;
use tracing::Instrument;

use super::execute::{CONFLICT_RETRY, Executor, Outcome, bmc_reason};
use super::plan::{
    BmcObserved, ClassObserved, ClassView, Limits, NodeObserved, Observed, holds_boot_slot,
    node_name,
};
use crate::api::{Machine, MachineClass, MachinePhase};
use crate::bmc::{Bmc, BmcConnector};
use crate::cluster::{DrainOptions, TargetCluster};
use crate::controller::feed::ObjectKey;
use crate::controller::runner::{Reconciler, Requeue};
use crate::controller::storm::BootSlots;
use crate::store::events::EventType;
use crate::store::{ListOptions, Store, StoreError, TypedStore};

/// Reconciles Machines.
pub struct MachineReconciler {
    pub store: Arc<dyn Store>,
    pub connector: Arc<dyn BmcConnector>,
    /// The target cluster, when a kubeconfig is configured.
    pub cluster: Option<Arc<dyn TargetCluster>>,
    /// Boot-storm slots; give them the runner's queue with
    /// [`BootSlots::set_waker`] so a freed slot wakes its next waiter
    /// (without it waiters only find a slot on their `slot_wait` look).
    pub slots: BootSlots<ObjectKey>,
    pub limits: Limits,
    pub drain: DrainOptions,
    pub releaser: Option<Arc<dyn super::execute::AddressReleaser>>,
    /// Serves firmware images to BMCs (boot HTTP's image cache).
    pub firmware: Option<Arc<dyn super::execute::FirmwareImages>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

impl MachineReconciler {
    /// Mark every Machine with an open network boot as holding a boot-storm
    /// slot (after a restart), so the limit counts boots already running.
    pub async fn restore_slots(&self) -> Result<usize, StoreError> {
        let machines: Vec<Machine> = self.store.list_obj(&ListOptions::default()).await?;
        let mut n = 0;
        for m in machines {
            if m.status.as_ref().is_some_and(holds_boot_slot) {
                let key = ObjectKey::new(
                    m.metadata
                        .namespace
                        .clone()
                        .unwrap_or_else(|| crate::store::DEFAULT_NAMESPACE.to_string()),
                    m.metadata.name.clone().unwrap_or_default(),
                );
                self.slots.restore(key);
                n += 1;
            }
        }
        Ok(n)
    }

    /// The class the machine installs, and the resourceVersion of the live
    /// class it was read from (`None` for a set's pinned snapshot, which
    /// never changes, and when there is no class).
    async fn class(
        &self,
        ns: &str,
        m: &Machine,
    ) -> Result<(ClassObserved, Option<String>), StoreError> {
        let Some(r) = &m.spec.class_ref else {
            return Ok((ClassObserved::NotReferenced, None));
        };
        // A set's machine installs its pinned revision's snapshot, and is
        // up to date when it installed that snapshot: a live class change
        // reaches it only through its set's rollout.
        let pinned = crate::store::pinned::pinned_class(self.store.as_ref(), m).await?;
        if let Some((snapshot, hash)) = pinned {
            // `installs` stays what the snapshot installs: a machine that
            // already runs it (adopted, or installed before the set
            // claimed it) is up to date.
            let mut view = ClassView::new(m, &snapshot);
            view.revision = hash;
            return Ok((ClassObserved::Present(view), None));
        }
        match self.store.get_obj::<MachineClass>(ns, &r.name).await {
            Ok(c) => {
                let version = c.metadata.resource_version.clone();
                Ok((ClassObserved::Present(ClassView::new(m, &c)), version))
            }
            Err(e) if e.is_not_found() => Ok((
                ClassObserved::Missing {
                    name: r.name.clone(),
                },
                None,
            )),
            Err(e) => Err(e),
        }
    }

    /// Whether the live class moved on since the plan read it at
    /// `planned_from` (a watch brought an edit while the BMC was asked).
    /// The read is the cache's on a remote store, a local read otherwise.
    async fn class_moved(&self, ns: &str, m: &Machine, planned_from: &Option<String>) -> bool {
        let (Some(planned), Some(r)) = (planned_from, &m.spec.class_ref) else {
            return false;
        };
        match self.store.get_obj::<MachineClass>(ns, &r.name).await {
            Ok(c) => c.metadata.resource_version.as_ref() != Some(planned),
            Err(_) => true,
        }
    }

    async fn node(&self, m: &Machine) -> NodeObserved {
        let Some(c) = &self.cluster else {
            return NodeObserved::NotConfigured;
        };
        let phase = m.status.as_ref().and_then(|s| s.phase).unwrap_or_default();
        let wanted = m.metadata.deletion_timestamp.is_some()
            || matches!(
                phase,
                MachinePhase::Provisioned
                    | MachinePhase::Ready
                    | MachinePhase::Reimaging
                    | MachinePhase::Deprovisioning
            );
        if !wanted {
            // decide does not look at the Node in these phases.
            return NodeObserved::Absent;
        }
        let name = m
            .status
            .as_ref()
            .and_then(|s| s.node_ref.as_ref())
            .map(|r| r.name.clone())
            .unwrap_or_else(|| node_name(m));
        match c.get_node(&name).await {
            Ok(Some(n)) => NodeObserved::Present(n),
            Ok(None) => NodeObserved::Absent,
            Err(e) => NodeObserved::Unknown {
                message: e.to_string(),
            },
        }
    }

    /// Connect to the machine's BMC, unless it is paused (`Err(None)`).
    async fn bmc(&self, m: &Machine) -> Result<Box<dyn Bmc>, Option<crate::bmc::BmcError>> {
        if m.is_paused() {
            return Err(None);
        }
        self.connector.connect(m).await.map_err(Some)
    }

    async fn run(&self, key: &ObjectKey) -> Result<Requeue, ReconcileError> {
        let m: Machine = match self.store.get_obj(&key.namespace, &key.name).await {
            Ok(m) => m,
            Err(e) if e.is_not_found() => {
                self.slots.release(key);
                return Ok(Requeue::Forget);
            }
            Err(e) => return Err(e.into()),
        };
        let (class, class_version) = self.class(&key.namespace, &m).await?;
        let (bmc, observed_bmc) = match self.bmc(&m).await {
            Ok(b) => {
                let o = match b.power_state().await {
                    Ok(power) => BmcObserved::Reachable { power },
                    Err(e) => unreachable(&e),
                };
                (Some(b), o)
            }
            Err(Some(e)) => (None, unreachable(&e)),
            // A paused machine's BMC is never contacted; `decide` plans
            // nothing that needs it.
            Err(None) => (None, BmcObserved::NotAsked),
        };
        if let BmcObserved::Unreachable { reason, message } = &observed_bmc {
            let ex = self.executor(key, None, Timestamp::now());
            ex.event(&m, EventType::Warning, reason, message).await;
        }
        let node = self.node(&m).await;
        let observed = Observed {
            bmc: observed_bmc,
            class,
            node,
            boot_slot: self.slots.would_admit(key),
            limits: self.limits,
        };
        let now = Timestamp::now();
        let plan = super::decide(&m, &observed, now);
        tracing::debug!(%plan, "plan");
        // Never act on a plan made from a class that has since changed:
        // plan again from the new one.
        if self.class_moved(&key.namespace, &m, &class_version).await {
            tracing::debug!("class changed while planning; planning again");
            if let Some(b) = &bmc
                && let Err(e) = b.close().await
            {
                tracing::debug!(error = %e, "BMC logout failed");
            }
            return Ok(Requeue::After(CONFLICT_RETRY));
        }
        let ex = self.executor(key, bmc.as_deref(), now);
        let again = |m: &Machine| {
            let plan = super::decide(m, &observed, now);
            tracing::debug!(%plan, "plan (same reconcile)");
            plan
        };
        let result = ex.run(m, plan, again).await;
        if let Some(b) = &bmc
            && let Err(e) = b.close().await
        {
            tracing::debug!(error = %e, "BMC logout failed");
        }
        Ok(match result? {
            Outcome::Done(Some(d)) | Outcome::Stopped(d) => Requeue::After(d),
            Outcome::Done(None) => Requeue::Periodic,
            Outcome::Gone => {
                self.slots.release(key);
                Requeue::Forget
            }
        })
    }

    fn executor<'a>(
        &'a self,
        key: &'a ObjectKey,
        bmc: Option<&'a dyn Bmc>,
        now: Timestamp,
    ) -> Executor<'a> {
        Executor {
            store: self.store.as_ref(),
            releaser: self.releaser.as_deref(),
            firmware: self.firmware.as_deref(),
            key,
            bmc,
            cluster: self.cluster.as_deref(),
            slots: &self.slots,
            drain: &self.drain,
            bmc_retry: self.limits.bmc_retry,
            poll: self.limits.slot_wait.min(self.limits.poll),
            now,
        }
    }
}

fn unreachable(e: &crate::bmc::BmcError) -> BmcObserved {
    BmcObserved::Unreachable {
        reason: bmc_reason(e),
        message: e.to_string(),
    }
}

impl Reconciler for MachineReconciler {
    type Key = ObjectKey;
    type Error = ReconcileError;

    fn name(&self) -> &'static str {
        "machine"
    }

    async fn reconcile(&self, key: &ObjectKey) -> Result<Requeue, ReconcileError> {
        let span = tracing::info_span!("machine", machine = %key);
        match self.run(key).instrument(span).await {
            Err(ReconcileError::Store(e)) if e.is_conflict() => Ok(Requeue::After(CONFLICT_RETRY)),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests;
