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
use crate::controller::remediation::{
    Next, Seen, acting, exhausted_message, next, observe, request,
};

/// A machine of the set, judged by the policy.
fn seen(r: &Resolved, m: &MachineView) -> Seen {
    if m.phase != MachinePhase::Ready {
        return Seen::NotReady;
    }
    let node = r.node_not_ready && m.health.node_ready == Some(false) && !m.health.node_unknown;
    let probe = r.probe_failing && m.health.probe_ok == Some(false);
    if node || probe {
        Seen::Unhealthy(
            m.health
                .detail
                .clone()
                .unwrap_or_else(|| "unhealthy".to_string()),
        )
    } else {
        Seen::Healthy
    }
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
        let mut old: BTreeMap<String, MachineRemediation> =
            std::mem::take(&mut self.st.remediations)
                .into_iter()
                .map(|rec| (rec.machine.clone(), rec))
                .collect();
        let mut records: BTreeMap<String, MachineRemediation> = BTreeMap::new();
        for m in machines.values() {
            let o = observe(old.remove(&m.name), &m.name, seen(&r, m), &r, now);
            if let Some(after) = o.recovered {
                self.event(
                    false,
                    "RemediationSucceeded",
                    format!("{} healthy again after {}", m.name, after.as_str()),
                );
            }
            if let Some(rec) = o.record {
                records.insert(m.name.clone(), rec);
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
        let who = format!(
            "MachineSet {}",
            self.i.set.metadata.name.as_deref().unwrap_or_default()
        );
        for rec in records.values_mut() {
            let Some(m) = machines.get(&rec.machine) else {
                continue;
            };
            if m.paused || m.phase != MachinePhase::Ready || in_batch.contains(&rec.machine) {
                continue;
            }
            match next(rec, &r, now) {
                Next::Wait => {}
                Next::GiveUp => {
                    self.event(true, "RemediationExhausted", exhausted_message(rec));
                }
                Next::Act { action, n, of } => {
                    let request = request(&who, action, n, of, now, &rec.reason);
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
            }
        }
        self.st.remediations = records.into_values().collect();
    }
}

#[cfg(test)]
mod tests;
