//! The end of a rollout: every machine of the set carries the update
//! revision. Complete when all of them passed their health gate and the set
//! holds `replicas` machines; otherwise still progressing, and why. Pure.

use std::collections::BTreeMap;

use super::*;

impl Planner<'_> {
    /// Every staying machine is pinned to `update`: mark the revision
    /// passed and the rollout complete, or say what it still waits for.
    pub(super) fn settle(&mut self, update: i64, machines: &BTreeMap<String, MachineView>) {
        let claiming = self
            .actions
            .iter()
            .any(|a| matches!(a, Action::Claim { .. }));
        let all_passed = machines.values().all(|m| self.healthy(m, update));
        if !all_passed || claiming {
            self.st.rollout_state = Some(RolloutState::Progressing);
            return;
        }
        // Every machine the set holds runs the revision and passed its
        // gate: the revision is known good (what a rollback returns to).
        let news = self.st.rollout_state == Some(RolloutState::Progressing)
            || self.st.current_revision != Some(update);
        self.st.current_revision = Some(update);
        if let Some(r) = self.st.revisions.iter_mut().find(|r| r.revision == update) {
            r.passed = true;
        }
        let want = usize::try_from(self.i.set.spec.replicas).unwrap_or(0);
        if machines.len() < want {
            // The pool is short (see PoolSufficient): not complete until
            // the set holds `replicas` machines, as `rollout status` says.
            self.st.rollout_state = Some(RolloutState::Progressing);
            self.condition(
                cond::PROGRESSING,
                true,
                "WaitingForMachines",
                format!(
                    "revision {update} on {} of {want} machines; the pool is short (PoolSufficient)",
                    machines.len()
                ),
            );
            return;
        }
        if news {
            self.event(
                false,
                "RolloutComplete",
                format!("revision {update} is rolled out"),
            );
        }
        self.st.rollout_state = Some(RolloutState::Complete);
        self.condition(
            cond::PROGRESSING,
            true,
            "Complete",
            format!("revision {update}"),
        );
    }
}
