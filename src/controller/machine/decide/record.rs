//! How the Planner records what it decided: every change of phase,
//! condition, progress marker or last error becomes a [`Step`] (applied to
//! the planned status at once, so later decisions in the same plan see
//! it), and only when it changes something, so a settled machine gets a
//! plan without writes. Also the two facts about the object every decision
//! asks: its finalizer and its Node's name.

use super::super::plan::{
    BootProgress, FINALIZER, Mark, MarkKey, Step, apply_status, cond, node_name,
};
use super::Planner;
use crate::api::condition::find_condition;
use crate::api::{Condition, ConditionStatus, MachinePhase};

impl Planner<'_> {
    pub fn push(&mut self, s: Step) {
        apply_status(&mut self.st, &s, self.now);
        self.steps.push(s);
    }

    pub fn phase(&self) -> MachinePhase {
        self.st.phase.unwrap_or_default()
    }

    /// `status.progress` as planned so far.
    pub fn progress(&self) -> &BootProgress {
        &self.st.progress
    }

    pub fn set_phase(&mut self, p: MachinePhase) {
        if self.st.phase != Some(p) {
            self.push(Step::SetPhase(p));
        }
    }

    pub fn condition(
        &mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: String,
    ) {
        if let Some(c) = find_condition(&self.st.conditions, type_)
            && c.status == status
            && c.reason == reason
            && c.message == message
        {
            return;
        }
        self.push(Step::SetCondition(Condition {
            type_: type_.to_string(),
            status,
            observed_generation: self.m.metadata.generation,
            last_transition_time: self.now,
            reason: reason.to_string(),
            message,
        }));
    }

    pub fn set_progress(&mut self, mark: Mark) {
        if !self.st.progress.has(&mark) {
            self.push(Step::SetProgress(mark));
        }
    }

    pub fn clear_progress(&mut self, key: MarkKey) {
        if self.st.progress.contains(key) {
            self.push(Step::ClearProgress(key));
        }
    }

    pub fn error(&mut self, reason: &str, message: String) {
        if let Some(e) = &self.st.last_error
            && e.reason == reason
            && e.message == message
        {
            return;
        }
        self.push(Step::RecordError {
            reason: reason.to_string(),
            message,
        });
    }

    pub fn clear_error(&mut self) {
        if self.st.last_error.is_some() {
            self.push(Step::ClearError);
        }
    }

    /// Drop the `Waiting` condition's True once the machine moves on.
    pub fn clear_waiting(&mut self) {
        if find_condition(&self.st.conditions, cond::WAITING)
            .is_some_and(|c| c.status == ConditionStatus::True)
        {
            self.condition(
                cond::WAITING,
                ConditionStatus::False,
                "SlotAcquired",
                String::new(),
            );
        }
    }

    pub fn has_finalizer(&self) -> bool {
        self.m
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == FINALIZER)
    }

    /// The Node this machine is (or will be) known as.
    pub fn node(&self) -> String {
        self.st
            .node_ref
            .as_ref()
            .map(|r| r.name.clone())
            .unwrap_or_else(|| node_name(self.m))
    }
}
