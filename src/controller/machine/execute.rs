//! The executor: carries out a [`Plan`] for one Machine, step by step,
//! through the store, the BMC and the target cluster.
//!
//! The crash-safety rule lives here: status and metadata steps are applied
//! to a local copy and written (metadata with `update`, then status with
//! `update_status`) before the next effect that needs a record runs, so a
//! step marker (a minted boot, `powerCycledFor`) and the finalizer are
//! durable before the side effect they guard; steps that no such effect
//! separates share those two writes (in Kubernetes mode each write is an
//! API call). A write conflict stops the plan (the
//! next reconcile decides again from fresh state); a failed effect is
//! recorded in status (`lastError`, conditions) and stops the plan too.
//!
//! Owns no decisions: what to do comes from `decide`; this file only knows
//! how to do each step.

mod firmware;
mod media;

use std::time::Duration;

use jiff::Timestamp;

use super::plan::{BootPurpose, Plan, Step, StepKind, apply_status, cond};
use crate::api::ConditionStatus;
use crate::api::{BootMode, BootRecord, Condition, Machine, MachinePhase};
use crate::bmc::{Bmc, BmcError, FirmwareMode, PowerAction};
use crate::cluster::{ClusterError, DrainOptions, TargetCluster};
use crate::controller::feed::ObjectKey;
use crate::controller::storm::BootSlots;
use crate::store::events::{EventType, Regarding, record};
use crate::store::{Store, StoreError, TypedStore};

/// How a plan's execution ended.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// Every step ran; look again after this long (the plan's schedule).
    Done(Option<Duration>),
    /// Stopped early (write conflict, failed effect, no boot slot): look
    /// again after this long.
    Stopped(Duration),
    /// The object is gone (finalizer removed, or deleted meanwhile).
    Gone,
}

/// How soon to look again after a write conflict.
pub const CONFLICT_RETRY: Duration = Duration::from_millis(200);

/// A BMC error's reason for `lastError` and conditions, always starting
/// with `Bmc` (decide clears stale BMC errors by that prefix).
pub fn bmc_reason(e: &BmcError) -> String {
    let r = e.reason();
    if r.starts_with("Bmc") {
        r.to_string()
    } else {
        format!("Bmc{r}")
    }
}

/// What the executor works with, borrowed for one reconcile.
/// Gives a retired machine's DHCP lease back (the DHCP server's handle,
/// when metalherd answers DHCP).
pub trait AddressReleaser: Send + Sync {
    fn release(&self, mac: [u8; 6]);
}

impl AddressReleaser for crate::dhcp::server::LeaseReleaser {
    fn release(&self, mac: [u8; 6]) {
        if !crate::dhcp::server::LeaseReleaser::release(self, mac) {
            tracing::warn!("DHCP lease release queue full; the lease will expire instead");
        }
    }
}

pub use firmware::{FirmwareImages, IMAGE_UNAVAILABLE};
pub use media::MEDIA_UNAVAILABLE;

pub struct Executor<'a> {
    pub store: &'a dyn Store,
    /// Releases DHCP leases of retired machines, when DHCP runs here.
    pub releaser: Option<&'a dyn AddressReleaser>,
    pub key: &'a ObjectKey,
    pub bmc: Option<&'a dyn Bmc>,
    pub cluster: Option<&'a dyn TargetCluster>,
    pub slots: &'a BootSlots<ObjectKey>,
    pub drain: &'a DrainOptions,
    /// Serves firmware images to BMCs, when boot HTTP runs here.
    pub firmware: Option<&'a dyn FirmwareImages>,
    /// Wait after a failed BMC action.
    pub bmc_retry: Duration,
    /// Wait after a failed cluster action, or for a boot slot.
    pub poll: Duration,
    pub now: Timestamp,
}

/// The machine being worked on, with its unwritten status changes.
struct Work {
    m: Machine,
    /// Status changed locally since the last write.
    dirty: bool,
    /// Metadata or spec changed locally since the last write.
    meta_dirty: bool,
    /// A boot was to be minted but the slot went to someone else.
    slot_denied: bool,
    /// Phase as last written (for transition events).
    written_phase: Option<MachinePhase>,
    /// Phases set since the last write and left again before it (named
    /// in the transition event).
    passed: Vec<MachinePhase>,
    /// Steps noted in the boot history since the last write: each becomes
    /// an event once written.
    notes: Vec<(crate::api::BootStep, String)>,
    /// Warning events to tell after the write (reason, message).
    warnings: Vec<(String, String)>,
}

/// How many plans may follow the first in one reconcile (see
/// [`Executor::run`]); a bound, so a plan that keeps asking again cannot
/// hold the reconcile.
pub const MERGED_PLANS: usize = 8;

enum Stop {
    Conflict,
    Gone,
    Store(StoreError),
    After(Duration),
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        if e.is_conflict() {
            Stop::Conflict
        } else if e.is_not_found() {
            Stop::Gone
        } else {
            Stop::Store(e)
        }
    }
}

impl Executor<'_> {
    /// Run `plan` on `machine` (as read from the store at the start of
    /// this reconcile). Store errors other than conflicts and not-found are
    /// returned for the runner to back off on.
    ///
    /// A plan that asks to be looked at again right away, and took no step
    /// that changes what was observed (a power action, a Node operation),
    /// is followed at once by `again`'s plan for the machine as it is now,
    /// up to [`MERGED_PLANS`] times, so status steps that no side effect
    /// separates go out in one write: the write before the next effect.
    pub async fn run(
        &self,
        machine: Machine,
        first: Plan,
        again: impl Fn(&Machine) -> Plan,
    ) -> Result<Outcome, StoreError> {
        let phase = machine.status.as_ref().and_then(|s| s.phase);
        let mut w = Work {
            m: machine,
            dirty: false,
            meta_dirty: false,
            slot_denied: false,
            written_phase: phase,
            passed: Vec::new(),
            notes: Vec::new(),
            warnings: Vec::new(),
        };
        let mut plan = first;
        let mut result = Ok(Outcome::Done(plan.requeue_after()));
        for merged in 0..=MERGED_PLANS {
            if merged > 0 {
                plan = again(&w.m);
                result = Ok(Outcome::Done(plan.requeue_after()));
            }
            for step in &plan.steps {
                if let Err(stop) = self.step(&mut w, step).await {
                    result = self.stopped(stop);
                    break;
                }
            }
            if !matches!(result, Ok(Outcome::Done(_))) || !plan.continues_at_once() {
                break;
            }
        }
        // A plan stopped for want of a boot slot keeps what earlier merged
        // plans decided (the phase it reached, its Waiting condition).
        if (matches!(result, Ok(Outcome::Done(_))) || w.slot_denied)
            && let Err(stop) = self.flush(&mut w).await
        {
            result = self.stopped(stop);
        }
        let wants_slot = w.slot_denied || plan.waits_for_boot_slot();
        self.settle_slot(&w.m, &result, wants_slot);
        result
    }

    fn stopped(&self, stop: Stop) -> Result<Outcome, StoreError> {
        match stop {
            Stop::Conflict => Ok(Outcome::Stopped(CONFLICT_RETRY)),
            Stop::Gone => Ok(Outcome::Gone),
            Stop::After(d) => Ok(Outcome::Stopped(d)),
            Stop::Store(e) => Err(e),
        }
    }

    /// Hold a boot-storm slot exactly while the machine has an open boot;
    /// keep its place among the waiters while it wants one; otherwise leave
    /// both (which passes a freed slot or a reservation on to the next
    /// waiter).
    fn settle_slot(&self, m: &Machine, result: &Result<Outcome, StoreError>, wants_slot: bool) {
        if matches!(result, Ok(Outcome::Gone)) {
            self.slots.release(self.key);
            return;
        }
        let holds = m.status.as_ref().is_some_and(super::plan::holds_boot_slot);
        if holds {
            self.slots.restore(self.key.clone());
        } else if wants_slot {
            self.slots.wait(self.key);
        } else {
            self.slots.release(self.key);
        }
    }

    async fn step(&self, w: &mut Work, step: &Step) -> Result<(), Stop> {
        match step.kind() {
            StepKind::Status => {
                self.status_step(w, step)?;
                Ok(())
            }
            StepKind::Metadata => self.metadata_step(w, step).await,
            StepKind::Effect => {
                if step.needs_record_before() {
                    self.flush(w).await?;
                }
                self.effect(w, step).await
            }
            StepKind::Schedule => Ok(()),
        }
    }

    fn status_step(&self, w: &mut Work, step: &Step) -> Result<(), Stop> {
        let st = w.m.status.get_or_insert_with(Default::default);
        if let Step::MintBoot { purpose, revision } = step {
            // The slot is taken before the boot exists; a race lost to
            // another machine leaves this one waiting.
            if !self.slots.acquire(self.key) {
                w.slot_denied = true;
                return Err(Stop::After(self.poll));
            }
            st.boot = Some(mint(*purpose, revision.clone(), self.now));
        } else {
            if let Step::Note { step, detail } = step {
                w.notes.push((step.clone(), detail.clone()));
            }
            if let Step::Warn { reason, message } = step {
                w.warnings.push((reason.clone(), message.clone()));
            }
            if let (Step::SetPhase(_), Some(p)) = (step, st.phase)
                && Some(p) != w.written_phase
            {
                w.passed.push(p);
            }
            apply_status(st, step, self.now);
        }
        w.dirty = true;
        Ok(())
    }

    /// Write pending metadata, then pending status changes, and record a
    /// phase transition event.
    async fn flush(&self, w: &mut Work) -> Result<(), Stop> {
        if w.meta_dirty {
            // The written object carries the stored status; the unwritten
            // one goes on it (the write would have conflicted had the
            // status changed meanwhile).
            let status = w.m.status.take();
            w.m = self.store.update_obj(&w.m).await?;
            w.meta_dirty = false;
            if w.dirty {
                w.m.status = status;
            }
        }
        if !w.dirty {
            return Ok(());
        }
        let written = self.store.update_status_obj(&w.m).await?;
        w.m = written;
        w.dirty = false;
        let phase = w.m.status.as_ref().and_then(|s| s.phase);
        let passed = std::mem::take(&mut w.passed);
        if phase != w.written_phase {
            self.phase_event(&w.m, w.written_phase, &passed, phase)
                .await;
            w.written_phase = phase;
        }
        for (step, detail) in std::mem::take(&mut w.notes) {
            self.event(&w.m, EventType::Normal, step.as_str(), &detail)
                .await;
        }
        for (reason, message) in std::mem::take(&mut w.warnings) {
            self.event(&w.m, EventType::Warning, &reason, &message)
                .await;
        }
        Ok(())
    }

    /// One event per written phase change, naming the phases passed
    /// through since the last write (`Registering → Available →
    /// Provisioning`).
    async fn phase_event(
        &self,
        m: &Machine,
        from: Option<MachinePhase>,
        passed: &[MachinePhase],
        to: Option<MachinePhase>,
    ) {
        let Some(to) = to else { return };
        let mut path = from.map_or("(new)", MachinePhase::as_str).to_string();
        for p in passed.iter().filter(|p| Some(**p) != from && **p != to) {
            path = format!("{path} → {}", p.as_str());
        }
        let (type_, message) = match (to, m.status.as_ref().and_then(|s| s.last_error.as_ref())) {
            (MachinePhase::Error, Some(e)) => (
                EventType::Warning,
                format!("{path} → {}: {}: {}", to.as_str(), e.reason, e.message),
            ),
            _ => (EventType::Normal, format!("{path} → {}", to.as_str())),
        };
        self.event(m, type_, to.as_str(), &message).await;
    }

    pub async fn event(&self, m: &Machine, type_: EventType, reason: &str, message: &str) {
        let about = regarding(self.key, m);
        if let Err(e) = record(self.store, &about, type_, reason, message).await {
            tracing::debug!(error = %e, "cannot record event");
        }
    }

    /// Apply a metadata step to the local copy (written by the next
    /// [`Self::flush`]); removing the finalizer is written at once, after
    /// everything pending.
    async fn metadata_step(&self, w: &mut Work, step: &Step) -> Result<(), Stop> {
        if let Step::RemoveFinalizer = step {
            self.flush(w).await?;
        }
        let m = &mut w.m;
        match step {
            Step::AddFinalizer => {
                let f = m.metadata.finalizers.get_or_insert_with(Vec::new);
                if !f.iter().any(|x| x == super::plan::FINALIZER) {
                    f.push(super::plan::FINALIZER.to_string());
                }
            }
            Step::RemoveFinalizer => {
                if let Some(f) = m.metadata.finalizers.as_mut() {
                    f.retain(|x| x != super::plan::FINALIZER);
                }
                let gone = m.metadata.deletion_timestamp.is_some()
                    && m.metadata.finalizers.as_ref().is_none_or(Vec::is_empty);
                *m = self.store.update_obj(m).await?;
                if gone {
                    return Err(Stop::Gone);
                }
                return Ok(());
            }
            Step::SetBootMac(mac) => {
                m.spec.boot_mac_address = Some(mac.clone());
                self.event(&w.m, EventType::Normal, "BootMacLearned", mac)
                    .await;
                w.meta_dirty = true;
                return Ok(());
            }
            Step::SetHardwareLabels { labels, applied } => {
                let l = m.metadata.labels.get_or_insert_with(Default::default);
                for (k, v) in labels {
                    match v {
                        Some(v) => l.insert(k.clone(), v.clone()),
                        None => l.remove(k),
                    };
                }
                m.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(super::hw_labels::APPLIED_ANNOTATION.into(), applied.clone());
            }
            _ => return Ok(()),
        }
        w.meta_dirty = true;
        Ok(())
    }

    async fn effect(&self, w: &mut Work, step: &Step) -> Result<(), Stop> {
        match step {
            Step::ReadInventory
            | Step::ReadBios
            | Step::WriteBios(_)
            | Step::ReadFirmware
            | Step::ReadVolumes
            | Step::CreateVolume(_)
            | Step::SetBootOnce(_)
            | Step::PowerOn
            | Step::PowerCycle
            | Step::PowerOff => match self.bmc_effect(w, step).await {
                Ok(()) => Ok(()),
                Err(e) => self.bmc_failed(w, step, &e).await,
            },
            Step::UpdateFirmware(f) => self.update_firmware(w, f).await,
            Step::InsertMedia => self.insert_media(w).await,
            Step::EjectMedia => self.eject_media(w).await,
            Step::CordonNode(_)
            | Step::DrainNode(_)
            | Step::DeleteNode(_)
            | Step::UncordonNode(_) => match self.cluster_effect(step).await {
                Ok(()) => Ok(()),
                Err(e) => self.cluster_failed(w, step, &e).await,
            },
            // The reservation goes with the Machine; the lease the DHCP
            // server holds for its MAC is given back now rather than left
            // to expire. Without DHCP here there is nothing to release.
            Step::ReleaseAddress => {
                let mac =
                    w.m.spec
                        .boot_mac_address
                        .as_deref()
                        .and_then(|s| s.parse::<crate::api::MacAddr>().ok())
                        .map(crate::api::MacAddr::octets);
                if let (Some(r), Some(mac)) = (self.releaser, mac) {
                    r.release(mac);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    async fn bmc_effect(&self, w: &mut Work, step: &Step) -> Result<(), BmcError> {
        let Some(bmc) = self.bmc else {
            return Err(BmcError::Config("no BMC connection".into()));
        };
        match step {
            Step::ReadInventory => {
                let inv = bmc.inventory().await?;
                let quirks = bmc.applied_quirks().await?;
                let st = w.m.status.get_or_insert_with(Default::default);
                st.inventory = Some(inv);
                st.bmc_quirks = quirks;
                w.dirty = true;
            }
            Step::SetBootOnce(dev) => {
                let mode = match w.m.spec.boot_mode.unwrap_or_default() {
                    BootMode::Uefi => FirmwareMode::Uefi,
                    BootMode::Legacy => FirmwareMode::Legacy,
                };
                let r = bmc.set_boot_once(*dev, mode).await;
                // The driver matched its quirk entries again for this call:
                // keep `bmcQuirks` true when the config changed since the
                // inventory was read (written with the step's record).
                if let Ok(quirks) = bmc.applied_quirks().await {
                    let st = w.m.status.get_or_insert_with(Default::default);
                    if st.bmc_quirks != quirks {
                        st.bmc_quirks = quirks;
                        w.dirty = true;
                    }
                }
                r?;
            }
            Step::ReadBios => {
                let attributes = bmc.bios().await?;
                let st = w.m.status.get_or_insert_with(Default::default);
                st.bios = Some(crate::api::BiosStatus {
                    attributes,
                    read_at: self.now,
                });
                w.dirty = true;
            }
            Step::WriteBios(a) => bmc.set_bios(a).await?,
            Step::ReadFirmware => self.read_firmware(w, bmc).await?,
            Step::ReadVolumes => self.read_volumes(w, bmc).await?,
            Step::CreateVolume(v) => {
                bmc.create_volume(v).await?;
                let message = format!(
                    "volume {} created ({}, {} drives)",
                    v.name, v.raid_type, v.drives.count
                );
                self.event(&w.m, EventType::Normal, "VolumeCreated", &message)
                    .await;
            }
            Step::PowerOn => bmc.power(PowerAction::On).await?,
            Step::PowerCycle => bmc.power(PowerAction::Cycle).await?,
            Step::PowerOff => bmc.power(PowerAction::ForceOff).await?,
            _ => {}
        }
        Ok(())
    }

    async fn bmc_failed(&self, w: &mut Work, step: &Step, e: &BmcError) -> Result<(), Stop> {
        let reason = bmc_reason(e);
        let message = format!("{step}: {e}");
        tracing::warn!(%step, error = %e, "BMC action failed");
        self.event(&w.m, EventType::Warning, &reason, &message)
            .await;
        // A refused boot override came from a BMC that answered: it is
        // reachable, and the last error tells what it refused.
        if !matches!(e, BmcError::BootOverrideIgnored { .. }) {
            let cond = condition(
                &w.m,
                cond::BMC_REACHABLE,
                ConditionStatus::False,
                &reason,
                &message,
                self.now,
            );
            self.status_step(w, &Step::SetCondition(cond))?;
        }
        self.status_step(w, &Step::RecordError { reason, message })?;
        self.flush(w).await?;
        Err(Stop::After(self.bmc_retry))
    }

    async fn cluster_effect(&self, step: &Step) -> Result<(), ClusterError> {
        let Some(c) = self.cluster else {
            // Without a target cluster decide plans no Node steps; a stale
            // one is harmless to skip.
            return Ok(());
        };
        match step {
            Step::CordonNode(n) => c.cordon(n).await,
            Step::UncordonNode(n) => c.uncordon(n).await,
            Step::DrainNode(n) => c.drain(n, self.drain).await.map(|_| ()),
            Step::DeleteNode(n) => c.delete_node(n).await,
            _ => Ok(()),
        }
    }

    async fn cluster_failed(
        &self,
        w: &mut Work,
        step: &Step,
        e: &ClusterError,
    ) -> Result<(), Stop> {
        let reason = e.reason().to_string();
        let message = format!("{step}: {e}");
        tracing::warn!(%step, error = %e, "cluster action failed");
        self.event(&w.m, EventType::Warning, &reason, &message)
            .await;
        self.status_step(w, &Step::RecordError { reason, message })?;
        self.flush(w).await?;
        Err(Stop::After(self.poll))
    }
}

/// A new boot record (its token is derived from the id by the boot path).
pub fn mint(purpose: BootPurpose, revision: Option<String>, now: Timestamp) -> BootRecord {
    BootRecord {
        id: uuid::Uuid::new_v4().to_string(),
        purpose,
        revision,
        minted_at: now,
        ..BootRecord::default()
    }
}

fn condition(
    m: &Machine,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status,
        observed_generation: m.metadata.generation,
        last_transition_time: now,
        reason: reason.to_string(),
        message: message.to_string(),
    }
}

pub fn regarding(key: &ObjectKey, m: &Machine) -> Regarding {
    Regarding {
        kind: crate::api::Kind::Machine,
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        uid: m.metadata.uid.clone(),
    }
}
