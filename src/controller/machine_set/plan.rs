//! The MachineSet's decisions as a pure function: from the set, its claimed
//! machines, the unclaimed candidates of its pool, the live class, what
//! was observed of each machine's health, and `now`, to the status to
//! record and the [`Action`]s to take after it.
//!
//! Pure: no store, cluster or HTTP calls, no clocks here.
//!
//! Rules, in the order `plan` applies them:
//! - **Revisions.** The template with the live class's spec is a snapshot;
//!   an equal kept snapshot is reused, otherwise it becomes revision
//!   `max + 1`. A `rollout undo` names a kept revision in
//!   [`UNDO_ANNOTATION`]; while the template still equals that revision's,
//!   it is the update revision even though the live class has moved on.
//!   History keeps `revisionHistoryLimit` revisions plus any still pinned.
//! - **Claims.** Short of `replicas`, claim candidates (by name), pinned to
//!   the update revision (or the last good one when the update is bad).
//!   A candidate is claimable when it is unclaimed, not paused
//!   (`metalherd.dev/paused`: its owner said hands off, and a set must not
//!   start a boot the Machine controller would refuse to run), and
//!   Available, or Ready running what the template installs (adopted
//!   without a reinstall). Too few: condition `PoolShort`, `wanted N,
//!   claimable M` (M counts the set's machines plus the claimable
//!   candidates), then why each other candidate is not claimable.
//! - **Release.** Over `replicas`, release not Ready machines first, then
//!   the newest (by creation time).
//! - **Batches.** One batch at a time. A batch is recorded in status before
//!   any of its machines is re-pinned, so a restart re-pins the same
//!   machines (idempotent) rather than choosing again. Batch members are the
//!   old-revision machines, not Ready first, then by name, while the set's
//!   machines out of service stay within `maxUnavailable`.
//! - **Gate.** A member passes when it runs the batch's revision, is Ready,
//!   and has been healthy (Node Ready when a cluster is configured, probe
//!   answering when one is set) for `nodeReadySeconds`.
//! - **Failure.** A member in `Error`, or a batch not through its gate
//!   within `progressDeadlineSeconds`, fails the rollout: the revision is
//!   marked bad (not retried until the template changes). With
//!   `autoRollback` the failed batch's machines are re-pinned to the last
//!   good revision in a rollback batch; when it passes the set is
//!   `RolledBack`.
//! - **Pause.** No new batch starts; the one in flight finishes its gate.
//!   A paused Machine (`metalherd.dev/paused`) of the set is left out of
//!   batches; the rollout waits for it (`WaitingForPausedMachines`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use crate::api::ConditionStatus;
use crate::api::condition::set_condition;
use crate::api::machine_set::{
    BATCH_HISTORY, Batch, BatchMachine, DEFAULT_REVISION_HISTORY, MachineSet, MachineSetStatus,
    RolloutFailure, RolloutState, SetRevision,
};
use crate::api::validate::{MaxUnavailable, parse_max_unavailable};
use crate::api::{Condition, MachineClassSpec, MachinePhase};
use crate::store::Selector;

pub use super::revision::snapshot_hash;
use super::revision::{Target, target};
pub use crate::api::machine_set::UNDO_ANNOTATION;
pub use claim::NotClaimable;
/// At most this many machines are named in `PoolShort`'s message.
const MAX_REASONS: usize = 10;

/// A batch has this long to pass its gate when the set says nothing.
pub const DEFAULT_PROGRESS_DEADLINE: Duration = Duration::from_secs(600);

/// Condition types a MachineSet carries.
pub mod cond {
    /// False with `wanted N, claimable M` when the pool is short.
    pub const POOL: &str = "PoolSufficient";
    /// The rollout: Progressing / Complete / Failed / RolledBack.
    pub const PROGRESSING: &str = "Progressing";
    /// The template's class exists.
    pub const CLASS: &str = "ClassFound";
    /// False while more machines are unhealthy than `maxUnhealthy` allows.
    pub const REMEDIATION: &str = "RemediationAllowed";
}

/// What was observed of one machine (claimed or candidate).
#[derive(Clone, Debug, PartialEq)]
pub struct MachineView {
    pub name: String,
    pub created: Option<Timestamp>,
    pub phase: MachinePhase,
    /// Revision number it is pinned to (claimed machines).
    pub pinned: Option<i64>,
    /// The hash of what it installed last (`status.provisionedRevision`).
    pub installed: Option<String>,
    /// It carries `metalherd.dev/paused`: never claimed while it does.
    pub paused: bool,
    pub health: Health,
    /// A Ready candidate that runs what the template installs (its own
    /// class is the template's, same overrides, up to date): claimed
    /// without a reinstall. `Err` says why a Ready one is not.
    pub adoptable: Result<(), NotClaimable>,
}

impl MachineView {
    /// Whether a set may claim it now, or why not.
    fn claimable(&self) -> Result<(), NotClaimable> {
        if self.paused {
            return Err(NotClaimable::Paused);
        }
        match self.phase {
            MachinePhase::Available => Ok(()),
            MachinePhase::Ready => self.adoptable.clone(),
            other => Err(NotClaimable::Phase(other)),
        }
    }
}

/// Health signals beyond the phase.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Health {
    /// `None`: no cluster configured; `Some(false)`: Node not Ready.
    pub node_ready: Option<bool>,
    /// The Machine's `NodeReady` is `Unknown` or absent (the cluster could
    /// not be asked): not Ready for the gate, no signal for remediation.
    pub node_unknown: bool,
    /// `None`: no probe configured; otherwise whether it answered as expected.
    pub probe_ok: Option<bool>,
    /// Why it is not healthy, for events and `describe`.
    pub detail: Option<String>,
}

/// Everything `plan` looks at.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    pub set: &'a MachineSet,
    /// Machines that carry this set's claim.
    pub claimed: Vec<MachineView>,
    /// Unclaimed machines matching the selector (only the Available, not
    /// paused ones are claimed).
    pub candidates: Vec<MachineView>,
    /// The template's class as it is now (`None`: it does not exist).
    pub class: Option<&'a MachineClassSpec>,
    pub now: Timestamp,
}

/// A side effect, taken after the status is recorded.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Claim (optimistically: the machine must be unclaimed at its read
    /// version) and pin to `revision`.
    Claim { machine: String, revision: i64 },
    /// Move the pin (the Machine controller reimages it).
    Pin { machine: String, revision: i64 },
    /// Drop the claim and the class: deprovisioned back to Available.
    Release { machine: String },
    /// Ask the Machine controller to power-cycle or reimage `machine`
    /// (`request` is the annotation's value: who asks, which attempt, why).
    Remediate {
        machine: String,
        action: crate::api::RemediationAction,
        request: String,
    },
    Event {
        warning: bool,
        reason: String,
        message: String,
    },
}

/// The status to record, then the actions.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub status: MachineSetStatus,
    pub actions: Vec<Action>,
}

/// `maxUnavailable` resolved against `replicas` (default 1).
pub fn max_unavailable(set: &MachineSet) -> usize {
    let m = set
        .spec
        .update_strategy
        .as_ref()
        .and_then(|u| u.max_unavailable.as_ref())
        .and_then(|v| parse_max_unavailable(v).ok())
        .unwrap_or(MaxUnavailable::Count(1));
    usize::try_from(m.resolve(set.spec.replicas)).unwrap_or(1)
}

fn strategy_secs(
    set: &MachineSet,
    f: impl Fn(&crate::api::UpdateStrategy) -> Option<i64>,
) -> Option<u64> {
    set.spec
        .update_strategy
        .as_ref()
        .and_then(f)
        .and_then(|s| u64::try_from(s).ok())
}

fn gate_hold(set: &MachineSet) -> Duration {
    Duration::from_secs(
        strategy_secs(set, |u| {
            u.health_check.as_ref().and_then(|h| h.node_ready_seconds)
        })
        .unwrap_or(0),
    )
}

fn deadline(set: &MachineSet) -> Duration {
    strategy_secs(set, |u| u.progress_deadline_seconds)
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_PROGRESS_DEADLINE)
}

fn auto_rollback(set: &MachineSet) -> bool {
    set.spec
        .update_strategy
        .as_ref()
        .is_some_and(|u| u.auto_rollback)
}

fn since(a: Timestamp, b: Timestamp) -> Duration {
    let s = b.as_second().saturating_sub(a.as_second());
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

struct Planner<'a> {
    i: &'a Input<'a>,
    st: MachineSetStatus,
    actions: Vec<Action>,
    generation: Option<i64>,
}

/// Decide the next status and actions of a set.
pub fn plan(i: &Input<'_>) -> Plan {
    let mut p = Planner {
        i,
        st: i.set.status.clone().unwrap_or_default(),
        actions: Vec::new(),
        generation: i.set.metadata.generation,
    };
    p.st.observed_generation = p.generation;
    // For the scale subresource (`labelSelectorPath: .status.selector`).
    p.st.selector = Selector::from_label_selector(&i.set.spec.selector)
        .ok()
        .map(|s| s.to_string());
    let update = p.revisions();
    p.scale(update);
    if let Some(update) = update {
        p.rollout(update);
    }
    p.remediate();
    p.prune();
    p.counts();
    Plan {
        status: p.st,
        actions: p.actions,
    }
}

impl Planner<'_> {
    fn condition(&mut self, type_: &str, ok: bool, reason: &str, message: String) {
        set_condition(
            &mut self.st.conditions,
            Condition {
                type_: type_.into(),
                status: ConditionStatus::of(ok),
                observed_generation: self.generation,
                last_transition_time: self.i.now,
                reason: reason.into(),
                message,
            },
        );
    }

    fn event(&mut self, warning: bool, reason: &str, message: String) {
        self.actions.push(Action::Event {
            warning,
            reason: reason.into(),
            message,
        });
    }

    fn rev(&self, n: i64) -> Option<&SetRevision> {
        self.st.revisions.iter().find(|r| r.revision == n)
    }

    /// Find or make the update revision; `None` when there is nothing to
    /// install (class missing and no revision kept).
    fn revisions(&mut self) -> Option<i64> {
        let template = &self.i.set.spec.template;
        let update = match target(self.i.set, self.i.class) {
            Target::Kept(n) => Some(n),
            Target::Snapshot(hash) => {
                let name = &template.class_ref.name;
                self.condition(cond::CLASS, true, "Found", format!("class {name}"));
                match (
                    self.st.revisions.iter().find(|r| r.hash == hash),
                    self.i.class,
                ) {
                    (Some(r), _) => Some(r.revision),
                    (None, Some(spec)) => {
                        let n = self
                            .st
                            .revisions
                            .iter()
                            .map(|r| r.revision)
                            .max()
                            .unwrap_or(0)
                            + 1;
                        self.st.revisions.push(SetRevision {
                            revision: n,
                            hash,
                            class_name: name.clone(),
                            class_spec: spec.clone(),
                            overrides: template.overrides.clone(),
                            created_at: self.i.now,
                            passed: false,
                            bad: false,
                        });
                        Some(n)
                    }
                    // A snapshot is only made of a class that exists.
                    (None, None) => self.st.update_revision,
                }
            }
            Target::ClassMissing => {
                let name = template.class_ref.name.clone();
                self.condition(
                    cond::CLASS,
                    false,
                    "ClassMissing",
                    format!("MachineClass {name} does not exist"),
                );
                self.st.update_revision
            }
        };
        if update != self.st.update_revision {
            // A new target: a new rollout. A batch in flight for another
            // revision is superseded below (its machines are re-pinned).
            self.st.completed_batches.clear();
            if let Some(n) = update {
                let bad = self.rev(n).is_some_and(|r| r.bad);
                if !bad {
                    self.st.rollout_state = Some(RolloutState::Progressing);
                }
                self.event(false, "NewRevision", format!("rolling out revision {n}"));
            }
        }
        self.st.update_revision = update;
        update
    }

    /// The revision new claims get: the update one unless it is bad.
    fn claim_revision(&self, update: Option<i64>) -> Option<i64> {
        match update {
            Some(n) if !self.rev(n).is_some_and(|r| r.bad) => Some(n),
            _ => self.st.current_revision.or(update),
        }
    }

    fn scale(&mut self, update: Option<i64>) {
        let want = usize::try_from(self.i.set.spec.replicas).unwrap_or(0);
        let have = self.i.claimed.len();
        if have < want {
            let (mut cands, refused): (Vec<&MachineView>, Vec<&MachineView>) = self
                .i
                .candidates
                .iter()
                .filter(|c| c.pinned.is_none())
                .partition(|c| c.claimable().is_ok());
            cands.sort_by(|a, b| a.name.cmp(&b.name));
            let claimable = have + cands.len();
            if let Some(rev) = self.claim_revision(update) {
                for c in cands.into_iter().take(want - have) {
                    self.actions.push(Action::Claim {
                        machine: c.name.clone(),
                        revision: rev,
                    });
                }
            }
            if claimable < want {
                // Say, per machine, why the pool's others cannot be claimed.
                let mut why: Vec<String> = refused
                    .iter()
                    .filter_map(|c| c.claimable().err().map(|e| format!("{}: {e}", c.name)))
                    .collect();
                why.sort();
                let mut msg = format!("wanted {want}, claimable {claimable}");
                if !why.is_empty() {
                    let more = why.len().saturating_sub(MAX_REASONS);
                    why.truncate(MAX_REASONS);
                    msg.push_str("; not claimable: ");
                    msg.push_str(&why.join("; "));
                    if more > 0 {
                        msg.push_str(&format!("; and {more} more"));
                    }
                }
                self.condition(cond::POOL, false, "PoolShort", msg);
                return;
            }
        } else if have > want {
            let mut order: Vec<&MachineView> = self.i.claimed.iter().collect();
            // Not Ready first, then newest.
            order.sort_by(|a, b| {
                let ra = a.phase == MachinePhase::Ready;
                let rb = b.phase == MachinePhase::Ready;
                ra.cmp(&rb)
                    .then(b.created.cmp(&a.created))
                    .then(b.name.cmp(&a.name))
            });
            for m in order.into_iter().take(have - want) {
                self.actions.push(Action::Release {
                    machine: m.name.clone(),
                });
            }
        }
        self.condition(
            cond::POOL,
            true,
            "PoolSufficient",
            format!("wanted {want}, claimed {have}"),
        );
    }

    /// The machines that stay in the set (not released this round).
    fn staying(&self) -> Vec<&MachineView> {
        let released: BTreeSet<&str> = self
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Release { machine } => Some(machine.as_str()),
                _ => None,
            })
            .collect();
        self.i
            .claimed
            .iter()
            .filter(|m| !released.contains(m.name.as_str()))
            .collect()
    }

    fn installed(&self, m: &MachineView, rev: i64) -> bool {
        let hash = self.rev(rev).map(|r| r.hash.as_str());
        m.pinned == Some(rev) && m.installed.as_deref() == hash && hash.is_some()
    }

    fn healthy(&self, m: &MachineView, rev: i64) -> bool {
        self.installed(m, rev)
            && m.phase == MachinePhase::Ready
            && m.health.node_ready != Some(false)
            && m.health.probe_ok != Some(false)
    }

    fn rollout(&mut self, update: i64) {
        let machines: BTreeMap<String, MachineView> = self
            .staying()
            .into_iter()
            .map(|m| (m.name.clone(), m.clone()))
            .collect();
        if let Some(mut b) = self.st.current_batch.take() {
            // Machines deleted (or released) mid-rollout leave the batch.
            b.machines.retain(|bm| machines.contains_key(&bm.name));
            let superseded = !b.rollback && b.revision != update;
            if superseded {
                self.event(
                    false,
                    "BatchSuperseded",
                    format!(
                        "batch {} of revision {} superseded by revision {update}",
                        b.number, b.revision
                    ),
                );
                // Its machines are out of service already: they lead the
                // next batch (not Ready first).
            } else if !self.gate(&mut b, &machines) {
                return;
            }
        }
        let bad = self.rev(update).is_some_and(|r| r.bad);
        if bad {
            return;
        }
        // Pins the machines of an earlier, finished batch did not get yet
        // (a crash between recording and pinning) are redone by `gate`.
        let remediating = self.under_remediation();
        let (held, old): (Vec<&MachineView>, Vec<&MachineView>) = machines
            .values()
            .filter(|m| m.pinned != Some(update))
            .partition(|m| m.paused || remediating.contains(&m.name));
        if old.is_empty() && !held.is_empty() {
            // Paused machines are not moved, nor machines a remediation
            // acts on: the rollout waits for them.
            let (paused, fixing): (Vec<&MachineView>, Vec<&MachineView>) =
                held.iter().partition(|m| m.paused);
            let names = |v: &[&MachineView]| {
                v.iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            self.st.rollout_state = Some(RolloutState::Progressing);
            let (reason, msg) = if paused.is_empty() {
                (
                    "WaitingForRemediation",
                    format!(
                        "{} being remediated: rolled once it is done",
                        names(&fixing)
                    ),
                )
            } else {
                (
                    "WaitingForPausedMachines",
                    format!(
                        "{} paused (metalherd.dev/paused): rolled once resumed",
                        names(&paused)
                    ),
                )
            };
            self.condition(cond::PROGRESSING, true, reason, msg);
            return;
        }
        if old.is_empty() {
            self.settle(update, &machines);
            return;
        }
        if self.i.set.spec.paused {
            self.st.rollout_state = Some(RolloutState::Paused);
            self.condition(cond::PROGRESSING, false, "Paused", "rollout paused".into());
            return;
        }
        self.st.rollout_state = Some(RolloutState::Progressing);
        let max = max_unavailable(self.i.set);
        let mut old = old;
        old.sort_by(|a, b| {
            let ra = a.phase == MachinePhase::Ready;
            let rb = b.phase == MachinePhase::Ready;
            ra.cmp(&rb).then(a.name.cmp(&b.name))
        });
        let others_out = machines
            .values()
            .filter(|m| m.pinned == Some(update) && !self.healthy(m, update))
            .count();
        let mut members = Vec::new();
        for m in old {
            let already_out = m.phase != MachinePhase::Ready;
            if already_out || members.len() + others_out < max {
                members.push(m.name.clone());
            }
            if members.len() >= max {
                break;
            }
        }
        if members.is_empty() {
            self.condition(
                cond::PROGRESSING,
                true,
                "WaitingForCapacity",
                format!("{others_out} machines out of service (maxUnavailable {max})"),
            );
            return;
        }
        let number = self.st.completed_batches.last().map_or(0, |b| b.number) + 1;
        self.start_batch(number, update, members, false);
    }

    fn start_batch(&mut self, number: i32, rev: i64, members: Vec<String>, rollback: bool) {
        let what = if rollback { "rollback batch" } else { "batch" };
        let msg = format!("{what} {number} to revision {rev}: {}", members.join(", "));
        self.condition(cond::PROGRESSING, true, "BatchStarted", msg.clone());
        self.event(false, "BatchStarted", msg);
        for m in &members {
            self.actions.push(Action::Pin {
                machine: m.clone(),
                revision: rev,
            });
        }
        self.st.current_batch = Some(Batch {
            number,
            revision: rev,
            machines: members
                .into_iter()
                .map(|name| BatchMachine {
                    name,
                    healthy_since: None,
                    passed: false,
                })
                .collect(),
            started_at: self.i.now,
            rollback,
            finished_at: None,
        });
    }
}

mod batch;
mod claim;
mod remediate;
mod settle;

#[cfg(test)]
pub(crate) mod tests;
