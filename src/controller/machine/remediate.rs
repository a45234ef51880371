//! A standalone Machine's own remediation (`spec.remediation`): its Node
//! NotReady for `unhealthySeconds` gets it power-cycled, then reimaged with
//! its class's revision, as a MachineSet's policy does for the machines it
//! claims (the same record rules: `crate::controller::remediation`). A
//! machine a set claims is the set's to remediate: its own policy waits.
//! Pure, part of `decide`.

use super::decide::{Planner, again, wait};
use super::plan::{BmcObserved, Mark, Step, cond};
use crate::api::machine_set::SET_LABEL;
use crate::api::{BootStep, ConditionStatus, MachinePhase, RemediationAction};
use crate::controller::remediation::{Next, Seen, exhausted_message, next, observe, request};

impl Planner<'_> {
    /// The policy that applies to this machine, if any.
    fn own_policy(&self) -> Option<crate::api::remediation::Resolved> {
        let claimed = self
            .m
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(SET_LABEL));
        let p = self.m.spec.remediation.as_ref().filter(|_| !claimed)?;
        Some(p.resolve(1))
    }

    /// Fold what was seen of the machine into its record (phases Ready and
    /// Reimaging, after the Node was observed).
    pub fn remediation_record(&mut self) {
        let Some(r) = self.own_policy() else {
            if self.st.remediation.is_some() {
                self.push(Step::SetRemediation(None));
            }
            return;
        };
        let seen = if self.phase() != MachinePhase::Ready {
            Seen::NotReady
        } else {
            match crate::api::condition::find_condition(&self.st.conditions, cond::NODE_READY) {
                Some(c) if r.node_not_ready && c.status == ConditionStatus::False => {
                    Seen::Unhealthy(format!("NodeReady=False: {}", c.reason))
                }
                _ => Seen::Healthy,
            }
        };
        let name = self.m.metadata.name.clone().unwrap_or_default();
        let o = observe(self.st.remediation.clone(), &name, seen, &r, self.now);
        if o.recovered.is_some()
            && crate::api::condition::find_condition(&self.st.conditions, cond::REMEDIATION)
                .is_some_and(|c| c.status == ConditionStatus::False)
        {
            self.condition(
                cond::REMEDIATION,
                ConditionStatus::True,
                "Recovered",
                String::new(),
            );
        }
        if o.record != self.st.remediation {
            self.push(Step::SetRemediation(o.record));
        }
    }

    /// The action due on a Ready machine, if one is: its record goes out
    /// before the power cycle, so a restart does not cycle twice.
    pub fn remediation_action(&mut self) -> Option<Step> {
        let r = self.own_policy()?;
        let mut rec = self.st.remediation.clone()?;
        let due = next(&mut rec, &r, self.now);
        if due == Next::Wait {
            return None;
        }
        if let Next::Act {
            action: RemediationAction::PowerCycle,
            ..
        } = due
            && !matches!(self.o.bmc, BmcObserved::Reachable { .. })
        {
            return Some(self.wait_bmc());
        }
        self.push(Step::SetRemediation(Some(rec.clone())));
        match due {
            Next::Wait => None,
            Next::GiveUp => {
                self.condition(
                    cond::REMEDIATION,
                    ConditionStatus::False,
                    "RemediationExhausted",
                    exhausted_message(&rec),
                );
                None
            }
            Next::Act { action, n, of } => {
                let v = request("Machine policy", action, n, of, self.now, &rec.reason);
                match action {
                    RemediationAction::PowerCycle => {
                        self.set_progress(Mark::PowerCycleRequest(v.clone()));
                        self.push(Step::Note {
                            step: BootStep::PowerCycled,
                            detail: v,
                        });
                        self.push(Step::PowerCycle);
                        Some(wait(self.o.limits.poll, "power cycle"))
                    }
                    RemediationAction::Reimage => {
                        self.push(Step::Note {
                            step: BootStep::ReimageRequested,
                            detail: v,
                        });
                        self.start_run(MachinePhase::Reimaging);
                        Some(again())
                    }
                }
            }
        }
    }
}
