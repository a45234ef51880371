//! The batch half of the MachineSet planner: a batch's health gate, its
//! failure (and rollback), history pruning and the status counts. Pure.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

impl Planner<'_> {
    /// Advance the batch in flight. `true` when it is finished (passed) and
    /// the next may start; otherwise it stays (or has failed) in status.
    pub(super) fn gate(&mut self, b: &mut Batch, machines: &BTreeMap<String, MachineView>) -> bool {
        let hold = gate_hold(self.i.set);
        let mut failed: Vec<(String, String)> = Vec::new();
        for bm in &mut b.machines {
            let Some(m) = machines.get(&bm.name) else {
                continue;
            };
            if m.pinned != Some(b.revision) {
                // Recorded but not pinned yet (a restart in between).
                self.actions.push(Action::Pin {
                    machine: bm.name.clone(),
                    revision: b.revision,
                });
            }
            if bm.passed {
                continue;
            }
            if m.phase == MachinePhase::Error {
                failed.push((bm.name.clone(), "machine went to Error".into()));
                bm.healthy_since = None;
                continue;
            }
            if self.healthy(m, b.revision) {
                let t = *bm.healthy_since.get_or_insert(self.i.now);
                bm.passed = since(t, self.i.now) >= hold;
            } else {
                bm.healthy_since = None;
            }
        }
        if b.machines.iter().all(|m| m.passed) {
            b.finished_at = Some(self.i.now);
            let names: Vec<&str> = b.machines.iter().map(|m| m.name.as_str()).collect();
            let msg = format!("batch {} passed its gate: {}", b.number, names.join(", "));
            self.event(false, "BatchPassed", msg);
            if b.rollback {
                self.st.rollout_state = Some(RolloutState::RolledBack);
                self.condition(
                    cond::PROGRESSING,
                    false,
                    RolloutState::RolledBack.as_str(),
                    format!("failed batch rolled back to revision {}", b.revision),
                );
                // The bad update revision stays bad: nothing more to do.
                self.st.current_batch = None;
                return false;
            }
            self.st.completed_batches.push(b.clone());
            // Bounded: the status is rewritten as machines change, and a
            // large set has many batches (numbers keep counting).
            let over = self
                .st
                .completed_batches
                .len()
                .saturating_sub(BATCH_HISTORY);
            self.st.completed_batches.drain(..over);
            return true;
        }
        let late = since(b.started_at, self.i.now) >= deadline(self.i.set);
        if failed.is_empty() && late {
            for bm in b.machines.iter().filter(|m| !m.passed) {
                let why = machines
                    .get(&bm.name)
                    .and_then(|m| m.health.detail.clone())
                    .unwrap_or_else(|| "not through the health gate".into());
                failed.push((bm.name.clone(), why));
            }
        }
        if failed.is_empty() {
            self.st.current_batch = Some(b.clone());
            return false;
        }
        self.fail(b, failed, late);
        false
    }

    pub(super) fn fail(&mut self, b: &Batch, failed: Vec<(String, String)>, late: bool) {
        let reason = if late {
            "ProgressDeadlineExceeded"
        } else {
            "MachineFailed"
        };
        let detail: Vec<String> = failed.iter().map(|(n, w)| format!("{n}: {w}")).collect();
        let message = format!(
            "batch {} of revision {} failed: {}",
            b.number,
            b.revision,
            detail.join("; ")
        );
        self.event(true, reason, message.clone());
        self.st.last_failure = Some(RolloutFailure {
            revision: b.revision,
            batch: b.number,
            machines: failed.iter().map(|(n, _)| n.clone()).collect(),
            reason: reason.into(),
            message: message.clone(),
            at: self.i.now,
        });
        self.st.rollout_state = Some(RolloutState::Failed);
        self.condition(cond::PROGRESSING, false, reason, message);
        self.st.current_batch = None;
        if b.rollback {
            return;
        }
        if let Some(r) = self
            .st
            .revisions
            .iter_mut()
            .find(|r| r.revision == b.revision)
        {
            r.bad = true;
        }
        let good = self
            .st
            .current_revision
            .filter(|g| *g != b.revision && self.rev(*g).is_some());
        if let (true, Some(good)) = (auto_rollback(self.i.set), good) {
            let members = b.machines.iter().map(|m| m.name.clone()).collect();
            self.start_batch(b.number, good, members, true);
        }
    }

    pub(super) fn prune(&mut self) {
        let limit = self
            .i
            .set
            .spec
            .revision_history_limit
            .unwrap_or(DEFAULT_REVISION_HISTORY);
        let limit = usize::try_from(limit).unwrap_or(1).max(1);
        let mut keep: BTreeSet<i64> = self.i.claimed.iter().filter_map(|m| m.pinned).collect();
        keep.extend(self.st.current_revision);
        keep.extend(self.st.update_revision);
        if let Some(b) = &self.st.current_batch {
            keep.insert(b.revision);
        }
        self.st.revisions.sort_by_key(|r| r.revision);
        let newest: BTreeSet<i64> = self
            .st
            .revisions
            .iter()
            .rev()
            .take(limit)
            .map(|r| r.revision)
            .collect();
        self.st
            .revisions
            .retain(|r| keep.contains(&r.revision) || newest.contains(&r.revision));
    }

    pub(super) fn counts(&mut self) {
        let staying = self.staying();
        let n = |f: &dyn Fn(&MachineView) -> bool| {
            i32::try_from(staying.iter().filter(|m| f(m)).count()).unwrap_or(i32::MAX)
        };
        let update = self.st.update_revision;
        let current = self.st.current_revision;
        let gating: BTreeSet<&str> = self
            .st
            .current_batch
            .iter()
            .flat_map(|b| {
                b.machines
                    .iter()
                    .filter(|m| !m.passed)
                    .map(|m| m.name.as_str())
            })
            .collect();
        let replicas = n(&|_| true);
        let ready = n(&|m| m.phase == MachinePhase::Ready);
        let updated = n(&|m| update.is_some_and(|u| self.installed(m, u)));
        let currentn = n(&|m| current.is_some() && m.pinned == current);
        let available = n(&|m| {
            m.pinned.is_some_and(|p| self.healthy(m, p)) && !gating.contains(m.name.as_str())
        });
        self.st.replicas = replicas;
        self.st.ready_replicas = ready;
        self.st.updated_replicas = updated;
        self.st.current_replicas = currentn;
        self.st.available_replicas = available;
    }
}
