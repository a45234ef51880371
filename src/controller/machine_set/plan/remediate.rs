//! Remediation under `spec.remediation`: which claimed machines are
//! unhealthy, and for each, once it has been unhealthy long enough, the next
//! action (power cycles first, then reimages with its pinned revision, then
//! give up and say so). Pure: the actions are requests the Machine
//! controller carries out (`metalherd.dev/power-cycle`,
//! `metalherd.dev/reimage`), and the set's status keeps what was done.
//!
//! Rules:
//! - Only a Ready machine is judged: `NodeReady=False` (not `Unknown`: a
//!   cluster that cannot be asked says nothing of the node) and a failing
//!   health probe, as the policy selects.
//! - The breaker: with more machines unhealthy (or under remediation) than
//!   `maxUnhealthy`, nothing is remediated, and `RemediationAllowed=False`
//!   says which and why.
//! - A machine of the batch in flight, a paused one, or one that is not
//!   Ready (reimaging) gets no action; a machine under remediation is left
//!   out of new batches (`rollout`), so a rollout and a remediation never
//!   act on one machine at once.
//! - After an action the machine has `recoverySeconds` to come back before
//!   the next one; healthy for `unhealthySeconds` after an action, it has
//!   recovered and its record goes.

use std::collections::BTreeMap;

use super::*;
use crate::api::remediation::{MachineRemediation, RemediationAction, Resolved};

/// A machine of the set, judged by the policy: why it is unhealthy.
fn unhealthy(r: &Resolved, m: &MachineView) -> Option<String> {
    if m.phase != MachinePhase::Ready {
        return None;
    }
    let node = r.node_not_ready && m.health.node_ready == Some(false) && !m.health.node_unknown;
    let probe = r.probe_failing && m.health.probe_ok == Some(false);
    (node || probe).then(|| {
        m.health
            .detail
            .clone()
            .unwrap_or_else(|| "unhealthy".to_string())
    })
}

/// Whether a record says an action is still at work on its machine (the
/// rollout leaves such a machine alone).
pub(super) fn acting(rec: &MachineRemediation, recovery: Duration, now: Timestamp) -> bool {
    !rec.exhausted
        && rec.healthy_since.is_none()
        && rec
            .last_action_at
            .is_some_and(|at| since(at, now) < recovery)
}

impl Planner<'_> {
    /// Machines the rollout must not take into a batch now.
    pub(super) fn under_remediation(&self) -> BTreeSet<String> {
        let Some(p) = &self.i.set.spec.remediation else {
            return BTreeSet::new();
        };
        let r = p.resolve(self.i.set.spec.replicas);
        let phases: BTreeMap<&str, MachinePhase> = self
            .i
            .claimed
            .iter()
            .map(|m| (m.name.as_str(), m.phase))
            .collect();
        self.st
            .remediations
            .iter()
            .filter(|rec| {
                acting(rec, r.recovery, self.i.now)
                    || (rec.last_action == Some(RemediationAction::Reimage)
                        && rec.healthy_since.is_none()
                        && phases
                            .get(rec.machine.as_str())
                            .is_some_and(|p| *p != MachinePhase::Ready))
            })
            .map(|rec| rec.machine.clone())
            .collect()
    }

    pub(super) fn remediate(&mut self) {
        let Some(policy) = &self.i.set.spec.remediation else {
            self.st.remediations.clear();
            return;
        };
        let r = policy.resolve(self.i.set.spec.replicas);
        let now = self.i.now;
        let machines: BTreeMap<String, MachineView> = self
            .staying()
            .into_iter()
            .map(|m| (m.name.clone(), m.clone()))
            .collect();
        let mut records: BTreeMap<String, MachineRemediation> =
            std::mem::take(&mut self.st.remediations)
                .into_iter()
                .filter(|rec| machines.contains_key(&rec.machine))
                .map(|rec| (rec.machine.clone(), rec))
                .collect();
        for m in machines.values() {
            let why = unhealthy(&r, m);
            match (why, records.get_mut(&m.name)) {
                (Some(why), Some(rec)) => {
                    rec.healthy_since = None;
                    rec.unhealthy_since.get_or_insert(now);
                    rec.reason = why;
                }
                (Some(why), None) => {
                    records.insert(
                        m.name.clone(),
                        MachineRemediation {
                            machine: m.name.clone(),
                            unhealthy_since: Some(now),
                            reason: why,
                            ..Default::default()
                        },
                    );
                }
                (None, Some(rec)) if rec.last_action.is_none() => {
                    records.remove(&m.name);
                }
                (None, Some(rec)) if m.phase != MachinePhase::Ready => {
                    // Being reimaged: once Ready again it is judged afresh.
                    rec.unhealthy_since = None;
                }
                (None, Some(rec)) => {
                    let at = *rec.healthy_since.get_or_insert(now);
                    if since(at, now) >= r.unhealthy {
                        let what = rec
                            .last_action
                            .map_or("", RemediationAction::as_str)
                            .to_string();
                        let name = m.name.clone();
                        records.remove(&name);
                        self.event(
                            false,
                            "RemediationSucceeded",
                            format!("{name} healthy again after {what}"),
                        );
                    }
                }
                (None, None) => {}
            }
        }
        let unhealthy: Vec<String> = records
            .values()
            .filter(|rec| rec.healthy_since.is_none())
            .map(|rec| rec.machine.clone())
            .collect();
        let n = u32::try_from(unhealthy.len()).unwrap_or(u32::MAX);
        let replicas = self.i.set.spec.replicas;
        if n > r.max_unhealthy {
            let was_open = self
                .st
                .conditions
                .iter()
                .any(|c| c.type_ == cond::REMEDIATION && c.status == ConditionStatus::False);
            let msg = format!(
                "{n} of {replicas} machines unhealthy ({}), more than maxUnhealthy {}: none is remediated",
                unhealthy.join(", "),
                r.max_unhealthy
            );
            if !was_open {
                self.event(true, "TooManyUnhealthy", msg.clone());
            }
            self.condition(cond::REMEDIATION, false, "TooManyUnhealthy", msg);
            self.st.remediations = records.into_values().collect();
            return;
        }
        self.condition(
            cond::REMEDIATION,
            true,
            "WithinMaxUnhealthy",
            format!(
                "{n} of {replicas} machines unhealthy (maxUnhealthy {})",
                r.max_unhealthy
            ),
        );
        let in_batch: BTreeSet<String> = self
            .st
            .current_batch
            .iter()
            .flat_map(|b| b.machines.iter().map(|m| m.name.clone()))
            .collect();
        let set_name = self.i.set.metadata.name.clone().unwrap_or_default();
        for rec in records.values_mut() {
            let Some(m) = machines.get(&rec.machine) else {
                continue;
            };
            let Some(since_when) = rec.unhealthy_since else {
                continue;
            };
            if rec.exhausted
                || rec.healthy_since.is_some()
                || m.paused
                || m.phase != MachinePhase::Ready
                || in_batch.contains(&rec.machine)
                || since(since_when, now) < r.unhealthy
                || rec
                    .last_action_at
                    .is_some_and(|at| since(at, now) < r.recovery)
            {
                continue;
            }
            let (action, n, of) = if rec.power_cycles < r.power_cycles {
                rec.power_cycles += 1;
                (
                    RemediationAction::PowerCycle,
                    rec.power_cycles,
                    r.power_cycles,
                )
            } else if rec.reimages < r.reimages {
                rec.reimages += 1;
                (RemediationAction::Reimage, rec.reimages, r.reimages)
            } else {
                rec.exhausted = true;
                self.event(
                    true,
                    "RemediationExhausted",
                    format!(
                        "{} still unhealthy ({}) after {} power cycles and {} reimages: left alone",
                        rec.machine, rec.reason, rec.power_cycles, rec.reimages
                    ),
                );
                continue;
            };
            rec.last_action = Some(action);
            rec.last_action_at = Some(now);
            let request = format!(
                "MachineSet {set_name}: {} {n} of {of} at {now}: {}",
                action.as_str(),
                rec.reason
            );
            self.event(
                false,
                &format!("Remediation{}", action.as_str()),
                format!("{}: {request}", rec.machine),
            );
            self.actions.push(Action::Remediate {
                machine: rec.machine.clone(),
                action,
                request,
            });
        }
        self.st.remediations = records.into_values().collect();
    }
}

#[cfg(test)]
mod tests;
