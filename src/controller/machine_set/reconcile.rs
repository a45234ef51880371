//! The MachineSet reconciler: per set, gather the inputs of
//! [`plan`](super::plan::plan), record the planned status, then take the
//! actions. Every Machine write carries the resourceVersion it was read at,
//! so two sets (or two controller replicas) can never both claim a Machine:
//! the second write is a conflict, and the machine is claimed by one.
//!
//! The set's Machines come from a watch-fed [`MachineCache`] (parsed once
//! per change, not listed and parsed on every reconcile); the writes read
//! their Machine from the store again, so a cache that lags can only cost a
//! conflict and a retry, and each written Machine goes into the cache so
//! the next reconcile sees the set's own write.
//!
//! Crash safety: the status (with the batch and its members) is written
//! before any Machine is touched; a restart plans again from it and redoes
//! only pins that did not land. A pin that landed is not repeated (the plan
//! sees it), and a repeated pin changes nothing, so no extra reimage.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use tracing::Instrument;

use super::cache::MachineCache;
use super::metrics;
use super::plan::{Action, Health, Input, MachineView, NotClaimable, plan};
use super::probe::Prober;
use crate::api::ConditionStatus;
use crate::api::machine_set::{REVISION_LABEL, SET_LABEL, SetRevision};
use crate::api::{
    Kind, LocalObjectReference, Machine, MachineClass, MachinePhase, MachineSet,
    POWER_CYCLE_ANNOTATION, REIMAGE_ANNOTATION, RemediationAction,
};
use crate::controller::feed::ObjectKey;
use crate::controller::runner::{Reconciler, Requeue};
use crate::store::events::{EventType, Regarding, record};
use crate::store::pinned::pin_of;
use crate::store::selector::SelectorError;
use crate::store::{ListOptions, Selector, Store, StoreError, TypedStore};

/// Machine writes (claims, pins, releases) of one plan in flight at once.
const MACHINE_WRITES: usize = 64;

/// How often a set with a batch in flight looks again (gate clocks).
pub const GATE_POLL: Duration = Duration::from_secs(2);
/// How often a set that remediates on its health probe probes a settled
/// pool (a Node going NotReady changes its Machine, which wakes the set).
pub const HEALTH_POLL: Duration = Duration::from_secs(5);

fn probe_configured(set: &MachineSet) -> bool {
    set.spec
        .update_strategy
        .as_ref()
        .and_then(|u| u.health_check.as_ref())
        .is_some_and(|h| h.http_probe.is_some())
}

/// How long a reconcile waits for the Machine cache's first list before it
/// gives the key back to the queue.
const SYNC_WAIT: Duration = Duration::from_secs(1);

/// Reconciles MachineSets.
pub struct MachineSetReconciler {
    pub store: Arc<dyn Store>,
    /// The Machines, kept in step with the store by its reflector.
    pub machines: Arc<MachineCache>,
    pub prober: Arc<dyn Prober>,
    /// A target cluster is configured: Node Ready is part of the gate.
    pub cluster_configured: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SetError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("selector: {0}")]
    Selector(#[from] SelectorError),
}

fn labels(m: &Machine) -> &std::collections::BTreeMap<String, String> {
    static EMPTY: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    m.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// The machine's address for the probe: its InternalIP, else the static
/// address without its prefix length.
pub fn machine_address(m: &Machine) -> Option<String> {
    let st = m.status.as_ref();
    st.and_then(|s| s.addresses.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address.clone())
        .or_else(|| {
            let a = m.spec.network.as_ref()?.address.as_ref()?;
            Some(a.split('/').next().unwrap_or(a).to_string())
        })
}

impl MachineSetReconciler {
    fn view(&self, m: &Machine, set_name: &str) -> MachineView {
        let st = m.status.as_ref();
        let pinned = pin_of(m).filter(|(s, _)| *s == set_name).map(|(_, r)| r);
        MachineView {
            name: m.metadata.name.clone().unwrap_or_default(),
            created: m.metadata.creation_timestamp.as_ref().map(|t| t.0),
            phase: st.and_then(|s| s.phase).unwrap_or_default(),
            pinned: pinned.or_else(|| labels(m).get(SET_LABEL).map(|_| 0)),
            installed: st.and_then(|s| s.provisioned_revision.clone()),
            paused: m.is_paused(),
            health: Health::default(),
            adoptable: Err(NotClaimable::NotReady),
        }
    }

    /// A candidate with whether, Ready, it runs what `set`'s template
    /// installs (see [`adoptable`]).
    fn candidate(&self, m: &Machine, set: &MachineSet, set_name: &str) -> MachineView {
        let mut v = self.view(m, set_name);
        v.adoptable = adoptable(m, &set.spec.template);
        v
    }

    async fn health(&self, set: &MachineSet, m: &Machine, v: &mut MachineView) {
        if v.phase != MachinePhase::Ready {
            return;
        }
        if self.cluster_configured {
            let ready = m.status.as_ref().and_then(|s| {
                crate::api::condition::find_condition(
                    &s.conditions,
                    crate::controller::machine::plan::cond::NODE_READY,
                )
                .map(|c| c.status == ConditionStatus::True)
            });
            v.health.node_ready = Some(ready.unwrap_or(false));
            v.health.node_unknown = m.status.as_ref().is_none_or(|s| {
                crate::api::condition::find_condition(
                    &s.conditions,
                    crate::controller::machine::plan::cond::NODE_READY,
                )
                .is_none_or(|c| c.status == ConditionStatus::Unknown)
            });
            if ready != Some(true) {
                v.health.detail = Some("node not Ready".into());
            }
        }
        let probe = set
            .spec
            .update_strategy
            .as_ref()
            .and_then(|u| u.health_check.as_ref())
            .and_then(|h| h.http_probe.as_ref());
        if let Some(p) = probe {
            let want = p.expected_status.unwrap_or(200);
            let Some(addr) = machine_address(m) else {
                v.health.probe_ok = Some(false);
                v.health.detail = Some("no address to probe".into());
                return;
            };
            let url = p.url.replace("{{address}}", &addr);
            match self.prober.status(&url).await {
                Ok(code) if code == want => v.health.probe_ok = Some(true),
                Ok(code) => {
                    v.health.probe_ok = Some(false);
                    v.health.detail = Some(format!("probe {url} answered {code}, want {want}"));
                }
                Err(e) => {
                    v.health.probe_ok = Some(false);
                    v.health.detail = Some(e.to_string());
                }
            }
        }
    }

    /// Drop every claim of a set that is gone: its machines stay
    /// provisioned, unclaimed.
    async fn orphaned(&self, key: &ObjectKey) -> Result<Requeue, SetError> {
        for m in self.claimed(key).await? {
            let mut m = m;
            if let Some(l) = m.metadata.labels.as_mut() {
                l.remove(SET_LABEL);
                l.remove(REVISION_LABEL);
            }
            match self.store.update_obj(&m).await {
                Ok(m) => self.machines.put(m),
                Err(e) if e.is_conflict() || e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        metrics::forget(&key.to_string());
        Ok(Requeue::Forget)
    }

    async fn claimed(&self, key: &ObjectKey) -> Result<Vec<Machine>, SetError> {
        let sel = Selector::parse(&format!("{SET_LABEL}={}", key.name))?;
        let opts = ListOptions {
            namespace: Some(key.namespace.clone()),
            selector: sel,
        };
        Ok(self.store.list_obj(&opts).await?)
    }

    async fn run(&self, key: &ObjectKey) -> Result<Requeue, SetError> {
        let set: MachineSet = match self.store.get_obj(&key.namespace, &key.name).await {
            Ok(s) => s,
            Err(e) if e.is_not_found() => return self.orphaned(key).await,
            Err(e) => return Err(e.into()),
        };
        // The namespace's Machines from the cache, split here: the set's
        // claimed ones and its pool's candidates. Never from a cache that
        // has not listed yet: it would look like an empty pool.
        let pool = Selector::from_label_selector(&set.spec.selector)?;
        if tokio::time::timeout(SYNC_WAIT, self.machines.synced())
            .await
            .is_err()
        {
            tracing::debug!("machine cache not listed yet");
            return Ok(Requeue::After(SYNC_WAIT));
        }
        let all = self.machines.machines(&key.namespace);
        type Split = (Vec<Arc<Machine>>, Vec<Arc<Machine>>);
        let (claimed, unclaimed): Split = all
            .into_iter()
            .filter(|m| labels(m).get(SET_LABEL).is_none_or(|s| *s == key.name))
            .partition(|m| labels(m).contains_key(SET_LABEL));
        let candidates: Vec<MachineView> = unclaimed
            .iter()
            .filter(|m| pool.matches_labels(labels(m)))
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .map(|m| self.candidate(m, &set, &key.name))
            .collect();
        let mut views = Vec::with_capacity(claimed.len());
        for m in &claimed {
            let mut v = self.view(m, &key.name);
            self.health(&set, m, &mut v).await;
            views.push(v);
        }
        let class = match self
            .store
            .get_obj::<MachineClass>(&key.namespace, &set.spec.template.class_ref.name)
            .await
        {
            Ok(c) => Some(c.spec),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e.into()),
        };
        let now = Timestamp::now();
        let p = plan(&Input {
            set: &set,
            claimed: views,
            candidates,
            class: class.as_ref(),
            now,
        });
        tracing::debug!(actions = p.actions.len(), "plan");
        let in_flight = p.status.current_batch.is_some();
        // Record first: the batch and its members survive a crash.
        if set.status.as_ref() != Some(&p.status) {
            let mut s = set.clone();
            s.status = Some(p.status.clone());
            self.store.update_status_obj(&s).await?;
        }
        let old = set.status.clone().unwrap_or_default();
        metrics::record(&key.to_string(), &metrics::changes(&old, &p.status));
        // Claims, pins and releases touch one Machine each and never the
        // same one twice: taken together (bounded), the store commits a
        // batch's pins in a few group commits instead of one after another,
        // so the batch's last member starts as early as its first.
        let rev = |n: i64| p.status.revisions.iter().find(|r| r.revision == n);
        let mut writes: Vec<futures::future::BoxFuture<'_, Result<(), StoreError>>> = Vec::new();
        for a in &p.actions {
            match a {
                Action::Claim { machine, revision } => {
                    writes.push(Box::pin(self.claim(&set, machine, rev(*revision))));
                }
                Action::Pin { machine, revision } => {
                    writes.push(Box::pin(self.pin(&set, machine, rev(*revision))));
                }
                Action::Release { machine } => writes.push(Box::pin(self.release(&set, machine))),
                Action::Remediate {
                    machine,
                    action,
                    request,
                } => writes.push(Box::pin(self.remediate(&set, machine, *action, request))),
                Action::Event { .. } => {}
            }
        }
        let results: Vec<Result<(), StoreError>> = futures::stream::iter(writes)
            .buffer_unordered(MACHINE_WRITES)
            .collect()
            .await;
        let mut conflicts = false;
        for r in results {
            match r {
                Ok(()) => {}
                Err(e) if e.is_conflict() || e.is_not_found() => conflicts = true,
                Err(e) => return Err(e.into()),
            }
        }
        for a in &p.actions {
            if let Action::Event {
                warning,
                reason,
                message,
            } = a
            {
                self.event(&set, *warning, reason, message).await;
            }
        }
        Ok(if conflicts {
            Requeue::After(Duration::from_millis(200))
        } else if in_flight
            || !p.actions.is_empty()
            // A machine given up on waits for a person, not for the clock.
            || p.status.remediations.iter().any(|r| !r.exhausted)
        {
            Requeue::After(GATE_POLL)
        } else if set.spec.remediation.is_some() && probe_configured(&set) {
            // A failing probe changes no Machine: only looking finds it.
            Requeue::After(HEALTH_POLL)
        } else {
            Requeue::Periodic
        })
    }

    /// A Machine of the set's namespace, as stored now (not as cached).
    async fn member(&self, set: &MachineSet, name: &str) -> Result<Machine, StoreError> {
        let ns = set.metadata.namespace.as_deref().unwrap_or("default");
        self.store.get_obj(ns, name).await
    }

    /// Claim an unclaimed Available machine at the version we read it at.
    async fn claim(
        &self,
        set: &MachineSet,
        name: &str,
        rev: Option<&SetRevision>,
    ) -> Result<(), StoreError> {
        let Some(rev) = rev else { return Ok(()) };
        let mut m = self.member(set, name).await?;
        let phase = m.status.as_ref().and_then(|s| s.phase);
        // As read now, not as planned: claimed meanwhile, busy, or paused
        // by its owner since the plan was made.
        let adopting =
            phase == Some(MachinePhase::Ready) && adoptable(&m, &set.spec.template).is_ok();
        if labels(&m).contains_key(SET_LABEL)
            || !(phase == Some(MachinePhase::Available) || adopting)
            || m.is_paused()
        {
            return Ok(());
        }
        let set_name = set.metadata.name.clone().unwrap_or_default();
        m.metadata
            .labels
            .get_or_insert_default()
            .insert(SET_LABEL.into(), set_name);
        stamp(&mut m, set, rev);
        self.machines.put(self.store.update_obj(&m).await?);
        Ok(())
    }

    async fn pin(
        &self,
        set: &MachineSet,
        name: &str,
        rev: Option<&SetRevision>,
    ) -> Result<(), StoreError> {
        let Some(rev) = rev else { return Ok(()) };
        let mut m = self.member(set, name).await?;
        let set_name = set.metadata.name.clone().unwrap_or_default();
        if labels(&m).get(SET_LABEL) != Some(&set_name) {
            return Ok(());
        }
        let before = (m.metadata.labels.clone(), m.spec.clone());
        stamp(&mut m, set, rev);
        if (m.metadata.labels.clone(), m.spec.clone()) == before {
            // Pinned already (a plan from a cache that had not seen the
            // pin yet): nothing to write, but the cache may take it.
            self.machines.put(m);
            return Ok(());
        }
        self.machines.put(self.store.update_obj(&m).await?);
        Ok(())
    }

    /// Ask the Machine controller to act on a machine the set remediates:
    /// the request goes in the annotation of its action (a new value asks
    /// again), on a machine still claimed by this set.
    async fn remediate(
        &self,
        set: &MachineSet,
        name: &str,
        action: RemediationAction,
        request: &str,
    ) -> Result<(), StoreError> {
        let mut m = self.member(set, name).await?;
        let set_name = set.metadata.name.clone().unwrap_or_default();
        if labels(&m).get(SET_LABEL) != Some(&set_name) {
            return Ok(());
        }
        let key = match action {
            RemediationAction::PowerCycle => POWER_CYCLE_ANNOTATION,
            RemediationAction::Reimage => REIMAGE_ANNOTATION,
        };
        m.metadata
            .annotations
            .get_or_insert_default()
            .insert(key.to_string(), request.to_string());
        self.machines.put(self.store.update_obj(&m).await?);
        Ok(())
    }

    /// Give a machine back to the pool: the Machine controller drains,
    /// wipes when the class says so and powers it off (Available again).
    async fn release(&self, set: &MachineSet, name: &str) -> Result<(), StoreError> {
        let mut m = self.member(set, name).await?;
        let set_name = set.metadata.name.clone().unwrap_or_default();
        if labels(&m).get(SET_LABEL) != Some(&set_name) {
            return Ok(());
        }
        if let Some(l) = m.metadata.labels.as_mut() {
            l.remove(SET_LABEL);
            l.remove(REVISION_LABEL);
            for k in set.spec.template.labels.keys() {
                l.remove(k);
            }
        }
        m.spec.class_ref = None;
        m.spec.overrides = None;
        self.machines.put(self.store.update_obj(&m).await?);
        Ok(())
    }

    async fn event(&self, set: &MachineSet, warning: bool, reason: &str, message: &str) {
        let about = Regarding {
            kind: Kind::MachineSet,
            namespace: set
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: set.metadata.name.clone().unwrap_or_default(),
            uid: set.metadata.uid.clone(),
        };
        let t = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        if let Err(e) = record(self.store.as_ref(), &about, t, reason, message).await {
            tracing::warn!(error = %e, "cannot record event");
        }
    }
}

/// What a claim and a pin both write: the set's template labels, the
/// revision label, and the revision's class and overrides.
fn stamp(m: &mut Machine, set: &MachineSet, rev: &SetRevision) {
    let l = m.metadata.labels.get_or_insert_default();
    l.extend(set.spec.template.labels.clone());
    l.insert(REVISION_LABEL.into(), rev.revision.to_string());
    m.spec.class_ref = Some(LocalObjectReference {
        name: rev.class_name.clone(),
    });
    m.spec.overrides = rev.overrides.clone();
}

impl Reconciler for MachineSetReconciler {
    type Key = ObjectKey;
    type Error = SetError;

    fn name(&self) -> &'static str {
        "machineset"
    }

    async fn reconcile(&self, key: &ObjectKey) -> Result<Requeue, SetError> {
        let span = tracing::info_span!("machineset", machineset = %key);
        match self.run(key).instrument(span).await {
            Err(SetError::Store(e)) if e.is_conflict() => {
                Ok(Requeue::After(Duration::from_millis(200)))
            }
            other => other,
        }
    }
}

/// Whether a Ready machine outside any set runs what `template` installs,
/// so that a set may claim it without reinstalling it: its class is the
/// template's, with the same overrides, and it is up to date with it (the
/// Machine controller then finds that the set's pinned revision installs
/// what it runs). `Err` says why not, for `PoolShort`.
pub fn adoptable(
    m: &Machine,
    template: &crate::api::machine_set::MachineTemplate,
) -> Result<(), NotClaimable> {
    let want = &template.class_ref.name;
    let Some(class) = m.spec.class_ref.as_ref().map(|c| &c.name) else {
        return Err(NotClaimable::NoClass);
    };
    if class != want {
        return Err(NotClaimable::OtherClass {
            class: class.clone(),
            template: want.clone(),
        });
    }
    if m.spec.overrides != template.overrides {
        return Err(NotClaimable::OtherOverrides {
            class: class.clone(),
        });
    }
    let up_to_date = m
        .status
        .as_ref()
        .and_then(|s| crate::api::condition::find_condition(&s.conditions, "UpToDate"))
        .is_some_and(|c| c.status == ConditionStatus::True);
    if !up_to_date {
        return Err(NotClaimable::NotUpToDate {
            class: class.clone(),
        });
    }
    Ok(())
}
